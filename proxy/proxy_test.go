package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/providers"
	"github.com/webhook-dedup/webhook-dedup/proxy"
)

// upstream is a real HTTP server standing in for the app: it records what
// it received and answers as told.
type upstream struct {
	*httptest.Server
	mu       sync.Mutex
	received []*received
	calls    atomic.Int64
	// answer decides the response; nil: 200 "ok".
	answer func(w http.ResponseWriter, r *http.Request, body []byte)
}

type received struct {
	method, path, query, host string
	header                    http.Header
	body                      string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		u.calls.Add(1)
		u.mu.Lock()
		u.received = append(u.received, &received{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Clone(), string(body)})
		answer := u.answer
		u.mu.Unlock()
		if answer != nil {
			answer(w, r, body)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) setAnswer(f func(w http.ResponseWriter, r *http.Request, body []byte)) {
	u.mu.Lock()
	u.answer = f
	u.mu.Unlock()
}

func (u *upstream) last(t *testing.T) *received {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.received) == 0 {
		t.Fatal("upstream received nothing")
	}
	return u.received[len(u.received)-1]
}

type fixture struct {
	up    *upstream
	store proxy.Store
	h     *proxy.Handler
	srv   *httptest.Server
	reg   *prometheus.Registry // the handler's metrics
}

// newFixture runs the proxy in front of a fresh upstream with routes (the
// ROUTES syntax), on an embedded store unless cfg names one.
func newFixture(t *testing.T, routes string, cfg proxy.Config) *fixture {
	t.Helper()
	up := newUpstream(t)
	u, _ := url.Parse(up.URL)
	cfg.Upstream = u
	if cfg.Store == nil {
		m := dedup.NewMemory()
		t.Cleanup(func() { m.Close() })
		cfg.Store = m
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "test:"
	}
	reg := prometheus.NewRegistry()
	cfg.Metrics = proxy.NewMetrics(reg)
	for _, entry := range strings.Split(routes, ",") {
		path, spec, _ := strings.Cut(entry, "=")
		spec, mode, _ := strings.Cut(spec, ";")
		var delivery proxy.DeliveryMode
		if mode != "" {
			if err := delivery.UnmarshalText([]byte(mode)); err != nil {
				t.Fatal(err)
			}
		}
		src, err := providers.ParseSource(path, spec, providers.Options{})
		if err != nil {
			t.Fatalf("ParseSource(%q, %q): %v", path, spec, err)
		}
		cfg.Routes = append(cfg.Routes, proxy.Route{Path: path, Source: src, Delivery: delivery})
	}
	h := proxy.New(cfg)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{up: up, store: cfg.Store, h: h, srv: srv, reg: reg}
}

// counter is the value of the metric name whose label has the value, summed
// over its other labels; 0 when there is no such series.
func (f *fixture) counter(t *testing.T, name, label, value string) float64 {
	t.Helper()
	return counterValue(t, f.reg, name, label, value)
}

