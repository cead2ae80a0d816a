package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// deadcodeVersion pins golang.org/x/tools' deadcode, so that a new
// release's sharper analysis shows up in a change of this line, not in a
// test that starts failing by itself.
const deadcodeVersion = "v0.53.0"

// TestNoDeadCode runs deadcode (golang.org/x/tools/cmd/deadcode) over the
// module, tests included: a function nothing reaches, not even a test, is
// either to delete or a sign that what should call it does not. It fails
// listing what deadcode reports. It skips, saying why, only when the tool
// cannot be built (no module proxy and not in the module cache).
func TestNoDeadCode(t *testing.T) {
	if testing.Short() {
		t.Skip("deadcode analyses the whole module (about 20 s): not with -short")
	}
	bin := filepath.Join(t.TempDir(), "bin")
	install := exec.Command("go", "install", "golang.org/x/tools/cmd/deadcode@"+deadcodeVersion)
	install.Env = append(os.Environ(), "GOBIN="+bin)
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("cannot build deadcode %s (offline, and not in the module cache?): %v\n%s", deadcodeVersion, err, out)
	}
	cmd := exec.Command(filepath.Join(bin, "deadcode"), "-test", "./...")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("deadcode -test ./...: %v\n%s", err, stderr.String())
	}
	if report := strings.TrimSpace(stdout.String()); report != "" {
		t.Errorf("unreachable functions (delete them, or call them from what should):\n%s", report)
	}
}
