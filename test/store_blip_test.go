package test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/pgtest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// TestAsyncRecordedThroughRedisKill: Redis is SIGKILLed while the app
// holds four deliveries, the app answers 200 to all four while Redis is
// down, and Redis is back 3.5 s later: the proxy keeps the four outcomes
// and records them once Redis takes writes again, so no event is delivered
// twice, not even once its lease has run out. With appendfsync always, the
// setting under which an accepted event survives a kill of Redis: with
// everysec, Redis answers writes before they are in its file while an
// fsync is slow, and a kill then loses them (docs/delivery.md, "What a
// 202 promises"); the last event, accepted milliseconds before the kill,
// was lost that way on a loaded machine.
func TestAsyncRecordedThroughRedisKill(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t, "--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction")
	storeBlipRun(t, "Redis SIGKILL", map[string]string{"REDIS_URL": srv.URL()}, srv.Stop, srv.Start, 3500*time.Millisecond)
}

// TestAsyncRecordedThroughPostgresStop is the same with PostgreSQL stopped
// (an immediate shutdown) for 8 s.
func TestAsyncRecordedThroughPostgresStop(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t)
	storeBlipRun(t, "PostgreSQL stop", map[string]string{"DATABASE_URL": srv.NewDatabase(t)}, srv.Stop, func() { srv.Start(t) }, 8*time.Second)
}

func storeBlipRun(t *testing.T, name string, storeEnv map[string]string, stop, start func(), outage time.Duration) {
	app := newUpstream(t)
	release := app.Hold()
	t.Cleanup(release)
	env := asyncEnv(app.URL, storeEnv)
	// A lease that runs out well within the test: a delivery whose record
	// was dropped would be handed out, and delivered, again.
	px, keys := heldDeliveries(t, app, env, "4s", "6s")

	stop()
	release() // the app answers 200 to the four it holds, with the store down
	// The app's own handlers go on at once: no timeout of the proxy's
	// stands between the release and the effects, only the scheduling a
	// loaded machine adds.
	await(t, loadMargin, func() error {
		if n := len(app.EffectsSnapshot()); n < 4 {
			return fmt.Errorf("the app took %d of the deliveries it held, want 4", n)
		}
		return nil
	})
	time.Sleep(outage) // the outage itself, not a wait for a condition
	start()
	// Once the store answers again (reconnected), the outcomes held are
	// written and the deliveries taken ahead attempted; one whose Take or
	// lease the outage cut short is handed out again once its lease runs
	// out (delivered).
	b := px.bounds()
	px.awaitEffects(t, app, keys, b.reconnected()+b.delivered(1))
	// Past the held deliveries' lease: a record dropped during the outage
	// would have let them out again by now.
	time.Sleep(8 * time.Second)
	twice := 0
	for _, k := range keys {
		if app.Effects(k) > 1 {
			twice++
		}
	}
	summary := fmt.Sprintf("e2e async %s for %s while the app answered 200 to 4 deliveries: %d events, %d delivered twice", name, outage, len(keys), twice)
	t.Log(summary)
	fmt.Println(summary)
	if twice > 0 {
		t.Errorf("%d events delivered twice, want none: the app had answered 200", twice)
	}
	// And the outage did meet the writes that record them.
	px.awaitLog(t, "the store took the record of a delivery the app took, at last", 1)
}

// heldDeliveries starts the proxy with env (and the upstream timeout and
// lease given) in front of app, which holds every request, queues 8
// GitHub events, and returns once the app holds the 4 deliveries
// DELIVERY_CONCURRENCY=4 allows.
func heldDeliveries(t *testing.T, app *upstream, env map[string]string, upstreamTimeout, lease string) (*proxy, []string) {
	t.Helper()
	env["DELIVERY_CONCURRENCY"] = "4"
	env["UPSTREAM_TIMEOUT"], env["LEASE_TTL"] = upstreamTimeout, lease
	px := launch(t, env)
	px.waitHealthy()
	px.awaitReady(t)
	keys := queueEvents(t, px, github, 8)
	await(t, px.bounds().taken(), func() error {
		if n := app.Total(); n < 4 {
			return fmt.Errorf("%d deliveries reached the app, want the 4 DELIVERY_CONCURRENCY allows", n)
		}
		return nil
	})
	return px, keys
}

// TestAsyncRecordedThroughRedisRestart is the Redis run with a restart of
// half a second, the shortest outage a restart makes: Redis shut down
// (SIGTERM), with appendfsync everysec, the setting the docs recommend,
// under which a restart keeps every accepted event (Redis fsyncs its file
// as it shuts down). It was a SIGKILL before, which lost the event
// accepted 8 ms before it on a loaded machine: a kill is
// TestAsyncRecordedThroughRedisKill's.
func TestAsyncRecordedThroughRedisRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t, "--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory-policy", "noeviction")
	storeBlipRun(t, "Redis restart", map[string]string{"REDIS_URL": srv.URL()}, srv.Shutdown, srv.Start, 500*time.Millisecond)
}

// TestAsyncRedisPaused: Redis frozen (SIGSTOP) for 3 s while events are
// accepted and delivered. Every Take sent meanwhile times out, and Redis
// runs it when it thaws: its deliveries are leased to tokens the proxy
// never got. They are handed out by the lane's next Take once Redis
// answers again, not after a lease. So every accepted event is first
// delivered within half a lease of the thaw (one that waited out its
// lease would come a whole lease after it), and none twice. Before:
// go-redis sent a Take whose answer timed out again by itself, both ran
// after the thaw, and the deliveries of the run whose answer was not
// read waited out LEASE_TTL (2 runs in 5 failed, 2 of 2 beside a
// CPU-bound process).
func TestAsyncRedisPaused(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t, "--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory-policy", "noeviction")
	app := newScriptedApp(t, nil)
	env := asyncEnv(app.URL, map[string]string{"REDIS_URL": srv.URL(), "STORE_TIMEOUT": "1s"})
	const lease = 30 * time.Second
	env["UPSTREAM_TIMEOUT"], env["LEASE_TTL"] = "5s", lease.String()
	px := startProxy(t, env)
	ctx, client := testContext(t), newClient(t)

	var mu sync.Mutex
	accepted := map[string]time.Time{}
	var next atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for !stop.Load() {
				ev := acme.Event(int(next.Add(1)))
				a, err := acme.send(ctx, client, px.Addr, ev)
				if err == nil && a.Status == 202 {
					mu.Lock()
					accepted[ev.ID] = time.Now()
					mu.Unlock()
				}
				time.Sleep(5 * time.Millisecond) // the senders' pace
			}
		})
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	countAccepted := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(accepted)
	}
	// Deliveries under way, and then the load for a while: the queue
	// busy, and the store's calls batched, when Redis freezes.
	awaitCount(t, px.bounds().delivered(1), "deliveries before the freeze", app.total, 1)
	time.Sleep(2 * time.Second) // the load before the fault, part of its shape
	srv.Pause()
	time.Sleep(3 * time.Second) // the freeze itself
	srv.Resume()
	thawed := time.Now()
	// And events accepted after the thaw, behind those leased meanwhile.
	// Past the thaw, go-redis redials and each sender's next webhook is
	// claimed: 100 of them come within a claim's bound.
	awaitCount(t, px.bounds().reconnected()+px.bounds().claimed(), "events accepted after the thaw", countAccepted, countAccepted()+100)
	stop.Store(true)
	wg.Wait()

	deadline := thawed.Add(lease / 2)
	worst := time.Duration(0)
	for id, at := range accepted {
		for len(app.seen(id)) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("event %s accepted %s ago never reached the app within half a lease (%s) of the thaw: leased by a Take whose answer the freeze cut off, and left to its lease",
					id, time.Since(at).Round(time.Millisecond), lease/2)
			}
			time.Sleep(10 * time.Millisecond) // polling interval
		}
		worst = max(worst, app.seen(id)[0].at.Sub(thawed))
	}
	twice := 0
	for id := range accepted {
		if n := len(app.seen(id)); n > 1 {
			twice++
		}
	}
	summary := fmt.Sprintf("e2e async Redis frozen 3 s under load: %d events accepted, the last first delivery %s after the thaw (within %s), %d delivered twice",
		len(accepted), worst.Round(time.Millisecond), lease/2, twice)
	t.Log(summary)
	fmt.Println(summary)
	if twice > 0 {
		t.Errorf("%d events delivered twice", twice)
	}
	if strings.Contains(px.Logs(), "another worker took the event over") {
		t.Error("the log says an event was taken over by another worker: there is one worker")
	}
}

// awaitCount polls count until it reaches n, failing the test after
// deadline.
func awaitCount(t *testing.T, deadline time.Duration, what string, count func() int, n int) {
	t.Helper()
	await(t, deadline, func() error {
		if got := count(); got < n {
			return fmt.Errorf("%s: %d, want %d", what, got, n)
		}
		return nil
	})
}
