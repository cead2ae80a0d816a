package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// migrate creates what the configured store needs before serving (a
// table, or PostgreSQL's tables), for an operator or an init container.
// `migrate --print` prints PostgreSQL's SQL instead, for DBAs who apply
// migrations themselves; the database is not contacted.
func migrate(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) error {
	printOnly := false
	switch {
	case len(args) == 1 && args[0] == "--print":
		printOnly = true
	case len(args) > 0:
		return usageError(errors.New("usage: webhook-dedup migrate [--print]"))
	}
	cfg, err := config.LoadForStore(environ)
	if err != nil {
		return usageError(fmt.Errorf("configuration:\n%w", err))
	}
	switch cfg.Store.Kind {
	case config.StorePostgres:
		return migratePostgres(ctx, cfg, printOnly, stdout)
	case config.StoreDynamoDB:
		if printOnly {
			return usageError(errors.New("migrate --print: DATABASE_URL: required: only PostgreSQL's tables are made of SQL to print"))
		}
		return migrateDynamoDB(ctx, cfg, stdout, stderr)
	default:
		return usageError(fmt.Errorf("migrate: DATABASE_URL or DYNAMODB_TABLE: required: the %s store has no table to create", cfg.Store.Kind))
	}
}

func migratePostgres(ctx context.Context, cfg *config.Config, printOnly bool, stdout io.Writer) error {
	if printOnly {
		sql, err := dedup.PostgresSchema(cfg.DatabaseTablePrefix)
		if err != nil {
			return usageError(fmt.Errorf("DATABASE_TABLE_PREFIX: %w", err))
		}
		_, err = io.WriteString(stdout, sql)
		return err
	}
	// Creating tables can wait behind another replica's migration: more
	// time than one store operation.
	st, err := dedup.OpenPostgres(dedup.PostgresConfig{URL: cfg.DatabaseURL, TablePrefix: cfg.DatabaseTablePrefix, Timeout: max(cfg.StoreTimeout, 30*time.Second)})
	if err != nil {
		return usageError(fmt.Errorf("DATABASE_URL: %w", err))
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	p := cfg.DatabaseTablePrefix
	_, err = fmt.Fprintf(stdout, "tables %srecords, %squeue and %sowners are in place\n", p, p, p)
	return err
}