// counterValue is fixture.counter for any registry.
func counterValue(t *testing.T, reg prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// pollCounter waits, with a deadline, for a counter to reach want: a
// handler whose sender is gone finishes after the sender stops waiting.
func (f *fixture) pollCounter(t *testing.T, name, label, value string, want float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for f.counter(t, name, label, value) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s{%s=%q} = %v after 5s, want %v", name, label, value, f.counter(t, name, label, value), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fixture) post(t *testing.T, path string, header map[string]string, body string) *http.Response {
	t.Helper()
	resp, err := f.send(t, path, header, body)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// postAsync posts from another goroutine; the answer arrives on the channel.
func (f *fixture) postAsync(t *testing.T, path string, header map[string]string, body string) <-chan *http.Response {
	ch := make(chan *http.Response, 1)
	go func() {
		resp, err := f.send(t, path, header, body)
		if err != nil {
			t.Error(err)
		}
		ch <- resp
	}()
	return ch
}

func (f *fixture) send(t *testing.T, path string, header map[string]string, body string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, nil
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wantAnswer(t *testing.T, resp *http.Response, status int, outcome string) {
	t.Helper()
	if resp.StatusCode != status || resp.Header.Get(proxy.HeaderOutcome) != outcome {
		t.Fatalf("got %d %s=%q, want %d %q", resp.StatusCode, proxy.HeaderOutcome, resp.Header.Get(proxy.HeaderOutcome), status, outcome)
	}
}

func gh(id string) map[string]string { return map[string]string{"X-GitHub-Delivery": id} }

func TestFirstSeenIsForwardedAndDuplicateAnswered(t *testing.T) {
	f := newFixture(t, "/gh=github", proxy.Config{})
	resp := f.post(t, "/gh", gh("d1"), `{"a":1}`)
	wantAnswer(t, resp, http.StatusOK, "forwarded")
	if got := readAll(t, resp); got != "ok" {
		t.Fatalf("body %q, want the upstream's", got)
	}

	resp = f.post(t, "/gh", gh("d1"), `{"a":1}`)
	wantAnswer(t, resp, http.StatusOK, "duplicate")
	var body map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body["status"] != "duplicate" || body["event_id"] != "d1" {
		t.Fatalf("duplicate body %v", body)
	}
	if n := f.up.calls.Load(); n != 1 {
		t.Fatalf("upstream called %d times, want 1", n)
	}
}

func TestUpstreamReceivesRequestUnchanged(t *testing.T) {
	f := newFixture(t, "/hooks=header:X-Id", proxy.Config{})
	body := "raw body \x00 with bytes\r\n"
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/hooks/a/b?x=1&y=%2F", strings.NewReader(body))
	req.Host = "sender.example"
	req.Header.Set("X-Id", "e1")
	req.Header.Set("X-Signature", "sig")
	req.Header.Add("X-Multi", "1")
	req.Header.Add("X-Multi", "2")
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	req.Header.Set("Accept-Encoding", "identity") // otherwise Go's client asks for gzip itself
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	wantAnswer(t, resp, http.StatusOK, "forwarded")
	got := f.up.last(t)
	if got.method != "POST" || got.path != "/hooks/a/b" || got.query != "x=1&y=%2F" || got.host != "sender.example" || got.body != body {
		t.Fatalf("upstream got %s %s?%s host %s body %q", got.method, got.path, got.query, got.host, got.body)
	}
	if got.header.Get("X-Signature") != "sig" || strings.Join(got.header.Values("X-Multi"), ",") != "1,2" {
		t.Fatalf("headers changed: %v", got.header)
	}
	if xff := got.header.Get("X-Forwarded-For"); !strings.HasPrefix(xff, "203.0.113.7, 127.0.0.1") {
		t.Fatalf("X-Forwarded-For %q, want the chain extended", xff)
	}
	if got.header.Get("X-Forwarded-Host") != "sender.example" || got.header.Get("X-Forwarded-Proto") != "http" {
		t.Fatalf("X-Forwarded-Host/Proto: %v", got.header)
	}
	if ae := got.header.Values("Accept-Encoding"); len(ae) != 1 || ae[0] != "identity" {
		t.Fatalf("Accept-Encoding %q, want the sender's alone", ae)
	}
}

func TestPassThrough(t *testing.T) {
	f := newFixture(t, "/gh=github,/auto=auto", proxy.Config{})
	for _, tc := range []struct {
		name, method, path string
		header             map[string]string
	}{
		{"GET on a route", http.MethodGet, "/gh", gh("p1")},
		{"unmatched path", http.MethodPost, "/other", gh("p2")},
		{"segment boundary", http.MethodPost, "/ghx", gh("p3")},
		{"auto recognises nothing", http.MethodPost, "/auto", map[string]string{"X-Foo": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < 2; i++ {
				req, _ := http.NewRequest(tc.method, f.srv.URL+tc.path, strings.NewReader("{}"))
				for k, v := range tc.header {
					req.Header.Set(k, v)
				}
				before := f.up.calls.Load()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 200 || resp.Header.Get(proxy.HeaderOutcome) != "" {
					t.Fatalf("got %d with %s=%q, want 200 with no header", resp.StatusCode, proxy.HeaderOutcome, resp.Header.Get(proxy.HeaderOutcome))
				}
				if f.up.calls.Load() != before+1 {
					t.Fatal("not forwarded")
				}
			}
		})
	}
}

func TestNon2xxReleasesSoRetryIsForwarded(t *testing.T) {
	f := newFixture(t, "/gh=github", proxy.Config{})
	f.up.setAnswer(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("X-App", "failing")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "boom")
	})
	resp := f.post(t, "/gh", gh("r1"), "{}")
	wantAnswer(t, resp, http.StatusInternalServerError, "forwarded")
	if readAll(t, resp) != "boom" || resp.Header.Get("X-App") != "failing" {
		t.Fatal("upstream's error answer not relayed unchanged")
	}
	f.up.setAnswer(nil)
	resp = f.post(t, "/gh", gh("r1"), "{}")
	wantAnswer(t, resp, http.StatusOK, "forwarded")
	resp = f.post(t, "/gh", gh("r1"), "{}")
	wantAnswer(t, resp, http.StatusOK, "duplicate")
	if n := f.up.calls.Load(); n != 2 {
		t.Fatalf("upstream called %d times, want 2", n)
	}
}

// blockingUpstream holds requests until release is closed and signals each arrival.
func blockingUpstream(f *fixture) (arrived chan struct{}, release chan struct{}) {
	arrived, release = make(chan struct{}, 16), make(chan struct{})
	f.up.setAnswer(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		arrived <- struct{}{}
		<-release
	})
	return arrived, release
}

