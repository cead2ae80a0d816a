// Command webhook-dedup is a reverse proxy that forwards each webhook event
// to the app behind it once, answering the sender's retries itself.
package main

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/webhook-dedup/webhook-dedup/internal/app/cli"
	"github.com/webhook-dedup/webhook-dedup/internal/app/serve"
)

// versionFile is the VERSION file: the semantic version of this source
// tree (X.Y.Z for a release, X.Y.Z-dev between releases), written in that
// one place and read by the Makefile too.
//
//go:embed VERSION
var versionFile string

// Stamped at build time, -ldflags "-X main.version=… -X main.commit=…",
// to override what the binary says of itself. Empty: the version is
// versionFile's, and the commit the one go build recorded (vcs.revision)
// when it built in a git checkout.
var (
	version string
	commit  string
)

func main() {
	// The main goroutine keeps the main thread to itself, so that no other
	// goroutine's write to a frozen DATA_DIR volume can hold that thread in
	// the kernel: Linux hands a signal sent to the process (SIGTERM) to its
	// main thread whenever that thread has none pending, even while it is
	// in an uninterruptible wait, and the signal then waits there, for
	// every thread, until the volume thaws. Locked, the main thread only
	// ever sleeps interruptibly: once serving, Run waits on the store from
	// other goroutines only, each under a deadline. (A start on a frozen
	// volume waits for the thaw in the main thread, and a SIGTERM with it:
	// the process serves nothing meanwhile.)
	runtime.LockOSThread()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	info, _ := debug.ReadBuildInfo()
	err := cli.Run(ctx, os.Args[1:], cli.Environ(os.Environ()), os.Stdout, os.Stderr, stamp(version, commit, versionFile, info))
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhook-dedup:", err)
		os.Exit(cli.ExitCode(err))
	}
}

// stamp is what the binary says about itself: version and commit as
// -ldflags stamped them, else the VERSION file's version and the commit
// recorded in info (abbreviated as git does, "-dirty" with uncommitted
// changes), else "unknown".
func stamp(version, commit, file string, info *debug.BuildInfo) serve.Build {
	b := serve.Build{Version: version, Commit: commit}
	if b.Version == "" {
		b.Version = strings.TrimSpace(file)
	}
	if b.Commit != "" {
		return b
	}
	b.Commit = "unknown"
	if info == nil {
		return b
	}
	var revision, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if revision != "" {
		b.Commit = revision[:min(len(revision), 7)]
		if modified == "true" {
			b.Commit += "-dirty"
		}
	}
	return b
}
