package test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/redistest"
)

// TestAsyncDeadAppProbed: with the app down (nothing listening on its
// port) and events queued, the proxy backs off the app as a whole, one
// probe at a time with growing pauses, rather than failing every event's
// attempts as fast as it can; once the app listens, every event is
// delivered.
func TestAsyncDeadAppProbed(t *testing.T) {
	t.Parallel()
	addr := redistest.FreeAddr(t) // the app's, nothing on it yet
	env := asyncEnv("http://"+addr, diskStore.env(t))
	px := launch(t, env)
	px.waitHealthy()
	px.awaitReady(t)
	keys := queueEvents(t, px, github, 50)
	px.awaitLog(t, "the app does not answer: delivering one probe at a time", 1)
	// The rate is the point: let two seconds of the outage pass.
	time.Sleep(2 * time.Second)
	failed := strings.Count(px.Logs(), "delivery failed: retrying later")
	summary := fmt.Sprintf("e2e async, app down for 2s with %d events queued: %d failed attempts", len(keys), failed)
	t.Log(summary)
	fmt.Println(summary)
	if failed > 40 {
		t.Errorf("%d failed attempts against a dead app, want the 16 that open the breaker, at most the 16 taken ahead, and a few probes", failed)
	}

	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	app := newUpstreamOn(t, l)
	awaitEffects(t, app, keys, 60*time.Second)
}
