package main

import (
	"fmt"
	"slices"
	"strings"
)

// server is what a configuration puts in front of wrk.
type server int

const (
	upstreamAlone server = iota
	goProxy
	nginxProxy
	webhookDedup
	hookaido // the peer (hookaido.go)
)

// store is the store webhook-dedup runs on.
type store int

const (
	embedded      store = iota // in memory, in the proxy's process
	dataDir                    // the embedded store on disk (DATA_DIR)
	redisStore                 // a redis-server of its own
	postgresStore              // a PostgreSQL server of its own
)

func (s store) String() string {
	return [...]string{"embedded", "DATA_DIR", "Redis", "PostgreSQL"}[s]
}

// ownServer reports whether the store is a server process beside the
// proxy, whose CPU the run counts as the store's.
func (s store) ownServer() bool { return s == redisStore || s == postgresStore }

// config is one row of the table.
type config struct {
	name   string
	server server
	store  store // webhook-dedup's; the zero value is the embedded store
	cache  int   // webhook-dedup's CACHE_SIZE; 0: no cache
	async  bool  // DELIVERY=async: the sender is answered 202 once queued
	slow   bool  // the app takes slowAppDelay per request
	// durable runs PostgreSQL as deployed (fsync, synchronous_commit and
	// full_page_writes on), not as the tests run it (fsync off).
	durable bool
	load    load
	// logLevel is webhook-dedup's LOG_LEVEL: info logs one JSON line per
	// webhook to a file; warn logs none of them.
	logLevel string
	// before runs the -before binary instead of the one measured.
	before bool
	// keys: the events name one of this many customers in turn (their
	// data.object.customer), and the run times the delivery of a backlog
	// queued behind a held app (backlogRun); 0: every event names the
	// same customer, and no such run.
	keys int
	// ordered puts order=json:data.object.customer on the Stripe route:
	// each customer's events delivered one at a time, in order.
	ordered bool
	// peerDepth is Hookaido's queue_limits.max_depth; 0: as shipped
	// (10,000).
	peerDepth int
}

// baseline reports whether c always runs, whatever -only says: the rows
// the others are compared with.
func (c config) baseline() bool {
	return (c.server == upstreamAlone || c.server == goProxy || c.server == nginxProxy) && c.load == uniqueJSON
}

// queues reports whether the server answers before the app has the event
// (webhook-dedup's async routes, Hookaido), leaving a backlog to deliver.
func (c config) queues() bool { return c.async || c.server == hookaido }

// paced reports whether the run measures delivery during intake too: on a
// queueing server, a fast app and first-seen events.
func (c config) paced() bool { return c.queues() && !c.slow && c.load == uniqueJSON && c.keys == 0 }

// countsIDs reports whether the upstream counts distinct event IDs: on the
// rows that send each event 3×, to count the app's copies per event.
func (c config) countsIDs() bool { return c.load == thriceJSON }

// storeLabel names c's store in its row.
func (c config) storeLabel() string {
	if c.durable {
		return c.store.String() + " " + fsyncOn
	}
	return c.store.String()
}

// fsyncOn marks the rows of a PostgreSQL as deployed.
const fsyncOn = "fsync=on"

// orderKeys is how many customers the ordered-delivery rows' events name
// in turn: as many keys in the queue at once.
const orderKeys = 1000

// customers and orderOption name the ordered-delivery rows.
var customers = fmt.Sprintf("%s customers", thousands(orderKeys))

const orderOption = "order=json:data.object.customer"

// cacheSize is CACHE_SIZE in the rows that measure the cache: far more
// entries than the rows' duplicates need.
const cacheSize = 10000

// Names of the rows the ratios are taken against.
const (
	nameUpstream = "upstream alone"
	nameGoProxy  = "Go httputil.ReverseProxy"
	nameNginx    = "nginx proxy_pass, keepalive"
	// nameGoProxyHeader is the Go proxy on the header-sourced rows' load:
	// their requests carry three more headers than the JSON load's, which
	// every server on the core parses, a plain proxy too.
	nameGoProxyHeader = "Go httputil.ReverseProxy, unique header"
)

// Names of the peer's rows.
const (
	nameHookaido = "Hookaido, unique JSON"
	// nameHookaidoDeep is Hookaido with its queue bounded as webhook-
	// dedup's is by default (QUEUE_MAX_DEPTH): over a minute of intake
	// faster than its delivery, the shipped bound (10,000) fills within
	// half a minute, and Hookaido then accepts at its delivery's rate.
	nameHookaidoDeep   = "Hookaido max_depth=100000, unique JSON"
	nameHookaidoThrice = "Hookaido, unique JSON, each sent 3×"
	nameGoProxyThrice  = "Go httputil.ReverseProxy, unique JSON, each sent 3×"
)

