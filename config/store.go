package config

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// StoreKind names the store that keeps the records.
type StoreKind string

// The stores. Which one runs is decided by chooseStore alone.
const (
	// StoreMemory is the embedded store in process memory: nothing configured.
	StoreMemory StoreKind = "memory"
	// StoreRedis is Redis, reached in the way Store.RedisMode says.
	StoreRedis StoreKind = "redis"
	// StoreDynamoDB is an Amazon DynamoDB table: DYNAMODB_TABLE.
	StoreDynamoDB StoreKind = "dynamodb"
	// StoreDisk is the embedded store in a file under DATA_DIR.
	StoreDisk StoreKind = "disk"
	// StorePostgres is PostgreSQL: DATABASE_URL.
	StorePostgres StoreKind = "postgres"
)

// SupportsAsync reports whether the store can hold the async delivery
// queue. The in-memory store would lose it with the process; DynamoDB
// offers sync delivery only (a queue there needs transactions and scans
// this store is not built on).
func (k StoreKind) SupportsAsync() bool {
	switch k {
	case StoreMemory, StoreDynamoDB:
		return false
	}
	return true
}

// AsyncError is the configuration error for async delivery asked (by
// variable: DELIVERY, or ROUTES for a route's ;async) of a store that
// does not support it; nil when it does.
func (s Store) AsyncError(variable string) error {
	if s.Kind.SupportsAsync() {
		return nil
	}
	store := "the embedded in-memory store (no store configured)"
	if s.Variable != "" {
		store = s.Variable
	}
	return fmt.Errorf("%s: async delivery needs a store that keeps its queue: DATA_DIR, REDIS_URL (or REDIS_CLUSTER_ADDRS, REDIS_SENTINEL_ADDRS) or DATABASE_URL; %s supports sync delivery only", variable, store)
}

// RedisMode is how Redis is reached.
type RedisMode string

// The ways to reach Redis, each chosen by its own variable.
const (
	RedisStandalone RedisMode = "standalone" // REDIS_URL
	RedisCluster    RedisMode = "cluster"    // REDIS_CLUSTER_ADDRS
	RedisSentinel   RedisMode = "sentinel"   // REDIS_SENTINEL_ADDRS
)

// Store is the store chosen by what is configured.
type Store struct {
	Kind StoreKind
	// Variable is the environment variable that chose Kind, for messages;
	// empty for StoreMemory.
	Variable string
	// RedisMode is set when Kind is StoreRedis.
	RedisMode RedisMode
}

// storeChoice is one way of configuring a store, and whether it is used.
type storeChoice struct {
	store Store
	set   bool
}

// chooseStore decides which store runs: the one whose variable is set, or
// the embedded in-memory store when none is. Two at once is a mistake, and
// reported naming both: the proxy would otherwise keep its records where
// the operator did not mean.
func (c *Config) chooseStore(bad func(name, format string, args ...any)) Store {
	choices := []storeChoice{
		{Store{StoreRedis, "REDIS_URL", RedisStandalone}, c.RedisURL != ""},
		{Store{StoreRedis, "REDIS_CLUSTER_ADDRS", RedisCluster}, len(c.RedisClusterAddrs) > 0},
		{Store{StoreRedis, "REDIS_SENTINEL_ADDRS", RedisSentinel}, len(c.RedisSentinelAddrs) > 0},
		{Store{Kind: StoreDynamoDB, Variable: "DYNAMODB_TABLE"}, c.DynamoDBTable != ""},
		{Store{Kind: StoreDisk, Variable: "DATA_DIR"}, c.DataDir != ""},
		{Store{Kind: StorePostgres, Variable: "DATABASE_URL"}, c.DatabaseURL != ""},
	}
	var chosen []Store
	for _, ch := range choices {
		if ch.set {
			chosen = append(chosen, ch.store)
		}
	}
	if len(chosen) == 0 {
		return Store{Kind: StoreMemory}
	}
	for _, other := range chosen[1:] {
		bad(other.Variable, "set together with %s: configure exactly one store", chosen[0].Variable)
	}
	if chosen[0].Kind == StoreDisk {
		if err := writableDir(c.DataDir); err != nil {
			bad("DATA_DIR", "%s is not a directory this process can write in: %v", c.DataDir, err)
		}
	}
	return chosen[0]
}

// checkAsyncStore refuses async delivery on a store that cannot keep it
// (Store.AsyncError): the sender would have been told 202 for an event
// lost at the next restart. A route's ";async" is held to the same rule
// as DELIVERY=async, and the error names the routes.
func (c *Config) checkAsyncStore(bad func(name, format string, args ...any)) {
	routes := c.AsyncPaths()
	if len(routes) == 0 {
		return
	}
	err := c.Store.AsyncError("DELIVERY")
	if err == nil {
		return
	}
	msg := strings.TrimPrefix(err.Error(), "DELIVERY: ")
	bad("DELIVERY", "%s (async routes: %s)", msg, strings.Join(routes, ", "))
}

// writableDir makes sure dir is a directory this process can create files
// in, creating it (and its parents) if missing: the store's file is opened
// later, and a read-only volume had better be reported now, naming DATA_DIR.
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".webhook-dedup-write-test-*")
	if err != nil {
		return err
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
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
