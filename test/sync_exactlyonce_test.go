package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// The exactly-once run: how many events, how hard.
const (
	runEvents     = 300
	runSeed       = 20261130
	runConcurrent = 24 // events in flight at once, each with all its copies
	runFailOneIn  = 5  // the app fails one request in five with 500
)

// TestExactlyOnceRedis: hundreds of events over every kind of route, each
// delivered 1–4 times with concurrent copies, while the app fails a fifth
// of its requests and the senders retry: each event takes effect exactly
// once, none is lost.
func TestExactlyOnceRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	exactlyOnceRun(t, "redis", map[string]string{"REDIS_URL": srv.URL()}, runConcurrent)
}

// TestExactlyOnceEmbedded is the same run on the embedded store.
func TestExactlyOnceEmbedded(t *testing.T) {
	t.Parallel()
	exactlyOnceRun(t, "embedded", nil, runConcurrent)
}

// exactlyOnceRun runs the exactly-once run on the store that storeEnv
// configures (nil: the embedded one), with concurrent events in flight at
// once.
func exactlyOnceRun(t *testing.T, store string, storeEnv map[string]string, concurrent int) {
	app := newUpstream(t)
	app.FailWhen(func(k string, attempt int) bool { return seeded(runSeed, runFailOneIn, k, attempt) })
	// A few milliseconds of work, so that concurrent copies overlap.
	app.WorkFor(func(k string, attempt int) time.Duration {
		return time.Duration(draw(runSeed+1, k, attempt)%8) * time.Millisecond
	})
	env := map[string]string{
		"UPSTREAM_URL":     app.URL,
		"ROUTES":           routes(allProviders...),
		"UPSTREAM_TIMEOUT": "10s",
		// The run allows no store-unavailable answer, and a store call
		// queued behind two dozen events on a loaded machine is slow, not
		// unavailable: the longest STORE_TIMEOUT UPSTREAM_TIMEOUT allows
		// (a quarter of it) instead of the default 1s.
		"STORE_TIMEOUT": "2500ms",
	}
	for k, v := range signedSecrets {
		env[k] = v
	}
	for k, v := range storeEnv {
		env[k] = v
	}
	px := startProxy(t, env)
	px.awaitReady(t)

	deliveries, copies := planDeliveries(runEvents, runSeed+2, 4)

	s := &sender{
		client:      newClient(t),
		addr:        px.Addr,
		maxAttempts: 40,
		backoff: func(n int) time.Duration {
			return min(time.Duration(n)*15*time.Millisecond, 150*time.Millisecond)
		},
		tally: newTally(),
	}
	ctx := testContext(t)
	start := time.Now()
	var (
		mu     sync.Mutex
		failed []string
		okBy   = map[string]int{} // the X-Webhook-Dedup of each copy's final 2xx
	)
	sendPlanned(ctx, s, deliveries, concurrent, func(a answer, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed = append(failed, err.Error())
			return
		}
		okBy[a.Dedup()]++
	})
	elapsed := time.Since(start)

	for _, f := range failed {
		t.Errorf("lost delivery: %s", f)
	}
	total := checkOnceEach(t, app, deliveries)
	tl := s.tally
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, outcome := range []string{"forwarded-unchecked", "store-unavailable", "invalid-signature", "missing-id", "invalid-id", "too-large", ""} {
		if n := tl.outcomes[outcome]; n > 0 {
			t.Errorf("%d answers had X-Webhook-Dedup %q; want none in a healthy run (statuses %v)", n, outcome, tl.statuses)
		}
	}
	for outcome, n := range okBy {
		if outcome != "forwarded" && outcome != "duplicate" {
			t.Errorf("%d deliveries ended 2xx with X-Webhook-Dedup %q, want forwarded or duplicate", n, outcome)
		}
	}
	if tl.outcomes["duplicate"] == 0 || app.Failures() == 0 {
		t.Errorf("the run exercised no duplicates (%d) or no app failures (%d): it proves nothing", tl.outcomes["duplicate"], app.Failures())
	}

	// The proxy's own count of its answers agrees with the senders'. A
	// webhook is counted once it is done, just after its answer (after its
	// completion, for a 2xx): the last ones may be counted a little later.
	await(t, px.bounds().observed(), func() error {
		counted, err := requestsByOutcome(px)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		var errs []error
		for outcome, n := range tl.outcomes {
			if counted[outcome] != n {
				errs = append(errs, fmt.Errorf("webhook_dedup_requests_total{outcome=%q} is %d; the senders got %d such answers", outcome, counted[outcome], n))
			}
		}
		return errors.Join(errs...)
	})

	perEvent := float64(total) / float64(runEvents)
	summary := fmt.Sprintf("e2e exactly-once [%s]: events=%d deliveries=%d requests=%d duplicates-absorbed=%d in-flight=%d upstream-500s=%d effects-per-event=%.2f in %s",
		store, runEvents, copies, tl.requests, tl.outcomes["duplicate"], tl.outcomes["in-flight"], app.Failures(), perEvent, elapsed.Round(time.Millisecond))
	t.Logf("%s; answers by X-Webhook-Dedup %v, by status %v, connection errors %d", summary, tl.outcomes, tl.statuses, tl.errors)
	fmt.Println(summary)
}

