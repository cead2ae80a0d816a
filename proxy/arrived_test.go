package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/providers"
	"github.com/webhook-dedup/webhook-dedup/proxy"

	// Named apart from this package's upstream, the test app.
	upstreamhttp "github.com/webhook-dedup/webhook-dedup/upstream"
)

// writeCounter counts the writes made on a connection to the upstream.
type writeCounter struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCounter) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// arrivedFixture is a proxy with a header-sourced route (/gh=github) in
// front of an upstream that reads the whole body, reports each request's
// arrival, and counts the writes the proxy makes to it.
type arrivedFixture struct {
	srv     *httptest.Server
	store   *memstore.Store
	writes  atomic.Int64
	arrived chan struct{}
	bodies  chan []byte
}

func newArrivedFixture(t *testing.T, maxBody int64) *arrivedFixture {
	t.Helper()
	f := &arrivedFixture{arrived: make(chan struct{}, 4), bodies: make(chan []byte, 4), store: memstore.New()}
	t.Cleanup(func() { _ = f.store.Close() })
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.arrived <- struct{}{}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.bodies <- body
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	tr := upstreamhttp.NewTransport()
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{Conn: c, writes: &f.writes}, nil
	}
	t.Cleanup(tr.CloseIdleConnections)
	src, err := providers.ParseSource("/gh", "github", providers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(newHandler(t, proxy.Config{
		Upstream:     u,
		Routes:       []proxy.Route{{Path: "/gh", Source: src}},
		Store:        f.store,
		KeyPrefix:    "test:",
		MaxBodyBytes: maxBody,
		Transport:    tr,
		Metrics:      proxy.NewMetrics(prometheus.NewRegistry()),
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// expectForwarded checks that the upstream got body whole and that the
// completed record holds its fingerprint.
func (f *arrivedFixture) expectForwarded(t *testing.T, id string, body []byte) {
	t.Helper()
	select {
	case got := <-f.bodies:
		if !bytes.Equal(got, body) {
			t.Fatalf("the upstream got %d bytes, want the %d sent", len(got), len(body))
		}
	case <-time.After(loadMargin):
		t.Fatalf("the upstream got no body within %s", loadMargin)
	}
	rec := pollSettled(t, f.store, "test:github:"+id)
	if rec.State != dedup.Completed || rec.Result.Fingerprint != sha256.Sum256(body) {
		t.Fatalf("record %v with fingerprint %x, want completed with the body's", rec.State, rec.Result.Fingerprint)
	}
}

// post sends body to the header-sourced route and checks the answer.
func (f *arrivedFixture) post(t *testing.T, id string, body []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/gh", bytes.NewReader(body))
	req.Header.Set("X-GitHub-Delivery", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderOutcome) != "forwarded" {
		t.Fatalf("answered %d %q, want 200 forwarded", resp.StatusCode, resp.Header.Get(proxy.HeaderOutcome))
	}
}

// TestArrivedBodyOneWrite: on a header-sourced route, a small body that
// arrived with its headers reaches the upstream in the same write as the
// request's headers; a body over 16 KiB streams (headers first).
func TestArrivedBodyOneWrite(t *testing.T) {
	for _, tc := range []struct {
		name       string
		size       int
		wantWrites func(int64) bool
		want       string
	}{
		{"arrived whole", 1 << 10, func(n int64) bool { return n == 1 }, "1"},
		{"over 16 KiB", 64 << 10, func(n int64) bool { return n >= 2 }, "2 or more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newArrivedFixture(t, 0)
			body := bytes.Repeat([]byte("a"), tc.size)
			f.post(t, "w1", body)
			f.expectForwarded(t, "w1", body)
			if n := f.writes.Load(); !tc.wantWrites(n) {
				t.Errorf("the proxy wrote the request to the upstream in %d writes, want %s", n, tc.want)
			}
		})
	}
}

// TestArrivedBodyPartStreams: when only part of a small body has arrived,
// the proxy does not wait for the rest: the upstream gets the request while
// the sender still holds the second half back.
func TestArrivedBodyPartStreams(t *testing.T) {
	f := newArrivedFixture(t, 0)
	body := bytes.Repeat([]byte("b"), 2048)
	conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	head := fmt.Sprintf("POST /gh HTTP/1.1\r\nHost: example.test\r\nX-GitHub-Delivery: p1\r\nContent-Length: %d\r\n\r\n", len(body))
	if _, err := io.WriteString(conn, head+string(body[:1024])); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.arrived:
	case <-time.After(loadMargin):
		t.Fatal("the upstream saw nothing of a request whose body is half sent: the proxy waited for the rest")
	}
	if _, err := conn.Write(body[1024:]); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("answered %d, want 200", resp.StatusCode)
	}
	f.expectForwarded(t, "p1", body)
}

// TestArrivedBodyIgnoresMaxBodyBytes: MAX_BODY_BYTES bounds what the proxy
// must hold; a header-sourced route's body is never refused for its size.
func TestArrivedBodyIgnoresMaxBodyBytes(t *testing.T) {
	f := newArrivedFixture(t, 100)
	body := []byte(strings.Repeat("c", 1000))
	f.post(t, "m1", body)
	f.expectForwarded(t, "m1", body)
}