func TestInFlightDuplicate(t *testing.T) {
	f := newFixture(t, "/gh=github,/bb=bitbucket", proxy.Config{LeaseTTL: 30 * time.Second})
	arrived, release := blockingUpstream(f)
	first := f.postAsync(t, "/gh", gh("f1"), "{}")
	<-arrived

	resp := f.post(t, "/gh", gh("f1"), "{}")
	wantAnswer(t, resp, http.StatusConflict, "in-flight")
	if ra := resp.Header.Get("Retry-After"); ra == "" || ra == "0" || strings.ContainsAny(ra, ".s") {
		t.Fatalf("Retry-After %q, want whole seconds > 0", ra)
	}

	firstBB := f.postAsync(t, "/bb", map[string]string{"X-Request-UUID": "b1", "X-Event-Key": "repo:push"}, "{}")
	<-arrived
	resp = f.post(t, "/bb", map[string]string{"X-Request-UUID": "b1", "X-Event-Key": "repo:push"}, "{}")
	wantAnswer(t, resp, http.StatusServiceUnavailable, "in-flight") // Bitbucket retries only 5xx
	close(release)
	wantAnswer(t, <-first, http.StatusOK, "forwarded")
	wantAnswer(t, <-firstBB, http.StatusOK, "forwarded")
}

func TestInflightWait(t *testing.T) {
	for _, tc := range []struct {
		name        string
		firstStatus int
		want        string
	}{
		{"first completes: duplicate", http.StatusOK, "duplicate"},
		{"first fails: forwarded", http.StatusInternalServerError, "forwarded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "/gh=github", proxy.Config{InflightWait: 20 * time.Second})
			arrived, release := make(chan struct{}, 2), make(chan struct{})
			var n atomic.Int64
			f.up.setAnswer(func(w http.ResponseWriter, r *http.Request, _ []byte) {
				if n.Add(1) == 1 {
					arrived <- struct{}{}
					<-release
					w.WriteHeader(tc.firstStatus)
				}
			})
			first := f.postAsync(t, "/gh", gh("w1"), "{}")
			<-arrived
			second := f.postAsync(t, "/gh", gh("w1"), "{}")
			// The second copy is waiting (it cannot have been answered: the
			// first holds the claim); let the first finish.
			close(release)
			wantAnswer(t, <-first, tc.firstStatus, "forwarded")
			wantAnswer(t, <-second, http.StatusOK, tc.want)
		})
	}
}

