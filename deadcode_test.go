package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/buildcache"
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
	// Built once per version and kept in the user's cache directory: go
	// install links it again every time, seconds on a loaded machine.
	deadcode, err := buildcache.Binary("deadcode", deadcodeVersion, func(out string) error {
		install := exec.Command("go", "install", "golang.org/x/tools/cmd/deadcode@"+deadcodeVersion)
		install.Env = append(os.Environ(), "GOBIN="+filepath.Dir(out))
		if output, err := install.CombinedOutput(); err != nil {
			return fmt.Errorf("%w\n%s", err, output)
		}
		return nil
	})
	if err != nil {
		t.Skipf("cannot build deadcode %s (offline, and not in the module cache?): %v", deadcodeVersion, err)
	}
	cmd := exec.Command(deadcode, "-test", "./...")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("deadcode -test ./...: %v\n%s", err, stderr.String())
	}
	if report := strings.TrimSpace(stdout.String()); report != "" {
		t.Errorf("unreachable functions (delete them, or call them from what should):\n%s", report)
	}
}
