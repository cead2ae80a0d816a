package test

import (
	"strings"
	"testing"
)

// TestDataDirKeepsRecordsAcrossRestarts: with DATA_DIR, the embedded store
// is a file that outlives the process. A second process on the same
// directory exits at start saying the file is in use (exit 2) instead of
// sharing it; after the first is killed (SIGKILL, as a crash), a new one
// answers a redelivery of an event completed before the crash as a
// duplicate, and the app sees the event once.
func TestDataDirKeepsRecordsAcrossRestarts(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	env := proxyEnv(app, map[string]string{"DATA_DIR": t.TempDir()})
	ctx, client := testContext(t), newClient(t)
	ev := stripe.Event(1)

	first := startProxy(t, env)
	expect(t, "the first delivery", mustSend(t, ctx, client, first, stripe, ev), 200, "forwarded")

	code, logs, err := runToExit(t, env)
	if err != nil || code != 2 || !strings.Contains(logs, "DATA_DIR") || !strings.Contains(logs, "in use by another process") {
		t.Errorf("a second process on the same DATA_DIR: exit %d, %v; want exit 2 naming DATA_DIR and the lock; output:\n%s", code, err, logs)
	}

	first.Kill()
	second := startProxy(t, env)
	expect(t, "the redelivery after the crash", mustSend(t, ctx, client, second, stripe, ev), 200, "duplicate")
	if n := app.Effects(key(stripe, ev.ID)); n != 1 {
		t.Errorf("the app saw the event %d times across the crash, want 1", n)
	}
}