// checkOnceEach checks that every planned event took effect at the app
// exactly once, and nothing else did, and returns the effects counted.
func checkOnceEach(t *testing.T, app *upstream, deliveries []delivery) int {
	t.Helper()
	effects := app.EffectsSnapshot()
	total := 0
	for _, d := range deliveries {
		k := key(d.p, d.ev.ID)
		if got := effects[k]; got != 1 {
			t.Errorf("%s took effect %d times (delivered %d times), want exactly once", k, got, d.copies)
		}
		total += effects[k]
		delete(effects, k)
	}
	for k, n := range effects {
		t.Errorf("the app processed %s (%d times), which no provider sent", k, n)
	}
	return total
}

// sendPlanned delivers every planned event's copies through s, at most
// concurrent events at once, the copies of one a few milliseconds apart
// (as they leave a provider), and hands each copy's final answer to done,
// which may be called from several goroutines at once.
func sendPlanned(ctx context.Context, s *sender, deliveries []delivery, concurrent int, done func(answer, error)) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, concurrent)
	for _, d := range deliveries {
		slots <- struct{}{}
		var copiesDone sync.WaitGroup
		for c := range d.copies {
			wg.Add(1)
			copiesDone.Add(1)
			go func() {
				defer wg.Done()
				defer copiesDone.Done()
				stagger := time.NewTimer(time.Duration(draw(runSeed+3, d.ev.ID, c)%10) * time.Millisecond)
				<-stagger.C
				a, err := s.deliver(ctx, d.p, d.ev)
				done(a, err)
			}()
		}
		go func() {
			copiesDone.Wait()
			<-slots
		}()
	}
	wg.Wait()
}

// requestsByOutcome sums webhook_dedup_requests_total by its outcome label,
// from the admin port's /metrics.
func requestsByOutcome(px *proxy) (map[string]int, error) {
	resp, err := http.Get("http://" + px.Admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d", resp.StatusCode)
	}
	counts := map[string]int{}
	found := false
	for _, line := range strings.Split(string(body), "\n") {
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, "webhook_dedup_requests_total{"), "} ")
		if !ok || !strings.HasPrefix(line, "webhook_dedup_requests_total{") {
			continue
		}
		found = true
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", line, err)
		}
		for _, label := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(label, "outcome="); ok {
				counts[strings.Trim(v, `"`)] += int(n)
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("no webhook_dedup_requests_total in /metrics")
	}
	return counts, nil
}

// delivery is one event a simulated provider sends, and how many copies.
type delivery struct {
	p      provider
	ev     event
	copies int
}

// planDeliveries spreads n events over every provider, each sent 1 to
// maxCopies times (drawn from seed), and counts the copies.
func planDeliveries(n int, seed uint64, maxCopies int) ([]delivery, int) {
	deliveries := make([]delivery, n)
	copies := 0
	for i := range deliveries {
		p := allProviders[i%len(allProviders)]
		ev := p.Event(i)
		c := 1 + int(draw(seed, key(p, ev.ID), 0)%uint64(maxCopies))
		deliveries[i] = delivery{p: p, ev: ev, copies: c}
		copies += c
	}
	return deliveries, copies
}
