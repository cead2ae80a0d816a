package config

// StoreKind names the store that keeps the records.
type StoreKind string

// The stores. Which one runs is decided by chooseStore alone.
const (
	// StoreMemory is the embedded store in process memory: nothing configured.
	StoreMemory StoreKind = "memory"
	// StoreRedis is Redis, reached in the way Store.RedisMode says.
	StoreRedis StoreKind = "redis"
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
	return chosen[0]
}
