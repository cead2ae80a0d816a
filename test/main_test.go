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
	"sync"
	"testing"
)

// binary is the webhook-dedup executable built once by TestMain.
var binary string

// memoryBinary is the executable whose memory the tests measure: binary,
// or, when binary was built with -race, one built as released (asReleased)
// on first use.
var memoryBinary func() (string, error)

// previousBinary is the previous release's executable (previousRelease),
// built from git history on first use, once per test binary; errNoHistory
// when the checkout has none.
var previousBinary func() (string, error)

// asReleased are the go build flags of a release (the Makefile's build and
// release targets, the Dockerfile), which also sets CGO_ENABLED=0
// (releasedEnv). The plain binaries these tests build (memoryBinary, the
// previous release) are built so: they measure what users run, and on a
// cold build cache the dependencies they compile serve the release and
// Dockerfile tests (k8s/) too, where a plain go build's flags made those
// tests compile every dependency once more.
var asReleased = []string{"-trimpath", "-ldflags=-s -w"}

// releasedEnv is the environment a release is built in: this process's,
// and CGO_ENABLED=0.
func releasedEnv() []string { return append(os.Environ(), "CGO_ENABLED=0") }

// build builds the module's binary into out, with the extra go build flags,
// in env (nil: this process's).
func build(out string, flags, env []string) error {
	root, err := filepath.Abs("..")
	if err != nil {
		return fmt.Errorf("e2e: module root: %w", err)
	}
	args := append([]string{"build", "-o", out}, flags...)
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = root
	cmd.Env = env
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("e2e: %s (in %s): %w\n%s", cmd, root, err, output)
	}
	return nil
}

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

	// Most of these tests wait on processes, leases and timeouts rather than
	// burn CPU, so run more of them at once than the default GOMAXPROCS,
	// unless the caller chose -parallel.
	flag.Parse()
	chosen := false
	flag.Visit(func(f *flag.Flag) { chosen = chosen || f.Name == "test.parallel" })
	if !chosen {
		_ = flag.Set("test.parallel", "4")
	}

	// A whole run needs the extra binaries: they are built beside the
	// race build rather than after it, each by the first test that waits
	// for it. A run narrowed with -run builds them only if it uses them.
	wholeRun := flag.Lookup("test.run").Value.String() == ""
	previousBinary = sync.OnceValues(func() (string, error) { return buildPrevious(dir) })
	if wholeRun {
		go previousBinary()
	}

	// WEBHOOK_DEDUP_BIN runs the tests against a binary built elsewhere
	// (a release build, say).
	binary = os.Getenv("WEBHOOK_DEDUP_BIN")
	memoryBinary = func() (string, error) { return binary, nil }
	if binary == "" {
		if len(buildFlags) > 0 {
			// The race detector's shadow memory takes several times the
			// heap: what the memory tests measure is a plain build.
			memoryBinary = sync.OnceValues(func() (string, error) {
				plain := filepath.Join(dir, "webhook-dedup-plain")
				return plain, build(plain, asReleased, releasedEnv())
			})
			if wholeRun {
				go memoryBinary() // the test that uses it reads the error
			}
		}
		binary = filepath.Join(dir, "webhook-dedup")
		if err := build(binary, buildFlags, nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}

	code := m.Run()
	postgres.Close()
	return code
}
