// Command webhook-dedup is a reverse proxy that forwards each webhook event
// to the app behind it once, answering the sender's retries itself.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/webhook-dedup/webhook-dedup/internal/cli"
	"github.com/webhook-dedup/webhook-dedup/internal/serve"
)

// Stamped at build time: -ldflags "-X main.version=… -X main.commit=…".
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Run(ctx, os.Args[1:], cli.Environ(os.Environ()), os.Stdout, os.Stderr, serve.Build{Version: version, Commit: commit})
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhook-dedup:", err)
		os.Exit(cli.ExitCode(err))
	}
}
