package test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestDataDirResumesDeliveriesAtOnce: with DATA_DIR, one process holds the
// file, so the deliveries a killed process held are due as soon as the
// file is reopened: the restarted proxy delivers them at once, not a
// LEASE_TTL (here a minute) later.
func TestDataDirResumesDeliveriesAtOnce(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	// Every request the app gets before the kill stays there: those are
	// the deliveries the killed process held. After the kill, the app
	// answers at once.
	var killed atomic.Bool
	var held atomic.Int32
	app.WorkFor(func(string, int) time.Duration {
		if killed.Load() {
			return 0
		}
		held.Add(1)
		return time.Hour
	})
	env := asyncEnv(app.URL, diskStore.env(t))
	env["DELIVERY_CONCURRENCY"] = "4"
	env["UPSTREAM_TIMEOUT"], env["LEASE_TTL"] = "50s", "60s"
	px := launch(t, env)
	px.waitHealthy()
	px.awaitReady(t)
	keys := queueEvents(t, px, github, 8)
	await(t, px.bounds().delivered(1), func() error {
		if n := held.Load(); n < 4 {
			return fmt.Errorf("%d deliveries reached the app, want the 4 DELIVERY_CONCURRENCY allows", n)
		}
		return nil
	})
	killed.Store(true)
	px.Kill()
	px.waitExit(exitDeadline)

	restarted := time.Now()
	next := startProxy(t, env)
	// At once: the queue drains with no lease to wait out, in far less
	// than the held deliveries' one-minute lease.
	b := next.bounds()
	awaitEffects(t, app, keys, loadMargin+b.drained(len(keys), 0))
	summary := fmt.Sprintf("e2e DATA_DIR kill -9 with %d deliveries held: all %d events delivered %s after the restart (LEASE_TTL %s)",
		held.Load(), len(keys), time.Since(restarted).Round(100*time.Millisecond), env["LEASE_TTL"])
	t.Log(summary)
	fmt.Println(summary)
}
