package stores

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/pgstore"
)

// openPostgres opens the PostgreSQL store, pruning every PRUNE_INTERVAL
// (counted in webhook_dedup_store_pruned_total), and creates its tables
// when DATABASE_AUTO_MIGRATE says so. A database that cannot be reached
// at start does not stop the proxy: it is logged, /readyz answers 503,
// and the tables are created once it answers.
func openPostgres(ctx context.Context, cfg *config.Config, env Env) (dedup.Backend, error) {
	pruned := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "webhook_dedup_store_pruned_total",
		Help: "Expired rows deleted from the PostgreSQL tables by this process's pruning.",
	})
	if err := env.Registerer.Register(pruned); err != nil {
		return dedup.Backend{}, err
	}
	plog := env.Log.Named("postgres")
	pc := pgstore.FromSettings(cfg.Postgres)
	pc.Timeout, pc.AppName, pc.KeyPrefix = cfg.StoreTimeout, cfg.AppName, cfg.KeyPrefix
	pc.Pruned = func(n int) {
		pruned.Add(float64(n))
		plog.Debug("pruned expired rows", zap.Int("rows", n))
	}
	// Told once per change, not at every retry (a wrong password would
	// otherwise fill the log every second).
	pc.Failed = func(task string, err error) {
		if ce, ok := errors.AsType[*pgstore.ConnectError](err); ok {
			plog.Error(ce.Error()+"; trying again, and saying so when that changes", zap.String("task", task))
			return
		}
		plog.Error(task+" failed; trying again, and saying so when that changes", zap.Error(err))
	}
	pc.Recovered = func(task string) {
		plog.Info(task+" succeeded after failing", zap.String("task", task))
	}
	st, err := pgstore.Open(pc)
	if err != nil {
		return dedup.Backend{}, configError(fmt.Errorf("DATABASE_URL: %w", err))
	}
	tables := pgTables(cfg.Postgres.TablePrefix)
	plog.Info("store: postgres", zap.String("tables", tables), zap.Bool("auto_migrate", cfg.Postgres.AutoMigrate),
		zap.Duration("timeout", cfg.StoreTimeout), zap.Duration("prune_interval", cfg.Postgres.PruneInterval))
	switch err := st.CheckOwner(ctx); {
	case errors.Is(err, dedup.ErrPrefixOwned):
		_ = st.Close()
		return dedup.Backend{}, configError(prefixOwned(err, cfg))
	case errors.As(err, new(*pgstore.ConnectError)):
		// Said once already, by the migration's report or by the check
		// below; claims check the owner once the database answers.
	case err != nil:
		plog.Warn("the owner of KEY_PREFIX not checked at start; claims check it first", zap.Error(err))
	}
	if !cfg.Postgres.AutoMigrate && env.Serving {
		err := st.Ping(ctx)
		if ce, ok := errors.AsType[*pgstore.ConnectError](err); ok {
			// `migrate` would fail the same way: the advice is DATABASE_URL's.
			plog.Error(ce.Error()+": check DATABASE_URL, the network and the role", zap.String("tables", tables))
		} else if err != nil {
			plog.Error("the tables are missing or the database does not answer (DATABASE_AUTO_MIGRATE=false: create them with `webhook-dedup migrate`)",
				zap.String("tables", tables), zap.Error(err))
		}
	}
	return st.Backend(), nil
}

// pgTables names the tables, for messages.
func pgTables(prefix string) string {
	return prefix + "records, " + prefix + "queue, " + prefix + "owners"
}

// migratePostgres creates the tables, or with printOnly prints their SQL
// for DBAs who apply migrations themselves (the database is not
// contacted).
func migratePostgres(ctx context.Context, cfg *config.Config, printOnly bool, stdout, _ io.Writer) error {
	if printOnly {
		sql, err := pgstore.Schema(cfg.Postgres.TablePrefix)
		if err != nil {
			return configError(fmt.Errorf("DATABASE_TABLE_PREFIX: %w", err))
		}
		_, err = io.WriteString(stdout, sql)
		return err
	}
	// Creating tables can wait behind another replica's migration: more
	// time than one store operation.
	st, err := pgstore.Open(pgstore.Config{URL: cfg.Postgres.URL, TablePrefix: cfg.Postgres.TablePrefix, Timeout: max(cfg.StoreTimeout, 30*time.Second)})
	if err != nil {
		return configError(fmt.Errorf("DATABASE_URL: %w", err))
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	p := cfg.Postgres.TablePrefix
	_, err = fmt.Fprintf(stdout, "tables %srecords, %squeue and %sowners are in place\n", p, p, p)
	return err
}
