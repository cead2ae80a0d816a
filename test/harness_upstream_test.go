package test

import (
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// upstream is the app behind the proxy. It verifies every webhook as a
// careful app would (signatures, and that Host, path, query and the
// X-Forwarded-* headers arrived as the sender sent them), and counts, per
// event, the requests it saw and the effects it applied (its success path).
type upstream struct {
	*httptest.Server
	t testing.TB

	mu sync.Mutex
	// attempts counts the webhook requests that reached the app, by key.
	attempts map[string]int
	// effects counts the requests the app processed successfully, by key.
	effects map[string]int
	// failures counts the 500s the app answered on purpose.
	failures int
	// passed lists the non-webhook requests ("METHOD request-URI").
	passed []string
	// problems lists what the app found wrong with what it received.
	problems []string
	// fail decides whether the app answers 500 to the attempt-th request
	// for key (attempts count from 1). Nil: never.
	fail func(key string, attempt int) bool
	// work is how long the app works on the attempt-th request for key. Nil: no time.
	work func(key string, attempt int) time.Duration
	// stubborn makes the app finish its work and apply the effect even when
	// its client (the proxy) hung up, as most legacy apps do.
	stubborn bool
	// pad is how many bytes of blank space the app's 200 answers carry
	// (PadAnswers).
	pad int
	// hold, when not nil, holds every webhook request until it is closed
	// or the request's context ends (the proxy gave up or died); a request
	// whose context ends has no effect.
	hold chan struct{}
	// entered receives the key of every webhook request as it reaches the
	// app (if there is room).
	entered chan string
	// arrived receives the path of every request as soon as its headers
	// arrive, before its body is read (if there is room).
	arrived chan string
	// abandoned receives the key of every held request whose context ended
	// (the proxy gave up or died) before it was let go (if there is room).
	abandoned chan string
}

// newUpstream starts the app on a free loopback port. The test fails at the
// end if the app found anything wrong with what it received.
func newUpstream(t testing.TB) *upstream {
	return newUpstreamOn(t, nil)
}

// newUpstreamOn starts the app on l (nil: a fresh loopback port).
func newUpstreamOn(t testing.TB, l net.Listener) *upstream {
	t.Helper()
	u := &upstream{
		t:         t,
		attempts:  map[string]int{},
		effects:   map[string]int{},
		entered:   make(chan string, 1024),
		arrived:   make(chan string, 1024),
		abandoned: make(chan string, 1024),
	}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	if l != nil {
		u.Listener.Close()
		u.Listener = l
	}
	u.Start()
	t.Cleanup(func() {
		u.Close()
		u.mu.Lock()
		defer u.mu.Unlock()
		for _, p := range u.problems {
			t.Errorf("upstream received a bad request: %s", p)
		}
	})
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	select {
	case u.arrived <- r.URL.Path:
	default:
	}
	if id := r.Header.Get("X-Test-Answer-Early"); id != "" {
		// An app that acts on headers alone and answers without reading
		// the body; its server drains the body after the handler returns.
		// Held (Hold), it answers once let go.
		u.mu.Lock()
		hold := u.hold
		u.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		k := key(acme, id)
		u.mu.Lock()
		u.attempts[k]++
		u.effects[k]++
		u.mu.Unlock()
		w.Header().Set("X-App", "processed")
		fmt.Fprintf(w, `{"received":%q}`, k)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		// The proxy gave up on the request (or died): no effect.
		return
	}
	if problem := checkForwarding(r); problem != "" {
		u.problem("%s %s: %s", r.Method, r.RequestURI, problem)
		http.Error(w, problem, http.StatusBadRequest)
		return
	}

	p, ok := providerFor(r)
	if !ok {
		u.mu.Lock()
		u.passed = append(u.passed, r.Method+" "+r.RequestURI)
		u.mu.Unlock()
		w.Header().Set("X-App", "passed")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "passed %s %s\n", r.Method, r.RequestURI)
		return
	}
	id, err := p.Verify(r, body, time.Now())
	if err != nil {
		u.problem("%s %s: %v", r.Method, r.RequestURI, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	k := key(p, id)

	u.mu.Lock()
	u.attempts[k]++
	attempt := u.attempts[k]
	hold, fail, work, stubborn, pad := u.hold, u.fail, u.work, u.stubborn, u.pad
	u.mu.Unlock()
	select {
	case u.entered <- k:
	default:
	}

	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			select {
			case u.abandoned <- k:
			default:
			}
			return
		}
	}
	if work != nil {
		t := time.NewTimer(work(k, attempt))
		gone := r.Context().Done()
		if stubborn {
			gone = nil // the work goes on whatever the client does
		}
		select {
		case <-t.C:
		case <-gone:
			t.Stop()
			return
		}
	}
	if fail != nil && fail(k, attempt) {
		u.mu.Lock()
		u.failures++
		u.mu.Unlock()
		w.Header().Set("X-App-Failure", "on purpose")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, "app failed on %s attempt %d\n", k, attempt)
		return
	}
	if r.Context().Err() != nil && !stubborn {
		return // the proxy is gone: the app's transaction rolls back
	}
	u.mu.Lock()
	u.effects[k]++
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-App", "processed")
	fmt.Fprintf(w, `{"received":%q}%s`, k, strings.Repeat(" ", pad))
}

