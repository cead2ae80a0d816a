// Package cli is the webhook-dedup command line: it runs the command asked
// for (serve, by default) and tells the exit status its outcome calls for.
package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/internal/app/serve"
)

// ExitCode is the exit status for err, Run's error: 0 for none, 2 for a
// problem with the configuration or the command line, 1 for the rest.
func ExitCode(err error) int {
	var ee *exitError
	var ce *config.Error
	var le *commandLineError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &le):
		return 2
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

// commandLineError is a mistake on the command line itself: an unknown
// command or flag, a missing argument, a flag's bad value. Its message is
// the mistake, in one line, then where to read how the command is used
// (exit status 2).
type commandLineError struct {
	// command is the command's path, "webhook-dedup dead-letters".
	command string
	err     error
}

func (e *commandLineError) Error() string {
	return e.err.Error() + "\nRun '" + e.command + " -h' for usage and examples."
}
func (e *commandLineError) Unwrap() error { return e.err }

// flagError makes err, about cmd's command line, a *commandLineError.
func flagError(cmd *cobra.Command, err error) error {
	return &commandLineError{command: cmd.CommandPath(), err: err}
}

// Run runs the command args name (serve when none), with the environment
// environ (variable name to value): the whole program, which main only
// wires to the process. ExitCode tells the exit status its error calls for.
func Run(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer, build serve.Build) error {
	root := newRoot(&env{environ: environ, stdout: stdout, stderr: stderr, build: build})
	// Go's flag package, which this command line used before, took one
	// dash for a long flag: keep the two that scripts may still pass.
	if len(args) > 0 && (args[0] == "-version" || args[0] == "-help") {
		args = append([]string{"-" + args[0]}, args[1:]...)
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return nil
	}
	var le *commandLineError
	if errors.As(err, &le) {
		return err
	}
	// cobra's own errors before a command runs: an unknown command
	// (from Find, or a root given arguments) or a wrong argument count.
	if msg := err.Error(); strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "accepts ") ||
		strings.HasPrefix(msg, "requires ") || strings.HasPrefix(msg, "invalid argument") {
		return flagError(cmd, err)
	}
	return err
}

// env is what every command reads and writes: the process's environment
// and output, and what the binary says about itself.
type env struct {
	environ        map[string]string
	stdout, stderr io.Writer
	build          serve.Build
}

// newRoot builds the command tree. Every command returns its errors to
// Run (SilenceErrors), which main prints once, without the usage
// (SilenceUsage): a mistake is one line and a pointer to -h, as in gh and
// kubectl, not a screenful of help with the error at its end.
func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "webhook-dedup",
		Short: "Forward each webhook event to the app once",
		Long: "webhook-dedup is a reverse proxy that forwards each webhook event to the app behind it once,\n" +
			"answering the sender's retries itself. The environment configures it (listed below);\n" +
			"with no command it serves.",
		Example: "  UPSTREAM_URL=http://127.0.0.1:3000 ROUTES=/webhooks/stripe=stripe webhook-dedup\n" +
			"  webhook-dedup check\n" +
			"  webhook-dedup dead-letters --since 2h",
		Version:       versionLine(e.build),
		Args:          noArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		// Suggestions go on the error's own line (unknownCommand).
		DisableSuggestions:         true,
		SuggestionsMinimumDistance: 2,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve.Run(cmd.Context(), e.environ, e.stderr, e.build)
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	root.CompletionOptions.DisableDefaultCmd = true // completion is ours, with an example
	root.AddCommand(
		newServeCmd(e), newCheckCmd(e), newHealthcheckCmd(e), newMigrateCmd(e),
		newStoreCmd(e, "inspect"), newStoreCmd(e, "forget"), newDeadLettersCmd(e), newRetryCmd(e),
		newSendCmd(e), newVersionCmd(e), newCompletionCmd(root),
	)
	root.SetHelpCommand(newHelpCmd(root))
	// The help of the root and of serve ends with every variable that
	// configures the server.
	defaultHelp := root.HelpFunc()
	root.SetHelpFunc(func(cmd *cobra.Command, args []string) {
		defaultHelp(cmd, args)
		if cmd == root || cmd.Name() == "serve" {
			fmt.Fprintln(cmd.OutOrStdout())
			_ = config.WriteUsage(variablesOnly(cmd.OutOrStdout()))
		}
	})
	return root
}

// noArgs refuses arguments; on the root an argument is a command that
// does not exist, said so with the commands it may have meant.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.HasParent() {
		return flagError(cmd, fmt.Errorf("%s takes no arguments, got %q", cmd.Name(), args))
	}
	msg := fmt.Sprintf("unknown command %q", args[0])
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += " (did you mean " + strings.Join(s, " or ") + "?)"
	}
	return flagError(cmd, errors.New(msg))
}

// exactArgs wants one argument per name, named in the error.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == len(names) {
			return nil
		}
		return flagError(cmd, fmt.Errorf("%s wants %s, got %d argument%s", cmd.Name(), strings.Join(names, " "), len(args), plural(len(args))))
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// variablesOnly is w without the lines config.WriteUsage starts with
// (its summary and a one-line list of commands, which the command's own
// help says better), up to the list of variables.
func variablesOnly(w io.Writer) io.Writer {
	return &skipUntil{w: w, mark: "Configured by environment variables:"}
}

// skipUntil drops what is written to it until a line starting with mark.
type skipUntil struct {
	w       io.Writer
	mark    string
	started bool
	pending []byte
}

func (s *skipUntil) Write(p []byte) (int, error) {
	if s.started {
		return s.w.Write(p)
	}
	s.pending = append(s.pending, p...)
	for {
		line, rest, ok := bytes.Cut(s.pending, []byte("\n"))
		if !ok {
			return len(p), nil
		}
		if bytes.HasPrefix(line, []byte(s.mark)) {
			s.started = true
			_, err := s.w.Write(s.pending)
			s.pending = nil
			return len(p), err
		}
		s.pending = rest
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
