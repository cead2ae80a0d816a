package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
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
	deadline := time.After(loadMargin)
	for {
		select {
		case k := <-s.looked:
			if k == key {
				return
			}
		case <-deadline:
			t.Fatalf("nothing looked %s up within %s: no copy waited for the first", key, loadMargin)
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
