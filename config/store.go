package config

import (
	"time"

	"github.com/webhook-dedup/webhook-dedup/setting"
)

// StoreKind names the store that keeps the records.
type StoreKind string

// The stores. Which one runs is decided by chooseStore alone.
const (
	// StoreMemory is the embedded store in process memory: nothing configured.
	StoreMemory StoreKind = "memory"
	// StoreRedis is Redis, reached in the way Redis.Mode() says.
	StoreRedis StoreKind = "redis"
	// StoreDynamoDB is an Amazon DynamoDB table: DYNAMODB_TABLE.
	StoreDynamoDB StoreKind = "dynamodb"
	// StoreDisk is the embedded store in a file under DATA_DIR.
	StoreDisk StoreKind = "disk"
	// StorePostgres is PostgreSQL: DATABASE_URL.
	StorePostgres StoreKind = "postgres"
)

// Store is the store chosen by what is configured.
type Store struct {
	Kind StoreKind
	// Variable is the environment variable that chose Kind, for messages;
	// empty for StoreMemory.
	Variable string
}

// StoreChoices are the ways of configuring a store, each by its own
// variable, in the order messages list them.
func StoreChoices() []Store {
	var choices []Store
	for _, st := range new(Config).stores() {
		for _, ch := range st.settings.Choices() {
			choices = append(choices, Store{st.kind, ch.Variable})
		}
	}
	return choices
}

// chooseStore decides which store runs: the one whose variable is set, or
// the embedded in-memory store when none is. Two at once is a mistake, and
// reported naming both: the proxy would otherwise keep its records where
// the operator did not mean.
func (c *Config) chooseStore(bad func(name, format string, args ...any)) Store {
	var chosen []Store
	for _, st := range c.stores() {
		for _, ch := range st.settings.Choices() {
			if ch.Set {
				chosen = append(chosen, Store{st.kind, ch.Variable})
			}
		}
	}
	if len(chosen) == 0 {
		return Store{Kind: StoreMemory}
	}
	for _, other := range chosen[1:] {
		bad(other.Variable, "set together with %s: configure exactly one store", chosen[0].Variable)
	}
	return chosen[0]
}

// storeSettings is one store's settings, beside the kind it configures.
type storeSettings struct {
	kind     StoreKind
	settings interface {
		// Choices are the variables that choose the store, in the
		// order messages list them.
		Choices() []setting.Choice
		// Complete validates the settings, and fills in what they
		// derive.
		Complete(setting.Scope) setting.Problems
	}
}

// stores are the stores' settings, in the order messages list the
// variables that choose them: adding a store adds its line.
func (c *Config) stores() []storeSettings {
	return []storeSettings{{StoreRedis, &c.Redis}, {StoreDynamoDB, &c.DynamoDB}, {StoreDisk, &c.Disk}, {StorePostgres, &c.Postgres}}
}

// completeStores runs each store's own validation (its settings'
// Complete), whether or not it is the one chosen: each decides what it
// checks of a store not chosen.
func (c *Config) completeStores(bad func(name, format string, args ...any)) {
	for _, st := range c.stores() {
		scope := setting.Scope{
			Chosen:          c.Store.Kind == st.kind,
			StoreTimeout:    c.StoreTimeout,
			UpstreamTimeout: c.UpstreamTimeout,
			ReplayMaxBytes:  c.ReplayMaxBytes,
		}
		for _, p := range st.settings.Complete(scope) {
			bad(p.Variable, "%s", p.Message)
		}
	}
}

// completeCache validates the cache in front of any store.
func (c *Config) completeCache(bad func(name, format string, args ...any)) {
	if c.CacheSize < 0 {
		bad("CACHE_SIZE", "must not be negative, got %d", c.CacheSize)
	}
	if c.CacheTTL <= 0 {
		bad("CACHE_TTL", "must be a positive duration, got %s", c.CacheTTL)
	}
}

// completeStoreTimeout derives STORE_TIMEOUT. Every forwarded request waits
// for the store before and after the app: the store must answer far
// sooner than the app may take.
func (c *Config) completeStoreTimeout(bad func(name, format string, args ...any)) {
	limit := c.UpstreamTimeout / 4
	switch {
	case c.StoreTimeout == 0 && limit > 0:
		c.StoreTimeout = min(time.Second, limit)
	case c.StoreTimeout == 0:
		c.StoreTimeout = time.Second // UPSTREAM_TIMEOUT is wrong, and said so
	case c.StoreTimeout < 0:
		bad("STORE_TIMEOUT", "must be a positive duration, got %s", c.StoreTimeout)
	case limit > 0 && c.StoreTimeout > limit:
		bad("STORE_TIMEOUT", "%s is more than a quarter of UPSTREAM_TIMEOUT (%s): the store must answer far sooner than the app", c.StoreTimeout, c.UpstreamTimeout)
	}
}

// Error is a problem with the configuration, not with what it points at:
// a setting that is missing, malformed, or refused by the store it
// configures. The program exits with status 2 on it.
type Error struct{ Err error }

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }
