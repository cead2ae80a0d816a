package test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// asyncEnv is the configuration of the async tests: every provider's
// route, delivered in the background on the store given by more (DATA_DIR
// or Redis), with retry intervals short enough for a test.
func asyncEnv(app string, more map[string]string) map[string]string {
	env := map[string]string{
		"UPSTREAM_URL":           app,
		"ROUTES":                 routes(allProviders...),
		"DELIVERY":               "async",
		"RETRY_INITIAL_INTERVAL": "50ms",
		"RETRY_MAX_INTERVAL":     "200ms",
		"ADMIN_TOKEN":            adminToken,
	}
	for k, v := range asyncSecrets {
		env[k] = v
	}
	for k, v := range more {
		env[k] = v
	}
	return env
}

// asyncSecrets are the proxy's secrets on async routes: every preset's of
// allProviders, since an async route refuses to start on a preset whose
// signatures it does not verify.
var asyncSecrets = map[string]string{
	"STRIPE_WEBHOOK_SECRET":    stripeSecret,
	"GITHUB_WEBHOOK_SECRET":    githubSecret,
	"SHOPIFY_WEBHOOK_SECRET":   shopifySecret,
	"STANDARD_WEBHOOKS_SECRET": standardSecret,
}

// asyncEvent is the admin API's view of an async event.
type asyncEvent struct {
	State         string `json:"state"`
	Status        int    `json:"status"`
	Attempts      int    `json:"attempts"`
	LastStatus    int    `json:"last_status"`
	LastError     string `json:"last_error"`
	NextAttemptAt string `json:"next_attempt_at"`
}

