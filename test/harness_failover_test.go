package test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"
)

// How hard a failover run pushes: events, how often a new one starts, how
// many deliveries may be under way at once, and when the master dies.
const (
	failoverEvents     = 2000
	failoverInterval   = 4 * time.Millisecond
	failoverConcurrent = 64
	failoverKillAt     = failoverEvents / 4 // the event whose start kills the master
	failoverSeed       = 20261201
	failoverFailOneIn  = 20 // the app fails one request in twenty with 500
	// failoverRunLimit bounds one run; a run takes 15–25s.
	failoverRunLimit = 50 * time.Second
)

// failoverSetup is one Redis deployment under test.
type failoverSetup struct {
	// name names the deployment in the summary ("cluster", "sentinel").
	name string
	// env says how the proxies reach Redis.
	env map[string]string
	// waitReplicas is REDIS_WAIT_REPLICAS.
	waitReplicas int
	// fail kills a master (SIGKILL), at once, then waits until a replica
	// has taken over, restarts the dead server (it comes back as a
	// replica) and waits until it is in sync.
	fail func(ctx context.Context) (failoverTimes, error)
}

// failoverTimes are when the failure's stages ended.
type failoverTimes struct {
	killed, promoted, rejoined time.Time
}

// failoverResult is what one run measured.
type failoverResult struct {
	events, deliveries, requests int
	// lost counts events the app never processed, or deliveries that got
	// no 2xx before the run's end.
	lost int
	// twice counts events the app processed more than once.
	twice int
	// unavailable are the times the proxies answered 503.
	unavailable []time.Time
	inFlight    int
	statuses    map[int]int
	connErrors  int
	// redelivered counts the late redeliveries (after the failover) that
	// were forwarded, not answered as duplicates: records the failover lost.
	redelivered int
	times       failoverTimes
	elapsed     time.Duration
}

// window is the span from the first 503 at or after the kill to the last
// one, and how long after the kill each came; early counts the 503s
// before the kill (a WAIT that timed out on a busy machine, say).
func (r failoverResult) window() (span, first, last time.Duration, early int) {
	var after []time.Time
	for _, at := range r.unavailable {
		if at.Before(r.times.killed) {
			early++
		} else {
			after = append(after, at)
		}
	}
	if len(after) == 0 {
		return 0, 0, 0, early
	}
	first = after[0].Sub(r.times.killed)
	last = after[len(after)-1].Sub(r.times.killed)
	return last - first, first, last, early
}

func (r failoverResult) summary(setup failoverSetup) string {
	span, first, last, early := r.window()
	return fmt.Sprintf("e2e failover [%s REDIS_WAIT_REPLICAS=%d]: events=%d deliveries=%d requests=%d lost=%d processed-twice=%d "+
		"late-redeliveries-forwarded=%d 503s=%d (before the kill: %d) 503-window=%s (first +%s, last +%s after the kill) in-flight-409s=%d "+
		"promoted +%s rejoined +%s in %s",
		setup.name, setup.waitReplicas, r.events, r.deliveries, r.requests, r.lost, r.twice,
		r.redelivered, len(r.unavailable), early, span.Round(time.Millisecond), first.Round(time.Millisecond), last.Round(time.Millisecond), r.inFlight,
		r.times.promoted.Sub(r.times.killed).Round(time.Millisecond), r.times.rejoined.Sub(r.times.killed).Round(time.Millisecond),
		r.elapsed.Round(time.Millisecond))
}

// failoverRun is three proxies sharing one Redis deployment, and the
// senders' record of what they answered.
type failoverRun struct {
	proxies []*proxy
	client  *http.Client

	mu          sync.Mutex
	requests    int
	unavailable []time.Time
	statuses    map[int]int
	connErrors  int
}

