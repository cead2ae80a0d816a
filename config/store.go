package config

import (
	"os"
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

// StoreChoices are the ways of configuring a store, each by its own
// variable, in the order messages list them.
func StoreChoices() []Store {
	return []Store{
		{StoreRedis, "REDIS_URL", RedisStandalone},
		{StoreRedis, "REDIS_CLUSTER_ADDRS", RedisCluster},
		{StoreRedis, "REDIS_SENTINEL_ADDRS", RedisSentinel},
		{Kind: StoreDynamoDB, Variable: "DYNAMODB_TABLE"},
		{Kind: StoreDisk, Variable: "DATA_DIR"},
		{Kind: StorePostgres, Variable: "DATABASE_URL"},
	}
}

// chooseStore decides which store runs: the one whose variable is set, or
// the embedded in-memory store when none is. Two at once is a mistake, and
// reported naming both: the proxy would otherwise keep its records where
// the operator did not mean.
func (c *Config) chooseStore(bad func(name, format string, args ...any)) Store {
	set := map[string]bool{
		"REDIS_URL":            c.RedisURL != "",
		"REDIS_CLUSTER_ADDRS":  len(c.RedisClusterAddrs) > 0,
		"REDIS_SENTINEL_ADDRS": len(c.RedisSentinelAddrs) > 0,
		"DYNAMODB_TABLE":       c.DynamoDBTable != "",
		"DATA_DIR":             c.DataDir != "",
		"DATABASE_URL":         c.DatabaseURL != "",
	}
	var chosen []Store
	for _, st := range StoreChoices() {
		if set[st.Variable] {
			chosen = append(chosen, st)
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

// Error is a problem with the configuration, not with what it points at:
// a setting that is missing, malformed, or refused by the store it
// configures. The program exits with status 2 on it.
type Error struct{ Err error }

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }
