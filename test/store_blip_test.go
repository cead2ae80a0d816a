package test

import (
	"fmt"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/pgtest"
	"github.com/webhook-dedup/webhook-dedup/internal/redistest"
)

// TestAsyncRecordedThroughRedisKill: Redis is SIGKILLed (append-only file,
// fsync every second) while the app holds four deliveries, the app answers
// 200 to all four while Redis is down, and Redis is back 3.5 s later: the
// proxy keeps the four outcomes and records them once Redis takes writes
// again, so no event is delivered twice, not even once its lease has run
// out.
func TestAsyncRecordedThroughRedisKill(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t, "--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory-policy", "noeviction")
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
	deadline := time.Now().Add(10 * time.Second)
	for len(app.EffectsSnapshot()) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("the app took %d of the deliveries it held, want 4", len(app.EffectsSnapshot()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(outage) // the outage itself, not a wait for a condition
	start()
	awaitEffects(t, app, keys, 30*time.Second)
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
	deadline := time.Now().Add(10 * time.Second)
	for app.Total() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries reached the app, want the 4 DELIVERY_CONCURRENCY allows", app.Total())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return px, keys
}
