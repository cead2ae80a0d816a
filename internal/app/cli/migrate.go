package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/internal/app/stores"
)

// migrate creates what the configured store needs before serving (a
// table, or PostgreSQL's tables), for an operator or an init container.
// `migrate --print` prints PostgreSQL's SQL instead, for DBAs who apply
// migrations themselves; the database is not contacted.
func migrate(ctx context.Context, printOnly bool, environ map[string]string, stdout, stderr io.Writer) error {
	cfg, err := config.LoadForStore(environ)
	if err != nil {
		return usageError(fmt.Errorf("configuration:\n%w", err))
	}
	return stores.Migrate(ctx, cfg, printOnly, stdout, stderr)
}