func TestInflightWaitEndsUnresolved(t *testing.T) {
	f := newFixture(t, "/gh=github", proxy.Config{InflightWait: 100 * time.Millisecond, InflightStatus: http.StatusServiceUnavailable})
	arrived, release := blockingUpstream(f)
	defer close(release)
	f.postAsync(t, "/gh", gh("u1"), "{}")
	<-arrived
	resp := f.post(t, "/gh", gh("u1"), "{}")
	wantAnswer(t, resp, http.StatusServiceUnavailable, "in-flight")
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
}

func TestUpstreamFailuresRelease(t *testing.T) {
	t.Run("unreachable: 502", func(t *testing.T) {
		f := newFixture(t, "/gh=github", proxy.Config{})
		f.up.Close()
		resp := f.post(t, "/gh", gh("x1"), "{}")
		wantAnswer(t, resp, http.StatusBadGateway, "upstream-error")
		assertFree(t, f.store, "test:github:x1")
	})
	t.Run("timeout: 504", func(t *testing.T) {
		f := newFixture(t, "/gh=github", proxy.Config{UpstreamTimeout: 100 * time.Millisecond})
		_, release := blockingUpstream(f)
		defer close(release)
		resp := f.post(t, "/gh", gh("x2"), "{}")
		wantAnswer(t, resp, http.StatusGatewayTimeout, "upstream-error")
		assertFree(t, f.store, "test:github:x2")
	})
}

func TestClientGoneReleases(t *testing.T) {
	f := newFixture(t, "/gh=github", proxy.Config{})
	arrived, release := blockingUpstream(f)
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/gh", strings.NewReader("{}"))
	req.Header.Set("X-GitHub-Delivery", "c1")
	done := doAsync(req)
	<-arrived
	cancel()
	<-done
	pollFree(t, f.store, "test:github:c1")
	// Counted as the sender's doing, not as an upstream error.
	f.pollCounter(t, "webhook_dedup_requests_total", "outcome", "client-gone", 1)
	if n := f.counter(t, "webhook_dedup_requests_total", "outcome", "upstream-error"); n != 0 {
		t.Errorf("counted %v upstream errors, want 0", n)
	}
}

// doAsync sends req from another goroutine; its error (nil once answered)
// arrives on the channel.
func doAsync(req *http.Request) <-chan error {
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	return done
}

// stallingStore is an embedded store whose claims wait for their caller to
// give up, as a Redis call in progress does when the sender hangs up.
type stallingStore struct {
	*dedup.Memory
	claiming chan struct{}
}

func (s stallingStore) Claim(ctx context.Context, key string, _ time.Duration) (dedup.Claim, dedup.Record, error) {
	s.claiming <- struct{}{}
	select {
	case <-ctx.Done():
		return dedup.Claim{}, dedup.Record{}, fmt.Errorf("dedup: claim %s: %w", key, ctx.Err())
	case <-time.After(10 * time.Second): // the test failed: let the server close
		return dedup.Claim{}, dedup.Record{}, errDown
	}
}

// TestSenderGoneDuringClaim: a sender that hangs up while its event is
// being claimed is counted as client-gone, not as a store failure, and
// nothing is forwarded. (net/http notices a closed connection once the
// body has been read, as it is on a JSON route.)
func TestSenderGoneDuringClaim(t *testing.T) {
	st := stallingStore{Memory: dedup.NewMemory(), claiming: make(chan struct{}, 1)}
	t.Cleanup(func() { st.Close() })
	f := newFixture(t, "/events=json:id", proxy.Config{Store: st})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/events", strings.NewReader(`{"id":"c2"}`))
	done := doAsync(req)
	<-st.claiming
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the request succeeded after its sender cancelled it")
	}
	f.pollCounter(t, "webhook_dedup_requests_total", "outcome", "client-gone", 1)
	for _, outcome := range []string{"store-unavailable", "forwarded"} {
		if n := f.counter(t, "webhook_dedup_requests_total", "outcome", outcome); n != 0 {
			t.Errorf("counted %v %s, want 0", n, outcome)
		}
	}
	if n := f.counter(t, "webhook_dedup_store_errors_total", "op", "claim"); n != 0 {
		t.Errorf("counted %v claim errors, want 0", n)
	}
	if n := f.up.calls.Load(); n != 0 {
		t.Errorf("the upstream was called %d times, want 0", n)
	}
}

