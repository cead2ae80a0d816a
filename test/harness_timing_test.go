package test

import (
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/config"
	asyncdelivery "github.com/webhook-dedup/webhook-dedup/delivery"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/timing"
)

// How long the tests wait. A wait polls for the event it names and ends
// the moment it happens; its deadline is how long the event may
// legitimately take under the proxy's own configuration (bounds), plus
// loadMargin. A deadline that is a bare number of seconds is a guess,
// which a loaded machine, or a test that raises a timeout, proves wrong.

// loadMargin is what every deadline allows beyond the bound the
// configuration sets: the time a loaded 2-core machine (the whole suite
// under the race detector, with a CPU-bound process beside it) may add to
// starting, scheduling and answering the proxy, its store and the test
// itself: timing.LoadMargin, the one guess the module's tests make,
// stated once.
const loadMargin = timing.LoadMargin

// exitSlack is what the proxy may take to exit once SHUTDOWN_DELAY and
// SHUTDOWN_TIMEOUT are over, whatever its store does: it promises to
// exit within SHUTDOWN_DELAY + SHUTDOWN_TIMEOUT + 2 s.
const exitSlack = 2 * time.Second

// logFlush is how often the process writes out its buffered log at the
// least.
const logFlush = time.Second

// bounds are a proxy's timeouts as webhook-dedup itself derives them from
// its environment (config.Load), so that the defaults and the values
// derived from others (LEASE_TTL and STORE_TIMEOUT from UPSTREAM_TIMEOUT)
// come from the one place that sets them.
type bounds struct{ cfg *config.Config }

// bounds are the timeouts this process was started with. Its
// configuration was loaded at its start (so that a DATA_DIR volume frozen
// since cannot hold the load up); a test whose configuration does not
// load has nothing to derive a deadline from, and fails.
func (p *proxy) bounds() bounds {
	p.t.Helper()
	if p.cfgErr != nil {
		p.t.Fatalf("the deadlines come from the proxy's configuration, which does not load: %v", p.cfgErr)
	}
	return bounds{p.cfg}
}

// storeOp bounds one store operation, retries included: STORE_TIMEOUT, or
// REDIS_TIMEOUT where that is longer.
func (b bounds) storeOp() time.Duration {
	return max(b.cfg.StoreTimeout, b.cfg.Redis.Timeout)
}

// claimed bounds how long a webhook takes to be claimed, one store
// operation: a sync route's then reaches the app, an async route's is
// answered queued.
func (b bounds) claimed() time.Duration {
	return b.storeOp() + loadMargin
}

// answered bounds how long a sync webhook takes to be answered: the claim,
// the app (at most UPSTREAM_TIMEOUT), and the record of its answer.
func (b bounds) answered() time.Duration {
	return 2*b.storeOp() + b.cfg.UpstreamTimeout + loadMargin
}

// taken bounds how long an event answered queued takes to reach the app
// while nothing fails (no lease to wait out, as in delivered) and a
// delivery slot is free: the Take under way when it was queued, the
// lane's next look for due deliveries (at once on the nudge its enqueue
// sends, or at its poll, every asyncdelivery.DefaultPollInterval), and
// the Take that finds it.
func (b bounds) taken() time.Duration {
	return 2*b.storeOp() + asyncdelivery.DefaultPollInterval + loadMargin
}

// delivered bounds how long an event accepted for background delivery
// takes to reach its end in n attempts (n ≥ 1): completed, when the app
// takes the n-th, or dead-lettered, when the n-th is the last allowed. A
// take or an attempt a store blip or a kill cut short is handed out again
// once its lease runs out (LEASE_TTL); each attempt takes at most
// UPSTREAM_TIMEOUT and a store operation to record, and waits at most
// RETRY_MAX_INTERVAL after the one before.
func (b bounds) delivered(n int) time.Duration {
	n = max(n, 1)
	attempt := b.cfg.UpstreamTimeout + b.storeOp()
	return b.cfg.LeaseTTL + time.Duration(n)*attempt + time.Duration(n-1)*b.cfg.RetryMaxInterval + loadMargin
}

// observed bounds how long the proxy takes to show, in its metrics or its
// log, something that has already happened: the store operation the
// count follows, the log's flush, and the periodic check that notices it
// (REDIS_CHECK_INTERVAL on Redis, PRUNE_INTERVAL on PostgreSQL).
func (b bounds) observed() time.Duration {
	var check time.Duration
	switch b.cfg.Store.Kind {
	case config.StoreRedis:
		check = b.cfg.Redis.CheckInterval
	case config.StorePostgres:
		check = b.cfg.Postgres.PruneInterval
	}
	return b.storeOp() + logFlush + check + loadMargin
}

// exited bounds how long the process takes to exit after SIGTERM:
// SHUTDOWN_DELAY serving, SHUTDOWN_TIMEOUT draining, then exitSlack.
func (b bounds) exited() time.Duration {
	return b.cfg.ShutdownDelay + b.cfg.ShutdownTimeout + exitSlack + loadMargin
}

// drained bounds how long DELIVERY_CONCURRENCY workers take over a queue
// of attempts whose app answers each within work: in each round of
// attempts at once, the app's work and two store operations (the take
// and the record of the outcome).
func (b bounds) drained(attempts int, work time.Duration) time.Duration {
	workers := max(b.cfg.DeliveryConcurrency, 1)
	rounds := (attempts + workers - 1) / workers
	return time.Duration(rounds) * (work + 2*b.storeOp())
}

// besideHung bounds how long the events of ordered keys whose app
// answers each within work take to be delivered while the app hangs on
// the heads of hung other keys (docs/ordering.md states it): a hung key
// holds one worker (its head; nothing behind it is taken), the other
// DELIVERY_CONCURRENCY - hung go on in rounds, as in drained, and a key's
// events go one per round, so there are at least perKey rounds.
// UPSTREAM_TIMEOUT is not in it: the keys that answer never wait for the
// one that does not.
func (b bounds) besideHung(attempts, perKey, hung int, work time.Duration) time.Duration {
	workers := max(b.cfg.DeliveryConcurrency-hung, 1)
	rounds := max((attempts+workers-1)/workers, perKey)
	return time.Duration(rounds)*(work+2*b.storeOp()) + loadMargin
}

// pollInterval is how often a wait looks again.
const pollInterval = 10 * time.Millisecond

// await polls check until it reports nothing left to wait for (nil), and
// fails the test with check's last report once deadline has passed.
func await(t testing.TB, deadline time.Duration, check func() error) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("still waiting after %s: %v", deadline, err)
		}
		time.Sleep(pollInterval)
	}
}

// redisRedial is how often go-redis tries a server again once it stopped
// dialing it (after PoolSize refused dials).
const redisRedial = time.Second

// reconnected bounds how long after its store answers again the proxy
// may still find it unavailable: go-redis dials again within redisRedial
// (PostgreSQL's pool dials afresh for each request), and a request that
// still fails meanwhile takes a store operation.
func (b bounds) reconnected() time.Duration {
	return redisRedial + b.storeOp() + loadMargin
}
