// Package cli is the webhook-dedup command line: it runs the command asked
// for (serve, by default) and tells the exit status its outcome calls for.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/internal/app/serve"
)

// ExitCode is the exit status for err, Run's error: 0 for none, 2 for a
// problem with the configuration or the command line, 1 for the rest.
func ExitCode(err error) int {
	var ee *exitError
	var ce *config.Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ce):
		return 2
	default:
		return 1
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

// Run runs the command args name (serve when none), with the environment
// environ (variable name to value): the whole program, which main only
// wires to the process. ExitCode tells the exit status its error calls for.
func Run(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer, build serve.Build) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "-h", "-help", "--help", "help":
		return writeUsage(stdout)
	case "version", "-version", "--version":
		return printVersion(stdout, build)
	case "serve":
		return serve.Run(ctx, environ, stderr, build)
	case "check":
		return check(args, environ, stdout, stderr)
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

// Environ turns os.Environ's list into the map Run reads.
func Environ(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
