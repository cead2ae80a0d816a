package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// deadLetterFilter chooses the dead letters the dead-letters command
// prints. The zero value chooses every one.
type deadLetterFilter struct {
	// namespace, if not empty, keeps this namespace's (a preset's name or
	// a generic route's path).
	namespace string
	// since and until, if not zero, keep those dead-lettered at or after
	// since and before until.
	since, until time.Time
	// limit, if not zero, is the most printed.
	limit int
}

// query is f's page of at most limit dead letters from cursor, as
// GET /v1/events takes it.
func (f deadLetterFilter) query(cursor string, limit int) url.Values {
	q := url.Values{"state": {"failed"}, "limit": {strconv.Itoa(limit)}}
	if f.namespace != "" {
		q.Set("namespace", f.namespace)
	}
	if !f.since.IsZero() {
		q.Set("since", f.since.UTC().Format(time.RFC3339Nano))
	}
	if !f.until.IsZero() {
		q.Set("until", f.until.UTC().Format(time.RFC3339Nano))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	return q
}

// eventQuery is the same page as the store's listing takes it.
func (f deadLetterFilter) eventQuery(prefix, cursor string, limit int) dedup.EventQuery {
	q := dedup.EventQuery{State: dedup.Failed, Since: f.since, Until: f.until, Cursor: cursor, Limit: limit}
	if f.namespace != "" {
		q.KeyPrefix = dedup.EventKey(prefix, f.namespace, "")
	}
	return q
}

// deadLetter is a listed failed event as the dead-letter listing shows it.
func deadLetter(ev admin.Event) admin.DeadLetter {
	failed := ev.FailedAt
	if at, err := time.Parse(time.RFC3339, failed); err == nil {
		failed = at.UTC().Format(time.RFC3339) // as GET /v1/dead-letters writes it
	}
	return admin.DeadLetter{Namespace: ev.Namespace, ID: ev.ID, Attempts: ev.Attempts, LastStatus: ev.LastStatus, LastError: ev.LastError, FailedAt: failed}
}

// Output formats of the commands that list.
const (
	outputTable = "table"
	outputJSON  = "json"
)

func newDeadLettersCmd(e *env) *cobra.Command {
	var since, until, output string
	var f deadLetterFilter
	cmd := &cobra.Command{
		Use:   "dead-letters",
		Short: "List the dead letters: events whose background delivery ran out of attempts",
		Long: "List the dead letters, oldest first: a table on a terminal, otherwise (or with -o json) one JSON document\n" +
			"shaped like GET /v1/dead-letters's page. A time is RFC 3339 (2026-12-01T08:00:00Z) or a duration before now (2h).\n" +
			"With ADMIN_TOKEN set it asks the running proxy's admin API (GET /v1/events?state=failed, which filters);\n" +
			"otherwise it opens the configured shared store and asks its listing the same.",
		Example: "  webhook-dedup dead-letters --since 2h\n" +
			"  webhook-dedup dead-letters --namespace stripe --since 2026-12-01T07:00:00Z --until 2026-12-01T09:00:00Z\n" +
			"  webhook-dedup dead-letters -o json | jq -r '.dead_letters[].id'",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output == "" {
				output = outputJSON
				if isTerminal(e.stdout) {
					output = outputTable
				}
			}
			if output != outputTable && output != outputJSON {
				return flagError(cmd, fmt.Errorf("-o %q: table or json", output))
			}
			if f.limit < 0 {
				return flagError(cmd, fmt.Errorf("--limit %d: 0 (all) or more", f.limit))
			}
			now := time.Now()
			var err error
			if f.since, err = parseTimeFlag(cmd, "since", since, now); err != nil {
				return err
			}
			if f.until, err = parseTimeFlag(cmd, "until", until, now); err != nil {
				return err
			}
			dls, err := listDeadLetters(cmd.Context(), f, e.environ)
			if err != nil {
				return err
			}
			if output == outputJSON {
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(admin.DeadLetterPage{DeadLetters: dls})
			}
			return writeDeadLetterTable(e.stdout, e.stderr, dls)
		},
	}
	cmd.Flags().StringVar(&f.namespace, "namespace", "", "only this namespace's (a preset's name or a generic route's path)")
	cmd.Flags().StringVar(&since, "since", "", "only those dead-lettered at or after `T`")
	cmd.Flags().StringVar(&until, "until", "", "only those dead-lettered before `T`")
	cmd.Flags().IntVar(&f.limit, "limit", 0, "print at most `N` (0: all)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "table or json (default: table on a terminal, json otherwise)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputTable, outputJSON}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// eventPage is the most events one page asks for: GET /v1/events' bound.
const eventPage = 1000

// listDeadLetters reads the dead letters f chooses, oldest first, a page
// at a time up to f.limit, from the running proxy's admin API
// (GET /v1/events?state=failed, filtered there) when ADMIN_TOKEN is set,
// else from the configured shared store's listing (Operator.Events).
func listDeadLetters(ctx context.Context, f deadLetterFilter, environ map[string]string) ([]admin.DeadLetter, error) {
	var next func(ctx context.Context, cursor string, limit int) (admin.EventPage, error)
	if environ["ADMIN_TOKEN"] != "" {
		next = func(ctx context.Context, cursor string, limit int) (admin.EventPage, error) {
			var page admin.EventPage
			body, err := adminRequest(ctx, http.MethodGet, "/v1/events?"+f.query(cursor, limit).Encode(), environ)
			if err == nil {
				err = json.Unmarshal(body, &page)
			}
			return page, err
		}
	} else {
		cfg, b, err := openQueueForCommand(ctx, environ)
		if err != nil {
			return nil, err
		}
		defer b.Close()
		next = func(ctx context.Context, cursor string, limit int) (admin.EventPage, error) {
			page, err := b.Queue.Events(ctx, f.eventQuery(cfg.KeyPrefix, cursor, limit))
			if err != nil {
				return admin.EventPage{}, err
			}
			out := admin.EventPage{NextCursor: page.Next}
			for _, ev := range page.Events {
				// Split against the namespace asked for: a route's path may
				// hold ':'.
				ns, id := dedup.SplitEventKey(cfg.KeyPrefix, f.namespace, ev.Key)
				out.Events = append(out.Events, admin.NewEvent(ns, id, ev.Record, time.Now()))
			}
			return out, nil
		}
	}
	kept := []admin.DeadLetter{}
	cursor := ""
	for {
		limit := eventPage
		if f.limit > 0 {
			limit = min(f.limit-len(kept), eventPage)
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		page, err := next(pctx, cursor, limit)
		cancel()
		if err != nil {
			return nil, err
		}
		for _, ev := range page.Events {
			kept = append(kept, deadLetter(ev))
		}
		if cursor = page.NextCursor; cursor == "" || len(kept) == f.limit {
			return kept, nil
		}
	}
}

// writeDeadLetterTable prints dls as aligned columns, one line each; with
// none, it says so on stderr and prints nothing on stdout.
func writeDeadLetterTable(stdout, stderr io.Writer, dls []admin.DeadLetter) error {
	if len(dls) == 0 {
		_, err := fmt.Fprintln(stderr, "no dead letters")
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tID\tFAILED AT\tATTEMPTS\tLAST STATUS\tLAST ERROR")
	for _, dl := range dls {
		status := "-"
		if dl.LastStatus != 0 {
			status = strconv.Itoa(dl.LastStatus)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", oneLine(dl.Namespace), oneLine(dl.ID), dl.FailedAt, dl.Attempts, status, oneLine(dl.LastError))
	}
	return tw.Flush()
}

// oneLine keeps a cell on its line and in its column: control characters
// (an error's newline, a tab) become spaces.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// isTerminal reports whether w is a terminal, where a person reads a
// table rather than a script reading JSON.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}
