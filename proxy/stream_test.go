package proxy_test

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/providers"
	"github.com/webhook-dedup/webhook-dedup/proxy"
)

// A streamed body (header-sourced route) is fingerprinted on its way to the
// upstream; when the upstream answers before reading it all, the record
// keeps no fingerprint rather than the hash of a part.
func TestStreamedBodyFingerprint(t *testing.T) {
	for _, tc := range []struct {
		name     string
		readBody bool
		size     int
	}{
		{"read to the end", true, 1 << 10},
		// Far more than loopback socket buffers hold, so the upstream's
		// answer arrives while the body is still being sent.
		{"answered early", false, 32 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.readBody {
					_, _ = io.Copy(io.Discard, r.Body)
				}
				_, _ = io.WriteString(w, "ok")
			}))
			t.Cleanup(up.Close)
			u, _ := url.Parse(up.URL)
			store := memstore.New()
			t.Cleanup(func() { _ = store.Close() })
			src, err := providers.ParseSource("/gh", "github", providers.Options{})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(newHandler(t, proxy.Config{
				Upstream:  u,
				Routes:    []proxy.Route{{Path: "/gh", Source: src}},
				Store:     store,
				KeyPrefix: "test:",
				Metrics:   proxy.NewMetrics(prometheus.NewRegistry()),
			}))
			t.Cleanup(srv.Close)

			body := bytes.Repeat([]byte("a"), tc.size)
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/gh", bytes.NewReader(body))
			req.Header.Set("X-GitHub-Delivery", "fp1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				// Sending the rest may fail once the upstream has answered
				// and closed; the record is what this test is about.
				t.Logf("POST: %v", err)
			} else {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}

			rec := pollSettled(t, store, "test:github:fp1")
			if rec.State != dedup.Completed {
				t.Fatalf("record %v, want completed", rec.State)
			}
			want := [32]byte{}
			if tc.readBody {
				want = sha256.Sum256(body)
			}
			if rec.Result.Fingerprint != want {
				t.Fatalf("fingerprint %x, want %x", rec.Result.Fingerprint, want)
			}
		})
	}
}

// An answer the upstream streams (no Content-Length) reaches the sender as
// it is written, not when it ends.
func TestStreamedAnswerIsRelayedAsWritten(t *testing.T) {
	f := newFixture(t, "/gh=github", proxy.Config{})
	release := make(chan struct{})
	f.up.setAnswer(func(w http.ResponseWriter, r *http.Request, body []byte) {
		_, _ = io.WriteString(w, "first")
		http.NewResponseController(w).Flush()
		<-release
		_, _ = io.WriteString(w, "second")
	})
	defer close(release)
	resp := f.post(t, "/gh", gh("st1"), "{}")
	wantAnswer(t, resp, http.StatusOK, "forwarded")
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, len("first"))
		_, err := io.ReadFull(resp.Body, buf)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(buf)
	}()
	select {
	case s := <-got:
		if s != "first" {
			t.Fatalf("read %q, want the first part", s)
		}
	case <-time.After(loadMargin):
		t.Fatal("the first part did not arrive while the upstream was still answering")
	}
}
