package cli

import (
	"fmt"
	"io"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/internal/app/serve"
)

// check validates the configuration in environ as serve would before it
// binds a port or opens the store, and says so in one line: for CI, and an
// init container that stops a pod whose sidecar would not start. The
// warnings serve would log go to stderr; a problem is serve's own error
// (exit status 2), naming every variable at fault.
func check(environ map[string]string, stdout, stderr io.Writer) error {
	cfg, warnings, err := serve.Check(environ)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		line := "warning: " + w.Variable + ": " + w.Message
		if w.Suggestion != "" {
			line += " (did you mean " + w.Suggestion + "?)"
		}
		if _, err := fmt.Fprintln(stderr, line); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(stdout, "configuration OK: store %s, %s\n", describeStore(cfg.Store), describeRouteCount(cfg))
	return err
}

// describeStore names the store and the variable that chose it:
// "postgres (DATABASE_URL)".
func describeStore(s config.Store) string {
	if s.Variable == "" {
		return string(s.Kind) + " (no store configured: one replica only)"
	}
	return string(s.Kind) + " (" + s.Variable + ")"
}

// describeRouteCount counts the routes, and the async ones among them:
// "2 routes (1 async)".
func describeRouteCount(cfg *config.Config) string {
	n, async := len(cfg.RouteSpecs), len(cfg.AsyncPaths())
	noun := "routes"
	if n == 1 {
		noun = "route"
	}
	if async == 0 {
		return fmt.Sprintf("%d %s (sync)", n, noun)
	}
	return fmt.Sprintf("%d %s (%d async)", n, noun, async)
}
