// Package stores is the one table of webhook-dedup's stores: for each kind
// that configuration can choose, what its package declares it can do, how
// it opens from the configuration, and what `migrate` creates for it. A
// new store is a package under dedup/ and a line in this table.
package stores

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/diskstore"
	"github.com/webhook-dedup/webhook-dedup/dedup/dynamostore"
	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"
	"github.com/webhook-dedup/webhook-dedup/dedup/pgstore"
	"github.com/webhook-dedup/webhook-dedup/dedup/redisstore"
	"github.com/webhook-dedup/webhook-dedup/policy"
)

// Env is what opening a store needs besides its configuration.
type Env struct {
	// Log receives what the store says. Required.
	Log *zap.Logger
	// Registerer gets the store's metrics. Required.
	Registerer prometheus.Registerer
	// Serving is set when the store is opened to serve webhooks: its
	// background checks are set up (the Redis monitor), and what an async
	// route's promise rests on is checked at start. A command that only
	// reads or requeues leaves it unset.
	Serving bool
}

// kind is one row of the table.
type kind struct {
	// features is what the store's package declares it can do.
	features func() dedup.Features
	// open opens the store cfg configures.
	open func(ctx context.Context, cfg *config.Config, env Env) (dedup.Backend, error)
	// migrate creates what the store needs before serving (`webhook-dedup
	// migrate`); with printOnly it prints it instead. Nil: nothing to
	// create.
	migrate func(ctx context.Context, cfg *config.Config, printOnly bool, stdout, stderr io.Writer) error
}

// table has a row for every kind of store configuration can choose.
var table = map[config.StoreKind]kind{
	config.StoreMemory:   {memstore.Features, openMemory, nil},
	config.StoreDisk:     {diskstore.Features, openDisk, nil},
	config.StoreRedis:    {redisstore.Features, openRedis, nil},
	config.StorePostgres: {pgstore.Features, openPostgres, migratePostgres},
	config.StoreDynamoDB: {dynamostore.Features, openDynamoDB, migrateDynamoDB},
}

// Features is what the store of kind can do, as its package declares it.
func Features(k config.StoreKind) dedup.Features { return table[k].features() }

// Load reads and validates the configuration as config.Load does, with
// the checks against what the chosen store can do (Check) run beside the
// others: the error joins every problem found, one line each, each naming
// its variable.
func Load(environ map[string]string) (*config.Config, error) {
	return config.Load(environ, Check)
}

// Check, a config.Rule, reports what cfg asks of its store that the store
// cannot do: async delivery (DELIVERY=async, or a route's ";async") of a
// store that keeps no queue. The sender would be told 202 for an event the
// store cannot keep; the problem names the routes, and the variables of
// the stores that can. It is about DELIVERY when that made a route async,
// else about ROUTES (";async"); with DELIVERY unparsed, only the routes
// that name their own mode are known to be async, and only they are named.
func Check(cfg *config.Config, bad func(variable, format string, args ...any)) {
	routes := cfg.AsyncPaths()
	if len(routes) == 0 || Features(cfg.Store.Kind).Queue {
		return
	}
	// The variables that choose a store with a queue, a kind's other
	// ways in brackets: "REDIS_URL (or REDIS_CLUSTER_ADDRS, …)".
	var can []string
	others := map[config.StoreKind][]string{}
	for _, choice := range config.StoreChoices() {
		if !Features(choice.Kind).Queue {
			continue
		}
		if _, seen := others[choice.Kind]; seen {
			others[choice.Kind] = append(others[choice.Kind], choice.Variable)
			continue
		}
		others[choice.Kind] = []string{}
		can = append(can, choice.Variable)
	}
	for i, v := range can {
		for _, choice := range config.StoreChoices() {
			if choice.Variable == v && len(others[choice.Kind]) > 0 {
				can[i] += " (or " + strings.Join(others[choice.Kind], ", ") + ")"
			}
		}
	}
	store := "the embedded in-memory store (no store configured)"
	if cfg.Store.Variable != "" {
		store = cfg.Store.Variable
	}
	variable := "ROUTES"
	for _, r := range cfg.RouteSpecs {
		if r.Delivery == policy.AsyncDelivery && !r.Override {
			variable = "DELIVERY"
		}
	}
	list := strings.Join(can[:len(can)-1], ", ") + " or " + can[len(can)-1]
	bad(variable, "async delivery needs a store that keeps its queue: %s; %s supports sync delivery only (async routes: %s)",
		list, store, strings.Join(routes, ", "))
}

// Open opens the store cfg chose, with the cache of completed records in
// front when CACHE_SIZE says so: the one place that turns that choice into
// a running store.
func Open(ctx context.Context, cfg *config.Config, env Env) (dedup.Backend, error) {
	b, err := table[cfg.Store.Kind].open(ctx, cfg, env)
	if err != nil {
		return dedup.Backend{}, err
	}
	if cfg.CacheSize == 0 {
		return b, nil
	}
	hits := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "webhook_dedup_cache_hits_total",
		Help: "Claims and lookups answered from this process's cache of completed records, without the store.",
	})
	if err := env.Registerer.Register(hits); err != nil {
		_ = b.Close()
		return dedup.Backend{}, err
	}
	env.Log.Info("cache of completed records", zap.Int("size", cfg.CacheSize), zap.Stringer("ttl", cfg.CacheTTL))
	return dedup.WithCache(b, dedup.CacheConfig{Size: cfg.CacheSize, TTL: cfg.CacheTTL, Hit: hits.Inc}), nil
}

// configError marks err as a problem with the configuration (exit status
// 2): a setting the store refuses, or a key prefix another app owns.
func configError(err error) error { return &config.Error{Err: err} }

// ErrNothingToMigrate means the chosen store has nothing for `migrate` to
// create.
var ErrNothingToMigrate = errors.New("the store has no table to create")

// Migrate creates what the chosen store needs before serving, or with
// printOnly prints it. ErrNothingToMigrate for a store that needs nothing.
func Migrate(ctx context.Context, cfg *config.Config, printOnly bool, stdout, stderr io.Writer) error {
	m := table[cfg.Store.Kind].migrate
	if m == nil {
		return configError(fmt.Errorf("migrate: DATABASE_URL or DYNAMODB_TABLE: required: the %s store: %w", cfg.Store.Kind, ErrNothingToMigrate))
	}
	return m(ctx, cfg, printOnly, stdout, stderr)
}
