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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"
	"github.com/webhook-dedup/webhook-dedup/policy"

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
	return newWrappedFixture(t, routes, cfg, nil)
}

// newWrappedFixture is newFixture with the proxy's handler inside wrap
// (nil: none), for a test that watches the requests it serves.
func newWrappedFixture(t *testing.T, routes string, cfg proxy.Config, wrap func(http.Handler) http.Handler) *fixture {
	t.Helper()
	up := newUpstream(t)
	u, _ := url.Parse(up.URL)
	cfg.Upstream = u
	if cfg.Store == nil {
		m := memstore.New()
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
		var delivery policy.DeliveryMode
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
	h := newHandler(t, cfg)
	var served http.Handler = h
	if wrap != nil {
		served = wrap(h)
	}
	srv := httptest.NewServer(served)
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

// noRedirects is a sender that takes a 3xx as the answer, as webhook
// senders do, rather than following it: the test must see what the proxy
// relayed, not where it pointed.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// TestRedirectReleasesSoRetryIsForwarded: only a 2xx means the app took
// the event. A 3xx (a moved endpoint, a login page, a cache's 304) is
// relayed to the sender unchanged and releases the claim, so the sender's
// retry is forwarded rather than answered duplicate.
func TestRedirectReleasesSoRetryIsForwarded(t *testing.T) {
	for _, status := range []int{http.StatusFound, http.StatusNotModified, http.StatusTemporaryRedirect} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			f := newFixture(t, "/gh=github", proxy.Config{})
			f.up.setAnswer(func(w http.ResponseWriter, r *http.Request, _ []byte) {
				w.Header().Set("Location", "/elsewhere")
				w.Header().Set("X-App", "moved")
				w.WriteHeader(status)
				if status != http.StatusNotModified { // a 304 has no body
					_, _ = io.WriteString(w, "moved")
				}
			})
			id := "m" + strconv.Itoa(status)
			req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/gh", strings.NewReader("{}"))
			req.Header.Set("X-GitHub-Delivery", id)
			resp, err := noRedirects.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			wantAnswer(t, resp, status, "forwarded")
			wantBody := "moved"
			if status == http.StatusNotModified {
				wantBody = ""
			}
			if got := readAll(t, resp); got != wantBody || resp.Header.Get("Location") != "/elsewhere" || resp.Header.Get("X-App") != "moved" {
				t.Fatalf("the app's %d was not relayed unchanged: body %q, Location %q, X-App %q", status, got, resp.Header.Get("Location"), resp.Header.Get("X-App"))
			}
			// The claim is settled before the sender sees the answer.
			assertFree(t, f.store, "test:github:"+id)
			f.up.setAnswer(nil)
			wantAnswer(t, f.post(t, "/gh", gh(id), "{}"), http.StatusOK, "forwarded")
			wantAnswer(t, f.post(t, "/gh", gh(id), "{}"), http.StatusOK, "duplicate")
			if n := f.up.calls.Load(); n != 2 {
				t.Fatalf("upstream called %d times, want 2", n)
			}
		})
	}
}

// blockingUpstream holds requests until release is called, at the latest
// when the test ends, and signals each arrival. Without the cleanup a test
// failing while requests are held would hang in the servers' Close until
// the test binary's timeout, instead of reporting its failure.
func blockingUpstream(t *testing.T, f *fixture) (arrived chan struct{}, release func()) {
	arrived, held := make(chan struct{}, 16), make(chan struct{})
	f.up.setAnswer(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		arrived <- struct{}{}
		<-held
	})
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(release) // runs before the servers close: registered after them
	return arrived, release
}

func TestInFlightDuplicate(t *testing.T) {
	f := newFixture(t, "/gh=github,/bb=bitbucket", proxy.Config{LeaseTTL: 30 * time.Second})
	arrived, release := blockingUpstream(t, f)
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
	release()
	wantAnswer(t, <-first, http.StatusOK, "forwarded")
	wantAnswer(t, <-firstBB, http.StatusOK, "forwarded")
}

// holdFirst makes the upstream hold the first request it gets until finish
// is called (at the latest when the test ends), then answer it status;
// later requests are answered 200 at once. arrived signals the first.
func holdFirst(t *testing.T, f *fixture, status int) (arrived <-chan struct{}, finish func()) {
	first, release := make(chan struct{}, 1), make(chan struct{})
	var n atomic.Int64
	f.up.setAnswer(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if n.Add(1) == 1 {
			first <- struct{}{}
			<-release
			w.WriteHeader(status)
		}
	})
	var once sync.Once
	finish = func() { once.Do(func() { close(release) }) }
	t.Cleanup(finish) // before the servers close, should the test fail
	return first, finish
}

