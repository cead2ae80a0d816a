package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// openPostgres opens the PostgreSQL store, pruning every PRUNE_INTERVAL
// (counted in webhook_dedup_store_pruned_total), and creates its tables
// when DATABASE_AUTO_MIGRATE says so. A database that cannot be reached
// at start does not stop the proxy: it is logged, /readyz answers 503,
// and the tables are created once it answers.
func openPostgres(cfg *config.Config, log *zap.Logger, reg prometheus.Registerer) (store, error) {
	pruned := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "webhook_dedup_store_pruned_total",
		Help: "Expired rows deleted from the PostgreSQL tables by this process's pruning.",
	})
	if err := reg.Register(pruned); err != nil {
		return nil, err
	}
	plog := log.Named("postgres")
	st, err := dedup.OpenPostgres(dedup.PostgresConfig{
		URL:           cfg.DatabaseURL,
		TablePrefix:   cfg.DatabaseTablePrefix,
		Timeout:       cfg.StoreTimeout,
		PruneInterval: cfg.PruneInterval,
		Pruned: func(n int) {
			pruned.Add(float64(n))
			plog.Debug("pruned expired rows", zap.Int("rows", n))
		},
		AppName:     cfg.AppName,
		KeyPrefix:   cfg.KeyPrefix,
		AutoMigrate: cfg.DatabaseAutoMigrate,
		Failed: func(task string, err error) {
			plog.Error(task+" failed; trying again later", zap.Error(err))
		},
	})
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	p := cfg.DatabaseTablePrefix
	tables := p + "records, " + p + "queue, " + p + "owners"
	plog.Info("store: postgres", zap.String("tables", tables), zap.Bool("auto_migrate", cfg.DatabaseAutoMigrate),
		zap.Duration("timeout", cfg.StoreTimeout), zap.Duration("prune_interval", cfg.PruneInterval))
	switch err := st.CheckOwner(context.Background()); {
	case errors.Is(err, dedup.ErrPrefixOwned):
		_ = st.Close()
		return nil, fmt.Errorf("APP_NAME: %w: set KEY_PREFIX to a prefix of this app's own (e.g. KEY_PREFIX=webhook-dedup:%s:), as two apps sharing one would answer each other's events as duplicates", err, cfg.AppName)
	case err != nil:
		plog.Warn("the owner of KEY_PREFIX not checked at start; claims check it first", zap.Error(err))
	}
	if !cfg.DatabaseAutoMigrate {
		if err := st.Ping(context.Background()); err != nil {
			plog.Error("the tables are missing or the database does not answer (DATABASE_AUTO_MIGRATE=false: create them with `webhook-dedup migrate`)",
				zap.String("tables", tables), zap.Error(err))
		}
	}
	return st, nil
}

// withCache puts the cache of completed records in front of st when
// CACHE_SIZE is set, counting its answers in webhook_dedup_cache_hits_total.
func withCache(cfg *config.Config, st store, log *zap.Logger, reg prometheus.Registerer) store {
	if cfg.CacheSize == 0 {
		return st
	}
	hits := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "webhook_dedup_cache_hits_total",
		Help: "Claims and lookups answered from this process's cache of completed records, without the store.",
	})
	reg.MustRegister(hits)
	log.Info("cache of completed records", zap.Int("size", cfg.CacheSize), zap.Duration("ttl", cfg.CacheTTL))
	cfgc := dedup.CacheConfig{Size: cfg.CacheSize, TTL: cfg.CacheTTL, Hit: hits.Inc}
	if qs, ok := st.(queueStore); ok {
		// The queue stays reachable through the cache (async delivery
		// finds it), and async duplicates are answered from the cache too.
		return dedup.NewCachedQueue(qs, cfgc)
	}
	return dedup.NewCache(st, cfgc)
}

// queueStore is a store that keeps an async queue.
type queueStore interface {
	store
	dedup.Queue
}

// behindCache is the store CACHE_SIZE put the cache in front of, or st,
// for what only the store itself offers (the Redis monitor and durability
// check, PostgreSQL's notifications).
func behindCache(st store) dedup.Cacheable {
	if u, ok := st.(interface{ Unwrap() dedup.Cacheable }); ok {
		return u.Unwrap()
	}
	return st
}

// notifier is a store that tells when an event was queued by any process
// sharing it (PostgreSQL's LISTEN/NOTIFY).
type notifier interface {
	Notify() <-chan struct{}
}

// notifications is st's channel of queued events, looking behind the
// cache; nil when the store has none (its workers poll).
func notifications(st store) <-chan struct{} {
	if n, ok := behindCache(st).(notifier); ok {
		return n.Notify()
	}
	return nil
}

// nudgeOn calls nudge for each signal on ch until ctx ends: the delivery
// workers look for an event another replica queued now, rather than at
// their next poll.
func nudgeOn(ctx context.Context, ch <-chan struct{}, nudge func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			nudge()
		}
	}
}
