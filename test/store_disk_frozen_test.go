package test

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// freezableVolume mounts an ext4 file system on a loop device for the
// test, one fsfreeze can freeze as a stalled volume is: it needs root, a
// loop device and mkfs.ext4 (CI has all three).
func freezableVolume(t *testing.T) (dir string, freeze, thaw func()) {
	t.Helper()
	needMounts(t, "mounting and freezing a volume")
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("mounting an ext4 image needs a loop device, and this machine has none (%v): a container without the host's /dev/loop*", err)
	}
	img := filepath.Join(t.TempDir(), "volume.img")
	dir = t.TempDir()
	for _, args := range [][]string{
		{"truncate", "-s", "64M", img},
		{"mkfs.ext4", "-q", "-F", img},
		{"mount", "-o", "loop", img, dir},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	thaw = func() { _ = exec.Command("fsfreeze", "-u", dir).Run() }
	t.Cleanup(func() {
		thaw()
		_ = exec.Command("umount", "-l", dir).Run()
	})
	freeze = func() {
		if out, err := exec.Command("fsfreeze", "-f", dir).CombinedOutput(); err != nil {
			t.Fatalf("fsfreeze -f %s: %v: %s", dir, err, out)
		}
		// Whatever becomes of the test, the volume thaws: a process left
		// waiting on it could not even exit.
		time.AfterFunc(time.Minute, thaw)
	}
	return dir, freeze, thaw
}

// TestDataDirFrozenVolume: with the DATA_DIR volume frozen (fsfreeze, as
// a stalled disk or a snapshot in progress is), a webhook is answered 503
// within STORE_TIMEOUT instead of never, /readyz turns 503 and /metrics
// still answers, and SIGTERM drains and stops on time; once the volume
// thaws, the process exits (a thread blocked in a write on a frozen volume
// holds any process in the kernel until then).
func TestDataDirFrozenVolume(t *testing.T) {
	dir, freeze, thaw := freezableVolume(t)
	app := newUpstream(t)
	env := asyncEnv(app.URL, map[string]string{"DATA_DIR": dir})
	env["STORE_TIMEOUT"], env["SHUTDOWN_TIMEOUT"] = "500ms", "2s"
	px := launch(t, env)
	px.waitHealthy()
	px.awaitReady(t)
	ctx, client := testContext(t), newClient(t)
	expect(t, "an event before the freeze", mustSend(t, ctx, client, px, github, github.Event(1)), 202, "queued")
	awaitEffects(t, app, []string{key(github, github.Event(1).ID)}, 10*time.Second)

	freeze()
	start := time.Now()
	expect(t, "an event with the volume frozen", mustSend(t, ctx, client, px, github, github.Event(2)), 503, "store-unavailable")
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("answered after %s with the volume frozen, want within STORE_TIMEOUT (500ms) and a margin", took)
	}
	if err := px.pollAdmin("/readyz", 503, storeStateDeadline); err != nil {
		t.Errorf("/readyz with the volume frozen: %v", err)
	}
	if err := px.pollAdmin("/metrics", http.StatusOK, 3*time.Second); err != nil {
		t.Errorf("/metrics with the volume frozen: %v", err)
	}

	stopping := time.Now()
	px.Terminate()
	px.awaitLog(t, `"msg":"stopped"`, 1)
	if took := time.Since(stopping); took > 10*time.Second {
		t.Errorf("stopped %s after SIGTERM with the volume frozen, want within SHUTDOWN_TIMEOUT (2s) and a margin", took)
	}
	thaw()
	if code := px.waitExit(exitDeadline); code != 0 {
		t.Errorf("exit status %d once the volume thawed, want 0", code)
	}
}