// lookupWatch is an embedded store that reports the key of every Lookup:
// a copy waiting for the first one's outcome (INFLIGHT_WAIT) looks it up.
type lookupWatch struct {
	*memstore.Store
	looked chan string
}

func newLookupWatch(t *testing.T) lookupWatch {
	m := memstore.New()
	t.Cleanup(func() { m.Close() })
	return lookupWatch{Store: m, looked: make(chan string, 1024)}
}

func (s lookupWatch) Lookup(ctx context.Context, key string) (dedup.Record, error) {
	select {
	case s.looked <- key:
	default:
	}
	return s.Store.Lookup(ctx, key)
}

// awaitLookup waits until key has been looked up: a copy is waiting on it.
func (s lookupWatch) awaitLookup(t *testing.T, key string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case k := <-s.looked:
			if k == key {
				return
			}
		case <-deadline:
			t.Fatalf("nothing looked %s up within 10s: no copy waited for the first", key)
		}
	}
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
			st := newLookupWatch(t)
			f := newFixture(t, "/gh=github", proxy.Config{Store: st, InflightWait: 20 * time.Second})
			arrived, finish := holdFirst(t, f, tc.firstStatus)
			first := f.postAsync(t, "/gh", gh("w1"), "{}")
			<-arrived
			second := f.postAsync(t, "/gh", gh("w1"), "{}")
			// Only once the second copy is visibly waiting (it looks the
			// first one up) does the first finish.
			st.awaitLookup(t, "test:github:w1")
			finish()
			wantAnswer(t, <-first, tc.firstStatus, "forwarded")
			wantAnswer(t, <-second, http.StatusOK, tc.want)
		})
	}
}

func TestInflightWaitEndsUnresolved(t *testing.T) {
	st := newLookupWatch(t)
	f := newFixture(t, "/gh=github", proxy.Config{Store: st, InflightWait: 100 * time.Millisecond, InflightStatus: http.StatusServiceUnavailable})
	arrived, _ := blockingUpstream(t, f) // held until the test ends
	f.postAsync(t, "/gh", gh("u1"), "{}")
	<-arrived
	resp := f.post(t, "/gh", gh("u1"), "{}")
	wantAnswer(t, resp, http.StatusServiceUnavailable, "in-flight")
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	// The answer came after a wait (the copy looked the first one up),
	// while the first is still held at the upstream.
	select {
	case k := <-st.looked:
		if k != "test:github:u1" {
			t.Errorf("looked up %s, want test:github:u1", k)
		}
	default:
		t.Error("the copy was answered in-flight without waiting for the first")
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
		blockingUpstream(t, f) // held until the test ends
		resp := f.post(t, "/gh", gh("x2"), "{}")
		wantAnswer(t, resp, http.StatusGatewayTimeout, "upstream-error")
		assertFree(t, f.store, "test:github:x2")
	})
}

// TestSenderGoneAfterForwardAppSettles: a sender that hangs up once its
// request reached the app changes nothing: the app keeps working, copies
// meanwhile are in flight, and the app's answer settles the claim, 2xx
// completing it (the retry is a duplicate), anything else releasing it.
func TestSenderGoneAfterForwardAppSettles(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		next   string
		calls  int64
	}{
		{"app answers 200: completed", http.StatusOK, "duplicate", 1},
		{"app answers 500: released", http.StatusInternalServerError, "forwarded", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "/gh=github", proxy.Config{})
			arrived, finish := holdFirst(t, f, tc.status)
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/gh", strings.NewReader("{}"))
			req.Header.Set("X-GitHub-Delivery", "c1")
			done := doAsync(req)
			<-arrived
			cancel()
			<-done
			wantAnswer(t, f.post(t, "/gh", gh("c1"), "{}"), http.StatusConflict, "in-flight")
			finish()
			pollSettled(t, f.store, "test:github:c1")
			wantAnswer(t, f.post(t, "/gh", gh("c1"), "{}"), http.StatusOK, tc.next)
			if got := f.up.calls.Load(); got != tc.calls {
				t.Errorf("the app was called %d times, want %d", got, tc.calls)
			}
			for _, outcome := range []string{"client-gone", "upstream-error"} {
				if n := f.counter(t, "webhook_dedup_requests_total", "outcome", outcome); n != 0 {
					t.Errorf("counted %v %s, want 0", n, outcome)
				}
			}
		})
	}
}

