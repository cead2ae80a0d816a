package delivery

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// stampResigner stands for a preset's re-signer: it sets X-Signed-At to
// the time it is given, and appends to X-Signed, so that a header it
// changed in the queued request itself would show on the next attempt.
type stampResigner struct {
	mu    sync.Mutex
	calls []string // route and namespace asked for, "route ns"
	err   error
}

func (s *stampResigner) Resign(h http.Header, body []byte, now time.Time) error {
	if s.err != nil {
		return s.err
	}
	if string(body) != `{"id":"evt_1"}` {
		return errors.New("not the queued body")
	}
	h.Set("X-Signed-At", strconv.FormatInt(now.UnixNano(), 10))
	h.Add("X-Signed", "yes")
	return nil
}

func (s *stampResigner) lookup(route, namespace string) Resigner {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, route+" "+namespace)
	return s
}

// TestEachAttemptIsSignedAgain: every attempt asks for the route's and
// namespace's Resigner and carries what it wrote at that attempt's time,
// over the headers as they were queued.
func TestEachAttemptIsSignedAgain(t *testing.T) {
	a := newApp(t, func(attempt string) (int, string) {
		if attempt == "3" {
			return http.StatusOK, ""
		}
		return http.StatusBadRequest, ""
	})
	q := newQueue(t)
	req := webhookRequest(`{"id":"evt_1"}`)
	req.Route, req.Namespace = "/webhooks/stripe", "stripe"
	req.Header.Set("X-Signed-At", "queued")
	q.enqueue(t, "k", req)
	// The workers' clock runs an hour behind: the signature is made at
	// its time (retries then fall due at once for the store).
	clock := func() time.Time { return time.Now().Add(-time.Hour) }
	r := &stampResigner{}
	start := clock()
	run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), Resigners: r.lookup, Now: clock,
		InitialInterval: time.Millisecond, MaxInterval: time.Millisecond})
	await(t, "completion", func() bool { return q.record(t, "k").State == dedup.Completed })
	end := clock()

	reqs := a.requests()
	if len(reqs) != 3 {
		t.Fatalf("app received %d attempts, want 3", len(reqs))
	}
	seen := map[string]bool{}
	for i, got := range reqs {
		at := got.header.Get("X-Signed-At")
		ns, _ := strconv.ParseInt(at, 10, 64)
		if seen[at] || ns < start.UnixNano() || ns > end.UnixNano() {
			t.Errorf("attempt %d: X-Signed-At %q, want a time of its own on the workers' clock", i+1, at)
		}
		seen[at] = true
		if v := got.header.Values("X-Signed"); len(v) != 1 {
			t.Errorf("attempt %d: X-Signed %q: signed over an earlier attempt's headers, not the queued ones", i+1, v)
		}
		if string(got.body) != `{"id":"evt_1"}` || got.header.Get("X-Github-Delivery") != "d-1" {
			t.Errorf("attempt %d: body %q, headers %v: more than the signature changed", i+1, got.body, got.header)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) != 3 || r.calls[0] != "/webhooks/stripe stripe" {
		t.Errorf("Resigners asked %q, want the queued route and namespace on each of 3 attempts", r.calls)
	}
}

// TestNotSignedAgain: with no Resigners, no Resigner for the route, or a
// request that does not verify, the attempt carries the queued headers.
func TestNotSignedAgain(t *testing.T) {
	refusing := &stampResigner{err: errors.New("signature: no match")}
	for name, lookup := range map[string]func(route, namespace string) Resigner{
		"no Resigners":          nil,
		"no Resigner for route": func(string, string) Resigner { return nil },
		"does not verify":       refusing.lookup,
	} {
		t.Run(name, func(t *testing.T) {
			a := newApp(t, nil)
			q := newQueue(t)
			req := webhookRequest(`{"id":"evt_1"}`)
			req.Header.Set("X-Signed-At", "queued")
			q.enqueue(t, "k", req)
			run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), Resigners: lookup})
			await(t, "completion", func() bool { return q.record(t, "k").State == dedup.Completed })
			if got := a.requests()[0].header.Get("X-Signed-At"); got != "queued" {
				t.Errorf("X-Signed-At %q, want the queued value", got)
			}
		})
	}
}

// TestLastErrorQuotesTheAnswer: a failed attempt's last_error carries the
// start of the app's answer, so that an operator sees why the app refused.
func TestLastErrorQuotesTheAnswer(t *testing.T) {
	for _, tt := range []struct {
		name, body, want string
	}{
		{"stripe-go's refusal", "timestamp wasn't within tolerance\n", "the app answered 400: timestamp wasn't within tolerance"},
		{"empty body", "", "the app answered 400"},
		{"control characters escaped", "bad\x1b[31m\r\nline\ttab\xff", `the app answered 400: bad\x1b[31m\r\nline\ttab\xff`},
		{"cut at 200 bytes", strings.Repeat("é", 150), "the app answered 400: " + strings.Repeat("é", 100) + "…"},
		{"cut, not mid-character", "x" + strings.Repeat("é", 150), "the app answered 400: x" + strings.Repeat("é", 99) + "…"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := newReplyingAppStatus(t, http.StatusBadRequest, tt.body)
			q := newQueue(t)
			q.enqueue(t, "k", webhookRequest("{}"))
			// An hour's backoff: one attempt within the test.
			run(t, Config{Queue: q, Upstream: mustURL(t, a), InitialInterval: time.Hour, MaxInterval: time.Hour})
			await(t, "the attempt settled", func() bool { return q.record(t, "k").Delivery.LastStatus != 0 })
			if got := q.record(t, "k").Delivery.LastError; got != tt.want {
				t.Errorf("last_error %q, want %q", got, tt.want)
			}
		})
	}
}

// newReplyingAppStatus answers every request with status and body.
func newReplyingAppStatus(t *testing.T, status int, body string) string {
	a := newApp(t, nil)
	a.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	})
	return a.URL
}