// event asks the admin API about one event; the state is "" when unknown.
func (p *proxy) event(t testing.TB, pv provider, id string) asyncEvent {
	t.Helper()
	ev, err := p.lookup(t, pv, id)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// lookup is event, but for a store that did not answer the lookup in
// time (503), which it returns as an error rather than failing the test:
// for a wait that goes on until its own deadline, where the store's
// answer, not its speed, is what is checked. Any other answer but 200
// and 404 fails the test.
func (p *proxy) lookup(t testing.TB, pv provider, id string) (asyncEvent, error) {
	t.Helper()
	a := p.adminDo(t, http.MethodGet, "/v1/events/"+url.PathEscape(namespace(pv))+"/"+url.PathEscape(id), adminToken)
	var ev asyncEvent
	switch a.Status {
	case http.StatusNotFound:
		return ev, nil
	case http.StatusServiceUnavailable:
		return ev, fmt.Errorf("GET event %s: %s", id, a)
	case http.StatusOK:
	default:
		t.Fatalf("GET event %s: %s", id, a)
	}
	if err := json.Unmarshal(a.Body, &ev); err != nil {
		t.Fatalf("GET event %s: %q: %v", id, a.Body, err)
	}
	return ev, nil
}

// awaitState polls the admin API until the event is in state, and returns it.
func (p *proxy) awaitState(t testing.TB, pv provider, id, state string, deadline time.Duration) asyncEvent {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		ev := p.event(t, pv, id)
		if ev.State == state {
			return ev
		}
		if time.Now().After(end) {
			t.Fatalf("event %s: %+v after %s, want state %s", id, ev, deadline, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// queueEvents sends events 0…n-1 of p once each, expects each answered
// 202 queued, and returns their keys.
func queueEvents(t *testing.T, px *proxy, p provider, n int) []string {
	t.Helper()
	ctx, client := testContext(t), newClient(t)
	keys := make([]string, 0, n)
	for i := range n {
		ev := p.Event(i)
		expect(t, "delivery of "+ev.ID, mustSend(t, ctx, client, px, p, ev), 202, "queued")
		keys = append(keys, key(p, ev.ID))
	}
	return keys
}

// awaitEffects polls until every key has taken effect at least once.
func awaitEffects(t testing.TB, app *upstream, keys []string, deadline time.Duration) {
	t.Helper()
	awaitEffectsOr(t, app, keys, deadline, func(k string) string { return k })
}

// awaitEffects is the function awaitEffects with, for each event missing at the
// deadline, its record as the admin API shows it (state, attempts,
// next_attempt_at, attempts_history): whether it was lost (unknown to the
// store) or only slow (queued, retrying, leased) is then in the failure
// itself.
func (p *proxy) awaitEffects(t testing.TB, app *upstream, keys []string, deadline time.Duration) {
	t.Helper()
	awaitEffectsOr(t, app, keys, deadline, func(k string) string {
		name, id, _ := strings.Cut(k, ":")
		for _, pv := range allProviders {
			if pv.Name == name {
				a := p.adminDo(t, http.MethodGet, "/v1/events/"+url.PathEscape(namespace(pv))+"/"+url.PathEscape(id), adminToken)
				if a.Status == http.StatusNotFound {
					return k + ": unknown to the store (lost)"
				}
				return fmt.Sprintf("%s: %d %s", k, a.Status, a.Body)
			}
		}
		return k
	})
}

// awaitEffectsOr polls until every key has taken effect at least once,
// and fails with describe's line for each that has not by deadline.
func awaitEffectsOr(t testing.TB, app *upstream, keys []string, deadline time.Duration, describe func(key string) string) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		effects := app.EffectsSnapshot()
		var missing []string
		for _, k := range keys {
			if effects[k] == 0 {
				missing = append(missing, k)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(end) {
			lines := make([]string, len(missing))
			for i, k := range missing {
				lines[i] = describe(k)
			}
			t.Fatalf("%d of %d events never took effect within %s:\n%s", len(missing), len(keys), deadline, strings.Join(lines, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scriptedApp answers each acme event as its script says and records, per
// event, the attempt numbers it was sent and when, every request's event
// in the order they arrived, and how many requests it held at once.
type scriptedApp struct {
	*httptest.Server
	mu       sync.Mutex
	attempts map[string][]attemptSeen
	arrived  []string // each request's event ID, in the order the requests took mu
	script   func(id string, n int) (status int, retryAfter string)
	hold     chan struct{}   // nil: answer at once
	hung     map[string]bool // events whose requests wait until the proxy gives them up (hang)
	inside   atomic.Int32
	most     atomic.Int32
}

type attemptSeen struct {
	header string // X-Webhook-Dedup-Attempt
	at     time.Time
}

func newScriptedApp(t testing.TB, script func(id string, n int) (int, string)) *scriptedApp {
	a := &scriptedApp{attempts: map[string][]attemptSeen{}, script: script}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := a.inside.Add(1)
		defer a.inside.Add(-1)
		for m := a.most.Load(); n > m && !a.most.CompareAndSwap(m, n); m = a.most.Load() {
		}
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		id := r.Header.Get("X-Acme-Event-Id")
		a.mu.Lock()
		a.attempts[id] = append(a.attempts[id], attemptSeen{r.Header.Get("X-Webhook-Dedup-Attempt"), time.Now()})
		a.arrived = append(a.arrived, id)
		seen, hold, hung := len(a.attempts[id]), a.hold, a.hung[id]
		a.mu.Unlock()
		if hung {
			<-r.Context().Done()
			return
		}
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		status, ra := http.StatusOK, ""
		if a.script != nil {
			status, ra = a.script(id, seen)
		}
		if ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *scriptedApp) seen(id string) []attemptSeen {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]attemptSeen(nil), a.attempts[id]...)
}

// arrivals is the event ID of every request so far, in the order they
// arrived.
func (a *scriptedApp) arrivals() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.arrived)
}

func (a *scriptedApp) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, s := range a.attempts {
		n += len(s)
	}
	return n
}

// hang makes every request for the events ids wait until the proxy gives
// it up (UPSTREAM_TIMEOUT), unanswered.
func (a *scriptedApp) hang(ids ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hung == nil {
		a.hung = map[string]bool{}
	}
	for _, id := range ids {
		a.hung[id] = true
	}
}

// holdAll makes every request wait in the app until the returned release.
func (a *scriptedApp) holdAll() (release func()) {
	ch := make(chan struct{})
	a.mu.Lock()
	a.hold = ch
	a.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			a.hold = nil
			a.mu.Unlock()
			close(ch)
		})
	}
}
