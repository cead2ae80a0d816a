package test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// heldThreads are the process's threads that stay in an uninterruptible
// wait (state D in /proc) over a few polls: what a thread blocked in a
// write on a frozen volume is in until the thaw. The polls tell that apart
// from a passing wait (a page brought back from swap, say).
func (p *proxy) heldThreads(t testing.TB) map[int]bool {
	t.Helper()
	var held map[int]bool
	for i := range 5 {
		if i > 0 {
			time.Sleep(pollInterval) // polling interval
		}
		now := map[int]bool{}
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.cmd.Process.Pid))
		if err != nil {
			t.Fatalf("the process's threads: %v", err)
		}
		for _, task := range tasks {
			tid, err := strconv.Atoi(task.Name())
			if err != nil {
				continue
			}
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", p.cmd.Process.Pid, tid))
			if err != nil {
				continue // the thread has ended
			}
			// The state follows the command's name, in parentheses that
			// may hold spaces and parentheses themselves.
			fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
			if len(fields) > 0 && fields[0] == "D" && (held == nil || held[tid]) {
				now[tid] = true
			}
		}
		held = now
	}
	return held
}

// TestDataDirFrozenVolume: with the DATA_DIR volume frozen (fsfreeze, as
// a stalled disk or a snapshot in progress is), a webhook is answered 503
// within STORE_TIMEOUT instead of never, /readyz turns 503 and /metrics
// still answers, the write the webhook began holds some thread in the
// kernel but never the main one (where a SIGTERM would wait with it), and
// SIGTERM drains and stops within SHUTDOWN_DELAY + SHUTDOWN_TIMEOUT + 2 s;
// once the volume thaws, the process exits (a thread blocked in a write on
// a frozen volume holds any process in the kernel until then).
func TestDataDirFrozenVolume(t *testing.T) {
	dir, freeze, thaw := freezableVolume(t)
	app := newUpstream(t)
	env := asyncEnv(app.URL, map[string]string{"DATA_DIR": dir})
	env["STORE_TIMEOUT"], env["SHUTDOWN_TIMEOUT"] = "500ms", "2s"
	px := launch(t, env)
	px.waitHealthy()
	px.awaitReady(t)
	b := px.bounds()
	ctx, client := testContext(t), newClient(t)
	expect(t, "an event before the freeze", mustSend(t, ctx, client, px, github, github.Event(1)), 202, "queued")
	awaitEffects(t, app, []string{key(github, github.Event(1).ID)}, b.delivered(1))

	freeze()
	start := time.Now()
	expect(t, "an event with the volume frozen", mustSend(t, ctx, client, px, github, github.Event(2)), 503, "store-unavailable")
	if took := time.Since(start); took > b.claimed() {
		t.Errorf("answered after %s with the volume frozen, want within STORE_TIMEOUT (%s) and %s for a loaded machine", took, b.storeOp(), loadMargin)
	}
	if err := px.pollAdmin("/readyz", 503, storeStateDeadline); err != nil {
		t.Errorf("/readyz with the volume frozen: %v", err)
	}
	if err := px.pollAdmin("/metrics", http.StatusOK, b.observed()); err != nil {
		t.Errorf("/metrics with the volume frozen: %v", err)
	}
	// Linux hands a signal sent to the process to its main thread whenever
	// that thread has none pending, even in an uninterruptible wait, and
	// the signal waits there with it: held by the volume, the main thread
	// would keep a SIGTERM from the process until the thaw.
	switch held := px.heldThreads(t); {
	case held[px.cmd.Process.Pid]:
		t.Error("the process's main thread is held by the frozen volume: a SIGTERM would wait there for the thaw")
	case len(held) == 0:
		t.Error("no thread of the process is held by the frozen volume: the test did not meet what it is about")
	}

	// On the process's own clock, from the signal's arrival to its last
	// line, the bound holds; what the test sees adds the signal's delivery
	// and a loaded machine's scheduling (loadMargin), but never the thaw.
	bound := b.cfg.ShutdownDelay + b.cfg.ShutdownTimeout + exitSlack
	px.Terminate()
	px.awaitLogWithin(t, `"msg":"stopped"`, 1, b.exited())
	if span, ok := logSpan(px.Logs(), "shutting down", "stopped"); !ok {
		t.Error(`the log has no "shutting down" then "stopped" line`)
	} else if span > bound {
		t.Errorf("stopped %s after it began shutting down with the volume frozen, want within %s", span.Round(10*time.Millisecond), bound)
	}
	thaw()
	if code := px.waitExit(exitDeadline); code != 0 {
		t.Errorf("exit status %d once the volume thawed, want 0", code)
	}
}
