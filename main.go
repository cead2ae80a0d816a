// Command webhook-dedup is a reverse proxy that forwards each webhook event
// to the app behind it once, answering the sender's retries itself.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Stamped at build time: -ldflags "-X main.version=… -X main.commit=…".
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], environMap(os.Environ()), os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhook-dedup:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}

// exitError carries the exit status for an error: 2 for configuration and
// usage errors, 1 for the rest.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageError(err error) error { return &exitError{code: 2, err: err} }

// run is the whole program: main only wires the process to it.
func run(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "-h", "-help", "--help", "help":
		return writeUsage(stdout)
	case "version", "-version", "--version":
		return printVersion(stdout)
	case "serve":
		return serve(ctx, environ, stderr)
	case "healthcheck":
		return healthcheck(ctx, environ, stdout)
	case "migrate":
		return migrate(ctx, args, environ, stdout, stderr)
	case "inspect", "forget":
		return storeCommand(ctx, cmd, args, environ, stdout)
	case "dead-letters":
		return deadLettersCommand(ctx, args, environ, stdout)
	case "retry":
		return retryCommand(ctx, args, environ, stdout)
	default:
		_ = writeUsage(stderr)
		return usageError(fmt.Errorf("unknown command %q", cmd))
	}
}

func environMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