// providerFor finds the provider whose webhook r is: a POST on its path.
func providerFor(r *http.Request) (provider, bool) {
	if r.Method != http.MethodPost {
		return provider{}, false
	}
	for _, p := range allProviders {
		if r.URL.Path == p.Path {
			return p, true
		}
	}
	return provider{}, false
}

// checkForwarding reports what is wrong with how r was forwarded ("" if
// nothing): the Host and request target must be the sender's (see
// markSent), and X-Forwarded-For/-Host/-Proto must be set.
func checkForwarding(r *http.Request) string {
	sent := r.Header.Get("X-Test-Sent")
	if sent == "" {
		return "no X-Test-Sent header: the sender's headers did not pass through"
	}
	if got := r.Host + " " + r.RequestURI; got != sent {
		return fmt.Sprintf("Host and request target %q, sender sent %q", got, sent)
	}
	host, _, _ := strings.Cut(sent, " ")
	if got := r.Header.Get("X-Forwarded-Host"); got != host {
		return fmt.Sprintf("X-Forwarded-Host %q, want the sender's Host %q", got, host)
	}
	if got := r.Header.Get("X-Forwarded-Proto"); got != "http" {
		return fmt.Sprintf("X-Forwarded-Proto %q, want http", got)
	}
	if got := r.Header.Get("X-Forwarded-For"); !strings.Contains(got, "127.0.0.1") {
		return fmt.Sprintf("X-Forwarded-For %q, want the sender's address 127.0.0.1", got)
	}
	if got := r.Header.Get("X-Webhook-Dedup"); got != "" {
		return fmt.Sprintf("the upstream request carries X-Webhook-Dedup %q", got)
	}
	return ""
}

func (u *upstream) problem(format string, args ...any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.problems = append(u.problems, fmt.Sprintf(format, args...))
}

// Hold makes webhook requests wait inside the app until release is called.
func (u *upstream) Hold() (release func()) {
	ch := make(chan struct{})
	u.mu.Lock()
	u.hold = ch
	u.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			u.mu.Lock()
			u.hold = nil
			u.mu.Unlock()
			close(ch)
		})
	}
}

// FailWhen sets which requests the app answers with 500.
func (u *upstream) FailWhen(fail func(key string, attempt int) bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.fail = fail
}

// WorkFor sets how long the app works on each request.
func (u *upstream) WorkFor(work func(key string, attempt int) time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.work = work
}

// PadAnswers makes the app's 200 answers n bytes longer (blank space after
// the JSON): large answers, for a store to keep with REPLAY_RESPONSE.
func (u *upstream) PadAnswers(n int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.pad = n
}

// IgnoreHangUp makes the app behave as most legacy apps do: once it has the
// whole request it finishes its work and applies the effect, even when its
// client (the proxy) hangs up meanwhile.
func (u *upstream) IgnoreHangUp() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.stubborn = true
}

// awaitEntered waits until a webhook request for k reaches the app, for at
// most deadline.
func (u *upstream) awaitEntered(t testing.TB, k string, deadline time.Duration) {
	t.Helper()
	awaitValue(t, u.entered, k, deadline, "no request for "+k+" reached the app")
}

// awaitAbandoned waits until a held request for k ends without effect
// because the proxy gave up on it or died, for at most deadline.
func (u *upstream) awaitAbandoned(t testing.TB, k string, deadline time.Duration) {
	t.Helper()
	awaitValue(t, u.abandoned, k, deadline, "the held request for "+k+" was not abandoned")
}

// awaitArrived waits until the headers of a request on path reach the
// app, for at most deadline.
func (u *upstream) awaitArrived(t testing.TB, path string, deadline time.Duration) {
	t.Helper()
	awaitValue(t, u.arrived, path, deadline, "no request on "+path+" reached the app")
}

// awaitValue waits until want comes out of ch, for at most deadline, and
// fails the test with failure if it does not.
func awaitValue(t testing.TB, ch <-chan string, want string, deadline time.Duration, failure string) {
	t.Helper()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	for {
		select {
		case got := <-ch:
			if got == want {
				return
			}
		case <-timer.C:
			t.Fatalf("%s within %s", failure, deadline)
		}
	}
}

// Attempts is how many requests for k reached the app.
func (u *upstream) Attempts(k string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.attempts[k]
}

// Effects is how many times the app processed k successfully.
func (u *upstream) Effects(k string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.effects[k]
}

// Failures is how many 500s the app answered on purpose.
func (u *upstream) Failures() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.failures
}

// Passed lists the non-webhook requests the app saw.
func (u *upstream) Passed() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.passed...)
}

// Total is how many requests of any kind reached the app.
func (u *upstream) Total() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := len(u.passed)
	for _, c := range u.attempts {
		n += c
	}
	return n
}

// EffectsSnapshot copies the effects by key.
func (u *upstream) EffectsSnapshot() map[string]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	m := make(map[string]int, len(u.effects))
	for k, v := range u.effects {
		m[k] = v
	}
	return m
}

// seeded is a deterministic coin for (seed, key, n): true with probability 1/den.
func seeded(seed uint64, den uint64, k string, n int) bool {
	return draw(seed, k, n)%den == 0
}

// draw is a deterministic pseudo-random number for (seed, key, n).
func draw(seed uint64, k string, n int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", seed, k, n)
	return h.Sum64()
}
