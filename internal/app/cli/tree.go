package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/internal/app/serve"
)

// Each command below is a constructor in the manner of gh and helm: Use,
// Short, an Example, its arguments checked by Args, and the work done by
// a function that takes what the flags and arguments say and the env, so
// that it runs the same in a test as in the process.

func newServeCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "serve",
		Short:   "Serve webhooks (the default when no command is given)",
		Long:    "Serve webhooks on LISTEN_ADDR and the admin port on ADMIN_ADDR, configured by the environment (listed below).",
		Example: "  UPSTREAM_URL=http://127.0.0.1:3000 ROUTES=/webhooks/stripe=stripe STRIPE_WEBHOOK_SECRET=whsec_… webhook-dedup serve",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve.Run(cmd.Context(), e.environ, e.stderr, e.build)
		},
	}
}

func newCheckCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "check",
		Short: "Validate the configuration as serve would, and exit",
		Long: "Validate the environment as serve would before it binds a port or opens the store, and say so in one line.\n" +
			"Every problem is listed at once, each naming its variable (exit status 2); warnings go to stderr.",
		Example: "  ROUTES=/hooks=github;async GITHUB_WEBHOOK_SECRET=s DATA_DIR=/var/lib/wd UPSTREAM_URL=http://127.0.0.1:3000 webhook-dedup check",
		Args:    noArgs,
		RunE: func(*cobra.Command, []string) error {
			return check(e.environ, e.stdout, e.stderr)
		},
	}
}

func newHealthcheckCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "healthcheck",
		Short: "Ask the local admin port's /readyz (for images without curl)",
		Long:  "Ask /readyz on ADMIN_ADDR (a wildcard host is reached on loopback): exit 0 when ready, 1 otherwise.",
		Example: "  # in a Dockerfile\n" +
			"  HEALTHCHECK CMD [\"webhook-dedup\", \"healthcheck\"]",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return healthcheck(cmd.Context(), e.environ, e.stdout)
		},
	}
}

func newMigrateCmd(e *env) *cobra.Command {
	var printOnly bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create what the configured store needs (a DynamoDB table, PostgreSQL's tables)",
		Long: "Create what the configured store needs before serving, for an operator or an init container.\n" +
			"With --print, print PostgreSQL's SQL instead, for DBAs who apply migrations themselves (the database is not contacted).",
		Example: "  DATABASE_URL=postgres://wd@db/wd webhook-dedup migrate\n" +
			"  DATABASE_URL=postgres://wd@db/wd webhook-dedup migrate --print > migration.sql",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return migrate(cmd.Context(), printOnly, e.environ, e.stdout, e.stderr)
		},
	}
	cmd.Flags().BoolVar(&printOnly, "print", false, "print PostgreSQL's SQL instead of applying it")
	return cmd
}

// newStoreCmd is inspect or forget.
func newStoreCmd(e *env, name string) *cobra.Command {
	short, example := "Show one event's record as the admin API does", "  webhook-dedup inspect stripe evt_1NG8Du2eZvKYlo2C\n  webhook-dedup inspect /hooks/acme acme-1   # a generic route's namespace is its path, unescaped"
	if name == "forget" {
		short, example = "Forget one event, so that its next delivery is forwarded again", "  ADMIN_TOKEN=… webhook-dedup forget github 72d3162e-cc78-11e3-81ab-4c9367dc0958"
	}
	return &cobra.Command{
		Use:   name + " NAMESPACE ID",
		Short: short,
		Long: short + ".\nNAMESPACE is the preset's name (stripe, github, …) or a generic route's path. With ADMIN_TOKEN set it asks the\n" +
			"running proxy's admin API at ADMIN_ADDR; otherwise it opens the configured shared store (REDIS_URL, DATABASE_URL, …).",
		Example: example,
		Args:    exactArgs("NAMESPACE", "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return storeCommand(cmd.Context(), name, args, e.environ, e.stdout)
		},
	}
}

// retryFlags are retry's flags, as given.
type retryFlags struct {
	all                       bool
	namespace                 string
	failedBefore, failedAfter string
}