func allConfigs(before bool) []config {
	cs := []config{
		{name: nameUpstream, server: upstreamAlone, load: uniqueJSON},
		{name: nameGoProxy, server: goProxy, load: uniqueJSON},
		{name: nameNginx, server: nginxProxy, load: uniqueJSON},
		{name: nameGoProxyHeader, server: goProxy, load: uniqueHeader},
	}
	dedup := func(c config, what string) config {
		c.name = "webhook-dedup, " + c.storeLabel() + ", " + c.load.String() + what
		c.server, c.logLevel = webhookDedup, "info"
		return c
	}
	on := func(s store, l load) config { return dedup(config{store: s, load: l}, "") }
	for _, s := range []store{embedded, redisStore} {
		for _, l := range []load{uniqueJSON, duplicateJSON, uniqueHeader} {
			cs = append(cs, on(s, l))
		}
	}
	// The cache in front of a store: duplicates answered from the
	// proxy's memory rather than by a round trip to the store.
	cached := func(c config) config {
		c.cache = cacheSize
		return dedup(c, fmt.Sprintf(", CACHE_SIZE=%d", cacheSize))
	}
	async := func(c config) config {
		c.name += ", async"
		c.async = true
		return c
	}
	slow := func(c config) config {
		c.name += ", slow app (200 ms)"
		c.slow = true
		return c
	}
	cs = append(cs, cached(config{store: redisStore, load: duplicateJSON}))
	// PostgreSQL: first-seen events, duplicates without and with the
	// cache, and async's accept path; as the tests run it (fsync off),
	// then as deployed (each commit flushed to the disk).
	for _, durable := range []bool{false, true} {
		pg := func(l load) config { return config{store: postgresStore, load: l, durable: durable} }
		cs = append(cs,
			dedup(pg(uniqueJSON), ""),
			dedup(pg(duplicateJSON), ""),
			cached(pg(duplicateJSON)),
			async(dedup(pg(uniqueJSON), "")),
		)
	}
	// Async delivery: its accept path against the sync path on a fast app,
	// then a slow app behind sync and async routes (the sender's answer
	// time, and the events accepted per second).
	cs = append(cs,
		async(on(redisStore, uniqueJSON)),
		on(dataDir, uniqueJSON),
		async(on(dataDir, uniqueJSON)),
		slow(on(redisStore, uniqueJSON)),
		async(slow(on(redisStore, uniqueJSON))),
		async(slow(on(dataDir, uniqueJSON))),
	)
	// The peer, on the same events as the async rows, and every proxy
	// with each event sent 3×: how many copies reach the app.
	cs = append(cs,
		config{name: nameHookaido, server: hookaido, load: uniqueJSON},
		config{name: nameHookaidoDeep, server: hookaido, load: uniqueJSON, peerDepth: 100000},
		config{name: nameHookaidoThrice, server: hookaido, load: thriceJSON},
		config{name: nameGoProxyThrice, server: goProxy, load: thriceJSON},
		async(on(dataDir, thriceJSON)),
		async(on(redisStore, thriceJSON)),
	)
	// Ordered delivery's cost: the delivery of a backlog of events over
	// orderKeys customers, on a route ordered by customer and on the same
	// route unordered.
	for _, s := range []store{dataDir, redisStore, postgresStore} {
		keyed := config{store: s, load: uniqueJSON, keys: orderKeys}
		ordered := keyed
		ordered.ordered = true
		cs = append(cs,
			async(dedup(keyed, ", "+customers)),
			async(dedup(ordered, ", "+customers+", "+orderOption)))
	}
	// What the per-webhook log line costs.
	quiet := dedup(config{store: redisStore, load: uniqueJSON}, ", LOG_LEVEL=warn")
	quiet.logLevel = "warn"
	cs = append(cs, quiet)
	if before {
		for _, c := range cs {
			if c.server == webhookDedup {
				c.name = strings.Replace(c.name, "webhook-dedup", "before", 1)
				c.before = true
				cs = append(cs, c)
			}
		}
	}
	return cs
}

// selectConfigs keeps the baselines and the configurations whose name
// contains only, in any case (-only postgres finds the PostgreSQL rows),
// and drops Hookaido's when the bench has none. The Go proxy on the
// header load runs whenever a webhook-dedup row on that load does.
func selectConfigs(only string, before, peer bool) []config {
	all := allConfigs(before)
	headerRows := slices.ContainsFunc(all, func(c config) bool {
		return c.server == webhookDedup && c.load == uniqueHeader && matches(c.name, only)
	})
	var out []config
	for _, c := range all {
		if c.server == hookaido && !peer {
			continue
		}
		if c.baseline() || matches(c.name, only) || (c.name == nameGoProxyHeader && headerRows) {
			out = append(out, c)
		}
	}
	return out
}

// matches reports whether name contains one of the |-separated parts of
// only, in any case; every name matches an empty only.
func matches(name, only string) bool {
	for _, part := range strings.Split(strings.ToLower(only), "|") {
		if strings.Contains(strings.ToLower(name), part) {
			return true
		}
	}
	return false
}
