package config

import (
	"os"
	"strings"

	"github.com/webhook-dedup/webhook-dedup/proxy"
)

// StoreKind names the store that keeps the records.
type StoreKind string

// The stores. Which one runs is decided by chooseStore alone.
const (
	// StoreMemory is the embedded store in process memory: nothing configured.
	StoreMemory StoreKind = "memory"
	// StoreRedis is Redis, reached in the way Store.RedisMode says.
	StoreRedis StoreKind = "redis"
	// StoreDisk is the embedded store in a file under DATA_DIR.
	StoreDisk StoreKind = "disk"
)

// SupportsAsync reports whether the store can keep an accepted event's
// request durably until it is delivered: every store but the in-memory
// one, which would lose its queue with the process.
func (k StoreKind) SupportsAsync() bool {
	return k != StoreMemory
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
		{Store{Kind: StoreDisk, Variable: "DATA_DIR"}, c.DataDir != ""},
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

// checkAsyncStore refuses async delivery on a store that cannot keep it:
// the sender would have been told 202 for an event lost at the next
// restart. A route's ";async" is held to the same rule as DELIVERY=async.
func (c *Config) checkAsyncStore(bad func(name, format string, args ...any)) {
	if !c.AsyncRoutes() || c.Store.Kind.SupportsAsync() {
		return
	}
	var routes []string
	for _, r := range c.RouteSpecs {
		if r.Delivery == proxy.AsyncDelivery {
			routes = append(routes, r.Path)
		}
	}
	bad("DELIVERY", "async delivery (routes %s) needs a durable store, and the in-memory store would lose every accepted event with the process: set DATA_DIR (the embedded store on disk) or REDIS_URL, or deliver sync", strings.Join(routes, ", "))
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