func assertFree(t *testing.T, s proxy.Store, key string) {
	t.Helper()
	if rec, err := s.Lookup(context.Background(), key); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("key %s: %v %v, want released", key, rec.State, err)
	}
}

// pollFree waits, with a deadline, for a claim to be released by a handler
// that finishes after its client has gone.
func pollFree(t *testing.T, s proxy.Store, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := s.Lookup(context.Background(), key)
		if errors.Is(err, dedup.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %s still held after 5s", key)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// brokenStore fails every operation, like an unreachable Redis.
type brokenStore struct{}

var errDown = errors.New("connection refused")

func (brokenStore) Claim(context.Context, string, time.Duration) (dedup.Claim, dedup.Record, error) {
	return dedup.Claim{}, dedup.Record{}, errDown
}
func (brokenStore) Complete(context.Context, dedup.Claim, dedup.Result, time.Duration) error {
	return errDown
}
func (brokenStore) Release(context.Context, dedup.Claim) error { return errDown }
func (brokenStore) Lookup(context.Context, string) (dedup.Record, error) {
	return dedup.Record{}, errDown
}

func TestStoreUnavailable(t *testing.T) {
	t.Run("reject", func(t *testing.T) {
		f := newFixture(t, "/gh=github", proxy.Config{Store: brokenStore{}})
		resp := f.post(t, "/gh", gh("s1"), "{}")
		wantAnswer(t, resp, http.StatusServiceUnavailable, "store-unavailable")
		if resp.Header.Get("Retry-After") == "" {
			t.Fatal("no Retry-After")
		}
		if f.up.calls.Load() != 0 {
			t.Fatal("forwarded while the store is down")
		}
	})
	t.Run("forward", func(t *testing.T) {
		f := newFixture(t, "/gh=github", proxy.Config{Store: brokenStore{}, OnStoreError: proxy.ForwardOnStoreError})
		resp := f.post(t, "/gh", gh("s2"), "{}")
		wantAnswer(t, resp, http.StatusOK, "forwarded-unchecked")
		if f.up.calls.Load() != 1 {
			t.Fatal("not forwarded")
		}
	})
}

func TestMissingAndInvalidIDs(t *testing.T) {
	long := strings.Repeat("x", providers.MaxIDLen+1)
	for _, tc := range []struct {
		name      string
		onMissing proxy.MissingIDPolicy
		header    map[string]string
		status    int
		outcome   string
		forwarded bool
	}{
		{"missing, forward", proxy.ForwardMissingID, nil, 200, "forwarded-unchecked", true},
		{"missing, reject", proxy.RejectMissingID, nil, 400, "missing-id", false},
		{"empty, reject", proxy.RejectMissingID, gh("   "), 400, "missing-id", false},
		{"too long", proxy.ForwardMissingID, gh(long), 400, "invalid-id", false},
		{"control character", proxy.ForwardMissingID, gh("a\tb"), 400, "invalid-id", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "/gh=github", proxy.Config{OnMissingID: tc.onMissing})
			resp := f.post(t, "/gh", tc.header, "{}")
			wantAnswer(t, resp, tc.status, tc.outcome)
			if got := f.up.calls.Load() == 1; got != tc.forwarded {
				t.Fatalf("forwarded = %v, want %v", got, tc.forwarded)
			}
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	f := newFixture(t, "/stripe=stripe,/gh=github", proxy.Config{MaxBodyBytes: 64})
	big := `{"id":"evt_1","pad":"` + strings.Repeat("x", 100) + `"}`
	resp := f.post(t, "/stripe", nil, big)
	wantAnswer(t, resp, http.StatusRequestEntityTooLarge, "too-large")

	// Chunked: no Content-Length, so the limit is found while reading.
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/stripe", io.MultiReader(strings.NewReader(big)))
	req.ContentLength = -1
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	wantAnswer(t, r2, http.StatusRequestEntityTooLarge, "too-large")
	if f.up.calls.Load() != 0 {
		t.Fatal("oversized body forwarded")
	}
	// A header-sourced route never holds the body: no limit applies.
	resp = f.post(t, "/gh", gh("big1"), big)
	wantAnswer(t, resp, http.StatusOK, "forwarded")
	if f.up.last(t).body != big {
		t.Fatal("streamed body changed")
	}
}

func TestJSONSourceAndFingerprintMismatchStillDuplicate(t *testing.T) {
	f := newFixture(t, "/stripe=stripe", proxy.Config{})
	wantAnswer(t, f.post(t, "/stripe", nil, `{"id":"evt_1","n":1}`), 200, "forwarded")
	wantAnswer(t, f.post(t, "/stripe", nil, `{"id":"evt_1","n":2}`), 200, "duplicate")
	wantAnswer(t, f.post(t, "/stripe", nil, `{"id":"evt_2","n":1}`), 200, "forwarded")
	wantAnswer(t, f.post(t, "/stripe", nil, `not json`), 200, "forwarded-unchecked")
}

func TestShadowModeForwardsDuplicates(t *testing.T) {
	f := newFixture(t, "/gh=github", proxy.Config{ShadowMode: true})
	wantAnswer(t, f.post(t, "/gh", gh("sh1"), "{}"), 200, "forwarded")
	wantAnswer(t, f.post(t, "/gh", gh("sh1"), "{}"), 200, "shadow-duplicate")
	if f.up.calls.Load() != 2 {
		t.Fatal("shadow mode did not forward the duplicate")
	}
}

func TestReplayResponse(t *testing.T) {
	f := newFixture(t, "/tw=header:I-Twilio-Idempotency-Token", proxy.Config{ReplayResponse: true, ReplayMaxBytes: 1024})
	f.up.setAnswer(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "<Response><Say>hi</Say></Response>")
	})
	h := map[string]string{"I-Twilio-Idempotency-Token": "t1"}
	wantAnswer(t, f.post(t, "/tw", h, "x=1"), http.StatusCreated, "forwarded")
	resp := f.post(t, "/tw", h, "x=1")
	wantAnswer(t, resp, http.StatusCreated, "duplicate")
	if ct := resp.Header.Get("Content-Type"); ct != "text/xml" {
		t.Fatalf("Content-Type %q", ct)
	}
	if b := readAll(t, resp); b != "<Response><Say>hi</Say></Response>" {
		t.Fatalf("replayed %q", b)
	}
	if f.up.calls.Load() != 1 {
		t.Fatal("duplicate reached the upstream")
	}
}

func TestBodyFingerprint(t *testing.T) {
	f := newFixture(t, "/gh=github", proxy.Config{BodyFingerprint: true})
	wantAnswer(t, f.post(t, "/gh", gh("g1"), `{"same":true}`), 200, "forwarded")
	// A fresh delivery ID on a body already completed: a replayed capture.
	wantAnswer(t, f.post(t, "/gh", gh("g2"), `{"same":true}`), 200, "duplicate")
	wantAnswer(t, f.post(t, "/gh", gh("g3"), `{"same":false}`), 200, "forwarded")
}

func TestConcurrentCopiesForwardOnce(t *testing.T) {
	f := newFixture(t, "/gh=github", proxy.Config{})
	var wg sync.WaitGroup
	outcomes := make(chan string, 32)
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp := <-f.postAsync(t, "/gh", gh("cc1"), "{}"); resp != nil {
				outcomes <- resp.Header.Get(proxy.HeaderOutcome)
			}
		}()
	}
	wg.Wait()
	close(outcomes)
	forwarded := 0
	for o := range outcomes {
		if o == "forwarded" {
			forwarded++
		} else if o != "duplicate" && o != "in-flight" {
			t.Fatalf("unexpected outcome %q", o)
		}
	}
	if forwarded != 1 || f.up.calls.Load() != 1 {
		t.Fatalf("forwarded %d, upstream called %d times; want 1 and 1", forwarded, f.up.calls.Load())
	}
}