// pollSettled waits, with a deadline, until key is no longer in flight.
func pollSettled(t *testing.T, s proxy.Store, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec, err := s.Lookup(context.Background(), key)
		if errors.Is(err, dedup.ErrNotFound) || (err == nil && rec.State != dedup.InFlight) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %s still in flight after 5s (%v)", key, err)
		}
		time.Sleep(10 * time.Millisecond)
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

// stallingStore is an embedded store whose claims wait until the test lets
// them go. A claim whose caller gives up first is taken all the same, as a
// Redis SET NX already sent is: only the answer is lost.
type stallingStore struct {
	*memstore.Store
	claiming chan string // the key of each claim as it begins
	proceed  chan struct{}
	claimed  chan dedup.Claim // each claim the store took, once it holds the key
}

func (s stallingStore) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error) {
	s.claiming <- key
	select {
	case <-s.proceed:
		c, rec, err := s.Store.Claim(ctx, key, lease)
		s.tell(c, rec, err)
		return c, rec, err
	case <-ctx.Done():
		s.tell(s.Store.Claim(context.Background(), key, lease))
		return dedup.Claim{}, dedup.Record{}, fmt.Errorf("dedup: claim %s: %w", key, ctx.Err())
	}
}

// tell reports a claim the store took on claimed, if there is room.
func (s stallingStore) tell(c dedup.Claim, _ dedup.Record, err error) {
	if err != nil || c.Token == "" {
		return
	}
	select {
	case s.claimed <- c:
	default:
	}
}

// TestSenderGoneDuringClaim: a sender that hangs up while its event is
// being claimed is counted as client-gone, not as a store failure; nothing
// is forwarded, and the claim the store took meanwhile is released rather
// than left to sit out its lease. (net/http notices a closed connection
// once the body has been read, as it is on a JSON route.)
func TestSenderGoneDuringClaim(t *testing.T) {
	st := stallingStore{Store: memstore.New(), claiming: make(chan string, 1), proceed: make(chan struct{}), claimed: make(chan dedup.Claim, 1)}
	t.Cleanup(func() { st.Close() })
	gone := make(chan struct{}) // closed once the proxy sees the sender gone
	f := newWrappedFixture(t, "/events=json:id", proxy.Config{Store: st}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			context.AfterFunc(r.Context(), func() { close(gone) })
			h.ServeHTTP(w, r)
		})
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/events", strings.NewReader(`{"id":"c2"}`))
	done := doAsync(req)
	key := <-st.claiming
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the request succeeded after its sender cancelled it")
	}
	<-gone
	close(st.proceed) // the store takes the claim just after the sender left
	// Until the store has taken the claim the key is free whether or not
	// the proxy releases it: wait for the claim to land, then for the
	// request to be counted (after its claim was settled), and only then
	// look at the key.
	select {
	case <-st.claimed:
	case <-time.After(5 * time.Second):
		t.Fatal("the store took no claim within 5s of being let go")
	}
	f.pollCounter(t, "webhook_dedup_requests_total", "outcome", "client-gone", 1)
	if rec, err := f.store.Lookup(context.Background(), key); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("key %s: %v %v once the request ended; want released, free to claim again (not left to sit out its lease)", key, rec.State, err)
	}
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

// stallingLookups is an embedded store whose lookups wait until their
// caller gives up, as a lookup of a stalled Redis does.
type stallingLookups struct {
	*memstore.Store
	looking chan string // the key of each lookup as it begins
}

func (s stallingLookups) Lookup(ctx context.Context, key string) (dedup.Record, error) {
	s.looking <- key
	<-ctx.Done()
	return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, ctx.Err())
}

