package test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// smallVolume mounts a tmpfs of size bytes for the test, as a full
// persistent volume is: it needs root (CI runs as root).
func smallVolume(t *testing.T, size string) string {
	t.Helper()
	needMounts(t, "mounting a small volume to fill")
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// needMounts skips the test, saying why, where the machine forbids what
// it does (mounting a volume): without root, or as a root whose
// CAP_SYS_ADMIN is withheld (a container run without --privileged).
func needMounts(t *testing.T, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("%s needs root (CI runs as root)", what)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatalf("/proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		hex, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			t.Fatalf("/proc/self/status %s: %v", line, err)
		}
		if caps&(1<<capSysAdmin) == 0 {
			t.Skipf("%s needs CAP_SYS_ADMIN, which this machine withholds from root (a container run without --privileged)", what)
		}
	}
}

// capSysAdmin is CAP_SYS_ADMIN's bit in a capability set
// (linux/capability.h): the one mount and fsfreeze need.
const capSysAdmin = 21

// fill writes a file until the volume is full, and returns a func that
// deletes it.
func fill(t *testing.T, dir string) (free func()) {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	_ = f.Close()
	return func() {
		if err := os.Remove(name); err != nil {
			t.Error(err)
		}
	}
}

// TestDataDirFullVolume: with the DATA_DIR volume full, /readyz turns 503
// (the file refuses the writes that need it to grow, though it answers
// every read and the smallest writes still fit in its free pages), the four
// deliveries the app answered 200 while it was full are not delivered
// again however long it stays full, and once there is room the proxy is
// ready again, records them, and delivers the rest.
func TestDataDirFullVolume(t *testing.T) {
	t.Parallel()
	dir := smallVolume(t, "8m")
	app := newUpstream(t)
	release := app.Hold()
	t.Cleanup(release)
	// Answers kept for replay, large enough that recording one needs the
	// file to grow: a full volume refuses it.
	app.PadAnswers(512 << 10)
	env := asyncEnv(app.URL, map[string]string{"DATA_DIR": dir, "REPLAY_RESPONSE": "true", "REPLAY_MAX_BYTES": "1048576"})
	px, keys := heldDeliveries(t, app, env, "2s", "3s")

	free := fill(t, dir)
	release() // the app takes the four it holds, with the volume full
	if err := px.pollAdmin("/readyz", 503, storeStateDeadline); err != nil {
		t.Errorf("/readyz with the volume full: %v", err)
	}
	// Several of the held deliveries' leases pass while the volume is full.
	time.Sleep(8 * time.Second)
	twice := 0
	for _, k := range keys {
		if app.Effects(k) > 1 {
			twice++
		}
	}
	free()
	if err := px.pollAdmin("/readyz", 200, storeStateDeadline); err != nil {
		t.Errorf("/readyz once there is room: %v", err)
	}
	// The held deliveries' outcomes are recorded, or, their leases run
	// out, they are delivered again (delivered); the four waiting behind
	// them go in the rounds of DELIVERY_CONCURRENCY (drained).
	b := px.bounds()
	awaitEffects(t, app, keys, b.delivered(1)+b.drained(len(keys), 0))
	summary := fmt.Sprintf("e2e DATA_DIR volume full for 8s after the app answered 200 to 4 deliveries: %d of %d events delivered twice; %d completions refused by the volume and kept",
		twice, len(keys), strings.Count(px.Logs(), "keeping its outcome"))
	t.Log(summary)
	fmt.Println(summary)
	if twice > 0 {
		t.Errorf("%d events delivered again while the volume was full, want none: the app had answered 200", twice)
	}
	if !strings.Contains(px.Logs(), "keeping its outcome") {
		t.Error("no completion was refused by the full volume: the test did not meet what it is about")
	}
}
