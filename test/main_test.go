// Package test drives the built webhook-dedup binary end to end: a real
// process in front of a real HTTP upstream, with a real redis-server, fed by
// simulated webhook providers that sign and retry like the real ones.
package test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binary is the webhook-dedup executable built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "webhook-dedup-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)

	// WEBHOOK_DEDUP_BIN runs the tests against a binary built elsewhere
	// (a release build, say).
	binary = os.Getenv("WEBHOOK_DEDUP_BIN")
	if binary == "" {
		root, err := filepath.Abs("..")
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: module root:", err)
			return 1
		}
		binary = filepath.Join(dir, "webhook-dedup")
		args := append([]string{"build", "-o", binary}, buildFlags...)
		build := exec.Command("go", append(args, ".")...)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %s (in %s): %v\n%s", build, root, err, out)
			return 1
		}
	}

	// Most of these tests wait on processes, leases and timeouts rather than
	// burn CPU, so run more of them at once than the default GOMAXPROCS,
	// unless the caller chose -parallel.
	flag.Parse()
	chosen := false
	flag.Visit(func(f *flag.Flag) { chosen = chosen || f.Name == "test.parallel" })
	if !chosen {
		_ = flag.Set("test.parallel", "4")
	}
	code := m.Run()
	postgres.Close()
	return code
}
