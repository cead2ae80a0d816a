package test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestAsyncRolledBackToSync: events an async route queued are delivered
// after the route is rolled back to sync, not stranded (their senders'
// retries would be answered 409 in-flight for ever): the proxy finds them
// in the store at start, says so, and its workers deliver them; the
// senders' copies are then duplicates.
func TestAsyncRolledBackToSync(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	// While the route is async the app fails every delivery: the events
	// stay queued, retrying.
	var down atomic.Bool
	down.Store(true)
	app.FailWhen(func(string, int) bool { return down.Load() })
	env := asyncEnv(app.URL, diskStore.env(t))
	px := launch(t, env)
	px.waitHealthy()
	px.awaitReady(t)
	const n = 20
	keys := queueEvents(t, px, github, n)
	px.Stop()

	down.Store(false)
	env["DELIVERY"] = "sync"
	next := startProxy(t, env)
	started := time.Now()
	// The events queued, retrying, are due again within RETRY_MAX_INTERVAL.
	b := next.bounds()
	awaitEffects(t, app, keys, b.delivered(2)+b.drained(n, 0))
	next.awaitLog(t, "no route is async, but the store holds events async routes queued", 1)
	for i := range n {
		ev := github.Event(i)
		expect(t, "a sender's retry of "+ev.ID+" after its delivery", mustSend(t, testContext(t), newClient(t), next, github, ev), 200, "duplicate")
	}
	summary := fmt.Sprintf("e2e async rolled back to sync with %d events queued: all delivered within %s of the restart, once each", n, time.Since(started).Round(100*time.Millisecond))
	t.Log(summary)
	fmt.Println(summary)
	for _, k := range keys {
		if e := app.Effects(k); e != 1 {
			t.Errorf("%s took effect %d times, want once", k, e)
		}
	}
}