func newRetryCmd(e *env) *cobra.Command {
	var f retryFlags
	cmd := &cobra.Command{
		Use:   "retry {NAMESPACE ID | --all [--namespace NS] [--failed-before T] [--failed-after T]}",
		Short: "Put dead letters back in the queue as new first attempts",
		Long: "Put one dead letter, or with --all every one the other flags choose, back in the queue as a new first attempt.\n" +
			"A time T is RFC 3339 (2026-12-01T08:00:00Z) or a duration before now (2h). Without --failed-before, --all\n" +
			"takes those dead-lettered before the command began. With ADMIN_TOKEN set it asks the running proxy's admin API.",
		Example: "  webhook-dedup retry stripe evt_1NG8Du2eZvKYlo2C\n" +
			"  webhook-dedup retry --all --namespace github --failed-after 2026-12-01T07:00:00Z",
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case f.all && len(args) > 0:
				return flagError(cmd, fmt.Errorf("--all takes no NAMESPACE ID, got %q", args))
			case !f.all && (f.namespace != "" || f.failedBefore != "" || f.failedAfter != ""):
				return flagError(cmd, errors.New("--namespace, --failed-before and --failed-after choose among dead letters for --all"))
			case !f.all:
				return exactArgs("NAMESPACE", "ID")(cmd, args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !f.all {
				return retryOne(cmd.Context(), args[0], args[1], e.environ, e.stdout)
			}
			sel := admin.RetrySelection{Namespace: f.namespace}
			now := time.Now()
			var err error
			if sel.FailedBefore, err = parseTimeFlag(cmd, "failed-before", f.failedBefore, now); err != nil {
				return err
			}
			if sel.FailedAfter, err = parseTimeFlag(cmd, "failed-after", f.failedAfter, now); err != nil {
				return err
			}
			return retryAllCommand(cmd.Context(), sel, e.environ, e.stdout)
		},
	}
	cmd.Flags().BoolVar(&f.all, "all", false, "every dead letter the other flags choose")
	cmd.Flags().StringVar(&f.namespace, "namespace", "", "only this namespace's (a preset's name or a generic route's path)")
	cmd.Flags().StringVar(&f.failedBefore, "failed-before", "", "only those dead-lettered before `T`")
	cmd.Flags().StringVar(&f.failedAfter, "failed-after", "", "only those dead-lettered at or after `T`")
	return cmd
}

// parseTimeFlag reads the value of the flag name: an RFC 3339 time, or a
// duration before now ("2h"). Empty is the zero time.
func parseTimeFlag(cmd *cobra.Command, name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, flagError(cmd, fmt.Errorf("--%s %q: neither an RFC 3339 time (2026-12-01T08:00:00Z) nor a duration before now (2h)", name, v))
}

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version, the commit and the Go release",
		Example: "  webhook-dedup version\n  webhook-dedup --version",
		Args:    noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(e.stdout, versionLine(e.build))
			return err
		},
	}
}

func newCompletionCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "completion {bash|zsh|fish}",
		Short: "Print the shell completion script for bash, zsh or fish",
		Long:  "Print the script that completes webhook-dedup's commands and flags in the shell named.",
		Example: "  source <(webhook-dedup completion bash)\n" +
			"  webhook-dedup completion zsh > \"${fpath[1]}/_webhook-dedup\"\n" +
			"  webhook-dedup completion fish > ~/.config/fish/completions/webhook-dedup.fish",
		ValidArgs: []string{"bash", "zsh", "fish"},
		Args: func(cmd *cobra.Command, args []string) error {
			if err := exactArgs("SHELL")(cmd, args); err != nil {
				return err
			}
			if err := cobra.OnlyValidArgs(cmd, args); err != nil {
				return flagError(cmd, fmt.Errorf("shell %q: bash, zsh or fish", args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(w, true)
			case "zsh":
				return root.GenZshCompletion(w)
			default:
				return root.GenFishCompletion(w, true)
			}
		},
	}
}

// newHelpCmd replaces cobra's help command, whose -h shows no example and
// whose unknown topic exits 0.
func newHelpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:     "help [command]",
		Short:   "Help about any command",
		Example: "  webhook-dedup help dead-letters",
		RunE: func(cmd *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if err != nil || len(rest) > 0 {
				return flagError(root, fmt.Errorf("no help topic %q", args))
			}
			return target.Help()
		},
	}
}