// TestSenderGoneDuringLookup: a sender that hangs up while the proxy looks
// up its body's fingerprint (DEDUP_BODY_FINGERPRINT) is counted as
// client-gone, not as a failed lookup or an unavailable store, and nothing
// is forwarded.
func TestSenderGoneDuringLookup(t *testing.T) {
	st := stallingLookups{Store: memstore.New(), looking: make(chan string, 1)}
	t.Cleanup(func() { st.Close() })
	f := newFixture(t, "/events=json:id", proxy.Config{Store: st, BodyFingerprint: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/events", strings.NewReader(`{"id":"l1"}`))
	done := doAsync(req)
	<-st.looking
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the request succeeded after its sender cancelled it")
	}
	f.pollCounter(t, "webhook_dedup_requests_total", "outcome", "client-gone", 1)
	if n := f.counter(t, "webhook_dedup_requests_total", "outcome", "store-unavailable"); n != 0 {
		t.Errorf("counted %v store-unavailable, want 0", n)
	}
	if n := f.counter(t, "webhook_dedup_store_errors_total", "op", "lookup"); n != 0 {
		t.Errorf("counted %v lookup errors, want 0", n)
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
		f := newFixture(t, "/gh=github", proxy.Config{Store: brokenStore{}, OnStoreError: policy.ForwardOnStoreError})
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
		onMissing policy.MissingIDPolicy
		header    map[string]string
		status    int
		outcome   string
		forwarded bool
	}{
		{"missing, forward", policy.ForwardMissingID, nil, 200, "forwarded-unchecked", true},
		{"missing, reject", policy.RejectMissingID, nil, 400, "missing-id", false},
		{"empty, reject", policy.RejectMissingID, gh("   "), 400, "missing-id", false},
		{"too long", policy.ForwardMissingID, gh(long), 400, "invalid-id", false},
		{"control character", policy.ForwardMissingID, gh("a\tb"), 400, "invalid-id", false},
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
	mismatches := func() float64 {
		return f.counter(t, "webhook_dedup_payload_mismatch_total", "route", "/stripe")
	}
	wantAnswer(t, f.post(t, "/stripe", nil, `{"id":"evt_1","n":1}`), 200, "forwarded")
	wantAnswer(t, f.post(t, "/stripe", nil, `{"id":"evt_1","n":1}`), 200, "duplicate")
	if n := mismatches(); n != 0 {
		t.Fatalf("an identical duplicate counted %v payload mismatches, want 0", n)
	}
	wantAnswer(t, f.post(t, "/stripe", nil, `{"id":"evt_1","n":2}`), 200, "duplicate")
	if n := mismatches(); n != 1 {
		t.Fatalf("a duplicate with a different body counted %v payload mismatches, want 1", n)
	}
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

// TestReplayMaxBytesZero: REPLAY_MAX_BYTES=0 keeps no body: a duplicate of
// an answer with a body gets the plain duplicate answer, while an answer
// with none is still replayed.
func TestReplayMaxBytesZero(t *testing.T) {
	f := newFixture(t, "/tw=header:I-Twilio-Idempotency-Token", proxy.Config{ReplayResponse: true, ReplayMaxBytes: 0})
	f.up.setAnswer(func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	})
	withBody := map[string]string{"I-Twilio-Idempotency-Token": "z1"}
	wantAnswer(t, f.post(t, "/tw", withBody, "<Response/>"), http.StatusCreated, "forwarded")
	resp := f.post(t, "/tw", withBody, "<Response/>")
	wantAnswer(t, resp, http.StatusOK, "duplicate")
	if b := readAll(t, resp); strings.Contains(b, "Response") {
		t.Fatalf("replayed %q; REPLAY_MAX_BYTES=0 keeps no body", b)
	}

	empty := map[string]string{"I-Twilio-Idempotency-Token": "z2"}
	wantAnswer(t, f.post(t, "/tw", empty, ""), http.StatusCreated, "forwarded")
	resp = f.post(t, "/tw", empty, "")
	wantAnswer(t, resp, http.StatusCreated, "duplicate")
	if ct := resp.Header.Get("Content-Type"); ct != "text/xml" {
		t.Fatalf("replayed Content-Type %q, want text/xml", ct)
	}
}

// TestNewRequiresStoreMetricsUpstream: a Config without one of them is
// refused with ErrConfig naming it, not accepted to panic on a request.
func TestNewRequiresStoreMetricsUpstream(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:1")
	m := memstore.New()
	t.Cleanup(func() { m.Close() })
	full := proxy.Config{Upstream: u, Store: m, Metrics: proxy.NewMetrics(prometheus.NewRegistry())}
	if _, err := proxy.New(full); err != nil {
		t.Fatalf("New with every required field: %v", err)
	}
	for _, tc := range []struct {
		field string
		drop  func(*proxy.Config)
	}{
		{"Upstream", func(c *proxy.Config) { c.Upstream = nil }},
		{"Store", func(c *proxy.Config) { c.Store = nil }},
		{"Metrics", func(c *proxy.Config) { c.Metrics = nil }},
	} {
		cfg := full
		tc.drop(&cfg)
		h, err := proxy.New(cfg)
		if h != nil || !errors.Is(err, proxy.ErrConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New without %s: handler %t, error %v; want no handler and ErrConfig naming %s", tc.field, h != nil, err, tc.field)
		}
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
