package test

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// TestInspectStoreDownSaysOneThing: with Redis unreachable, inspect exits
// 1 with one line that says so, not go-redis's log of every failed dial.
func TestInspectStoreDownSaysOneThing(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(binary, "inspect", "stripe", "evt_1")
	cmd.Env = envList(map[string]string{"REDIS_URL": "redis://" + redistest.FreeAddr(t)}) // nothing listens there
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("inspect with Redis down: exit %d (%v), want 1\n%s", code, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "connection refused") {
		t.Errorf("inspect with Redis down printed %d lines, want the one error:\n%s", len(lines), stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("inspect with Redis down printed on stdout: %q", stdout.String())
	}
}
