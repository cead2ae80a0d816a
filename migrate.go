package main

import (
	"context"
	"fmt"
	"io"

	"github.com/webhook-dedup/webhook-dedup/config"
)

// migrate creates what the configured store needs before serving (a
// table), for an operator or an init container; serving never does.
func migrate(ctx context.Context, environ map[string]string, stdout, stderr io.Writer) error {
	cfg, err := config.LoadForStore(environ)
	if err != nil {
		return usageError(fmt.Errorf("configuration:\n%w", err))
	}
	switch cfg.Store.Kind {
	case config.StoreDynamoDB:
		return migrateDynamoDB(ctx, cfg, stdout, stderr)
	default:
		return usageError(fmt.Errorf("migrate: DYNAMODB_TABLE: required: the %s store has no table to create", cfg.Store.Kind))
	}
}