// runFailover starts three proxies on setup's Redis and a counting app,
// delivers failoverEvents events (each 1–3 times, a few milliseconds
// apart, retried on any non-2xx like a provider), kills a master a
// quarter of the way in, and once the deployment has recovered delivers
// every event once more. It fails the test if an event is lost, and
// returns what it measured.
func runFailover(t *testing.T, setup failoverSetup) failoverResult {
	app := newUpstream(t)
	app.FailWhen(func(k string, attempt int) bool { return seeded(failoverSeed, failoverFailOneIn, k, attempt) })
	app.WorkFor(func(k string, attempt int) time.Duration {
		return time.Duration(draw(failoverSeed+1, k, attempt)%4) * time.Millisecond
	})
	env := map[string]string{
		"UPSTREAM_URL":        app.URL,
		"ROUTES":              routes(allProviders...),
		"UPSTREAM_TIMEOUT":    "2s",
		"LEASE_TTL":           "6s",
		"LOG_LEVEL":           "warn",
		"REDIS_WAIT_REPLICAS": fmt.Sprint(setup.waitReplicas),
	}
	for k, v := range signedSecrets {
		env[k] = v
	}
	for k, v := range setup.env {
		env[k] = v
	}
	run := &failoverRun{client: newClient(t), statuses: map[int]int{}}
	for range 3 {
		px := startProxy(t, env)
		if err := px.pollAdmin("/readyz", 200, storeStateDeadline); err != nil {
			t.Fatalf("readyz before the run: %v", err)
		}
		run.proxies = append(run.proxies, px)
	}

	deliveries, copies := planDeliveries(failoverEvents, failoverSeed+2, 3)

	ctx, cancel := context.WithTimeout(context.Background(), failoverRunLimit)
	defer cancel()
	start := time.Now()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		failed    []string
		times     failoverTimes
		failErr   error
		recovered = make(chan struct{})
	)
	slots := make(chan struct{}, failoverConcurrent)
	tick := time.NewTicker(failoverInterval)
	for n, d := range deliveries {
		<-tick.C
		if n == failoverKillAt {
			go func() {
				defer close(recovered)
				times, failErr = setup.fail(ctx)
			}()
		}
		for c := range d.copies {
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				// Copies leave the provider a few milliseconds apart.
				stagger := time.NewTimer(time.Duration(draw(failoverSeed+3, d.ev.ID, c)%10) * time.Millisecond)
				<-stagger.C
				if err := run.deliver(ctx, d.p, d.ev, n+c); err != nil {
					mu.Lock()
					failed = append(failed, err.Error())
					mu.Unlock()
				}
			})
		}
	}
	tick.Stop()
	wg.Wait()
	<-recovered
	if failErr != nil {
		t.Fatalf("%s failover: %v", setup.name, failErr)
	}

	// Every event once more, now that the failover is over: a record the
	// failover lost lets this one through to the app a second time.
	var redelivered int
	for n, d := range deliveries {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			a, err := run.deliverAnswer(ctx, d.p, d.ev, n)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				failed = append(failed, err.Error())
			case a.Dedup() != "duplicate":
				redelivered++
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	res := failoverResult{
		events: failoverEvents, deliveries: copies, redelivered: redelivered,
		times: times, elapsed: elapsed, lost: len(failed),
	}
	for _, f := range failed {
		t.Errorf("lost delivery: %s", f)
	}
	effects := app.EffectsSnapshot()
	for _, d := range deliveries {
		k := key(d.p, d.ev.ID)
		switch n := effects[k]; {
		case n == 0:
			res.lost++
			t.Errorf("%s was never processed by the app", k)
		case n > 1:
			res.twice++
			t.Logf("%s was processed %d times", k, n)
		}
		delete(effects, k)
	}
	for k, n := range effects {
		t.Errorf("the app processed %s (%d times), which no provider sent", k, n)
	}
	run.mu.Lock()
	res.requests, res.statuses, res.connErrors = run.requests, run.statuses, run.connErrors
	res.unavailable = run.unavailable
	run.mu.Unlock()
	sort.Slice(res.unavailable, func(i, j int) bool { return res.unavailable[i].Before(res.unavailable[j]) })
	res.inFlight = res.statuses[http.StatusConflict]
	for _, px := range run.proxies {
		checkLogs(t, px.Logs())
	}

	summary := res.summary(setup)
	t.Logf("%s; answers by status %v, connection errors %d", summary, res.statuses, res.connErrors)
	fmt.Println(summary)
	return res
}

// deliver sends ev until an attempt is answered 2xx, spreading attempts
// over the proxies as a load balancer would; first picks the first proxy.
func (r *failoverRun) deliver(ctx context.Context, p provider, ev event, first int) error {
	_, err := r.deliverAnswer(ctx, p, ev, first)
	return err
}

func (r *failoverRun) deliverAnswer(ctx context.Context, p provider, ev event, first int) (answer, error) {
	var last string
	for n := 0; ; n++ {
		if n > 0 {
			// A provider's backoff between its own attempts, not a wait for a server.
			t := time.NewTimer(min(time.Duration(n)*20*time.Millisecond, 200*time.Millisecond))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return answer{}, fmt.Errorf("%s %s: no 2xx in %d attempts; last: %s", p.Name, ev.ID, n, last)
			}
		}
		px := r.proxies[(first+n)%len(r.proxies)]
		a, err := p.send(ctx, r.client, px.Addr, ev)
		r.record(a, err)
		if err != nil {
			last = err.Error()
			continue
		}
		if a.Status >= 200 && a.Status < 300 {
			return a, nil
		}
		last = a.String()
	}
}

func (r *failoverRun) record(a answer, err error) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	if err != nil {
		r.connErrors++
		return
	}
	r.statuses[a.Status]++
	if a.Status == http.StatusServiceUnavailable {
		r.unavailable = append(r.unavailable, now)
	}
}
