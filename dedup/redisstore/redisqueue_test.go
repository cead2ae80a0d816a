package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

func rawClient(t *testing.T, srv *redistest.Server) *redis.Client {
	t.Helper()
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = raw.Close() })
	return raw
}

// TestRedisQueueKeysShareASlot pins the key scheme: every key the queue
// touches for an event hashes to the slot of {KEY_PREFIX}, and the sync
// key stays as dedup.EventKey makes it.
func TestRedisQueueKeysShareASlot(t *testing.T) {
	q := newQueueKeys("webhook-dedup:")
	key := dedup.EventKey("webhook-dedup:", "github", "d4f1-77")
	if got, want := q.record(key), "{webhook-dedup:}webhook-dedup:github:d4f1-77"; got != want {
		t.Errorf("record key %q, want %q", got, want)
	}
	slot := redistest.Slot("{webhook-dedup:}")
	keys := append(q.settleKeys(key), q.takeKeys()...)
	// A route's keys, whatever it is made of: a brace in it does not
	// move them to another slot.
	for _, route := range []string{"", "/webhooks/stripe", "/x{y}z"} {
		keys = append(keys, q.stream(route), q.retry(route), q.cursor(route))
	}
	for _, k := range keys {
		if redistest.Slot(k) != slot {
			t.Errorf("%s is in slot %d, want %d", k, redistest.Slot(k), slot)
		}
	}
	if got, want := q.stream(""), "{webhook-dedup:}#stream"; got != want {
		t.Errorf("the empty route's stream is %q, want the previous version's %q", got, want)
	}
	if redistest.Slot(newQueueKeys("").stream("")) != redistest.Slot("webhook-dedup") {
		t.Error("an empty prefix does not give the default tag")
	}
}

// TestRedisQueueStaysBounded runs many events of several routes through
// every outcome and checks that the streams, their pending lists and the
// indexes end empty: settled entries are deleted at once (XACK and XDEL),
// so a stream is never trimmed, and a trim can never delete an entry still
// pending. The streams of routes left with nothing are deleted by the
// next Take of the rest lane, and leave the set of routes.
func TestRedisQueueStaysBounded(t *testing.T) {
	srv := redistest.New(t)
	s := openRedis(t, srv)
	raw := rawClient(t, srv)
	ctx := context.Background()
	const n = 200
	routes := []string{"/a", "/b", ""}
	for i := range n {
		storetest.MustEnqueueOn(t, s, fmt.Sprint("bounded:", i), routes[i%len(routes)])
	}
	q := s.queue
	queued := int64(0)
	for _, r := range routes {
		queued += raw.XLen(ctx, q.stream(r)).Val()
	}
	if queued != n {
		t.Fatalf("the streams hold %d entries after %d enqueues", queued, n)
	}
	settled := 0
	for round := 0; settled < n; round++ {
		if round > 10 {
			t.Fatalf("only %d of %d settled", settled, n)
		}
		for i, d := range storetest.Take(t, s, 50, storetest.Lease) {
			var err error
			switch {
			case d.Attempt == 1 && i%2 == 0:
				err = s.Retry(ctx, d, time.Now().Add(-time.Millisecond), 500, "retry once")
			case i%7 == 0:
				err = s.Fail(ctx, d, 500, "dead", storetest.Keep)
				settled++
			case i%11 == 0:
				_, err = s.Forget(ctx, d.Claim.Key)
				settled++
			default:
				err = s.Succeed(ctx, d, storetest.Replayed, storetest.Keep)
				settled++
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if ds := storetest.Take(t, s, 50, storetest.Lease); len(ds) != 0 {
		t.Fatalf("Take after every event was settled = %d deliveries", len(ds))
	}
	pending, err := raw.XPending(ctx, q.stream(""), queueGroup).Result()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{
		"XLEN of the empty route's stream": raw.XLen(ctx, q.stream("")).Val(),
		"its XPENDING":                     pending.Count,
		"routes in the set":                raw.SCard(ctx, q.routes).Val(),
		"ZCARD open":                       raw.ZCard(ctx, q.open).Val(),
		"request keys":                     int64(len(raw.Keys(ctx, q.tag+"#req:*").Val())) - raw.ZCard(ctx, q.dead).Val(),
		"dead vs index":                    raw.ZCard(ctx, q.dead).Val() - int64(len(deadLetters(t, s))),
	}
	for _, r := range routes {
		counts["ZCARD retry of "+r] = raw.ZCard(ctx, q.retry(r)).Val()
		if r != "" {
			counts["keys of "+r] = raw.Exists(ctx, q.stream(r), q.retry(r), q.cursor(r)).Val()
		}
	}
	for name, got := range counts {
		if got != 0 {
			t.Errorf("%s = %d after every event was settled, want 0", name, got)
		}
	}
}

func deadLetters(t *testing.T, s dedup.Queue) []dedup.DeadLetter {
	t.Helper()
	var all []dedup.DeadLetter
	cursor := ""
	for {
		page, next, err := s.DeadLetters(context.Background(), cursor, 7)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		cursor = next
	}
}

// TestRedisQueueGroupLost deletes a route's consumer group under a
// running queue, then its stream, and then restarts Redis without
// persistence: each time the group is created again, what survived is
// delivered, and the loss is logged at error level.
func TestRedisQueueGroupLost(t *testing.T) {
	srv := redistest.New(t)
	s, logs := observedStore(t, srv)
	raw := rawClient(t, srv)
	ctx := context.Background()
	stream := s.queue.stream(storetest.Request.Route)

	storetest.MustEnqueue(t, s, "held")
	held := storetest.TakeOne(t, s, storetest.Lease)
	if n := logs.FilterMessageSnippet("created the async queue's consumer group").Len(); n != 1 {
		t.Errorf("the first Take logged %d creations of the group, want 1", n)
	}
	storetest.MustEnqueue(t, s, "waiting")
	if err := raw.XGroupDestroy(ctx, stream, queueGroup).Err(); err != nil {
		t.Fatal(err)
	}
	ds := storetest.Take(t, s, 10, storetest.Lease)
	if len(ds) != 1 || ds[0].Claim.Key != "waiting" {
		t.Fatalf("Take after the group was deleted = %+v, want the waiting event", ds)
	}
	waiting := ds[0]
	if err := s.Succeed(ctx, held, storetest.Replayed, storetest.Keep); err != nil {
		t.Errorf("the holder's Succeed after the group was recreated: %v", err)
	}
	lost := logs.FilterLevelExact(zap.ErrorLevel).FilterMessageSnippet("consumer group was missing")
	if lost.Len() != 1 {
		t.Fatalf("logged %d errors about the lost group, want 1: %v", lost.Len(), logs.All())
	}

	// The stream itself gone, but the records of open events still there
	// (an operator deleted the key): they are queued again.
	// A delivery under way stays its holder's.
	storetest.MustEnqueue(t, s, "orphan")
	if err := raw.Del(ctx, stream).Err(); err != nil {
		t.Fatal(err)
	}
	ds = storetest.Take(t, s, 10, storetest.Lease)
	if len(ds) != 1 || ds[0].Claim.Key != "orphan" {
		t.Errorf("Take after the stream was deleted = %+v, want the orphan queued again", ds)
	}
	if err := s.Succeed(ctx, waiting, storetest.Replayed, storetest.Keep); err != nil {
		t.Errorf("Succeed of the delivery under way when the stream went: %v", err)
	}
	if n := raw.XLen(ctx, stream).Val(); n != 1 {
		t.Errorf("XLEN %d once the recovered delivery settled, want 1 (the orphan)", n)
	}

	srv.Stop()
	srv.Start()
	if ds := storetest.Take(t, s, 10, storetest.Lease); len(ds) != 0 {
		t.Errorf("Take on an emptied Redis = %+v", ds)
	}
	if n := logs.FilterLevelExact(zap.ErrorLevel).FilterMessageSnippet("consumer group was missing").Len(); n != 3 {
		t.Errorf("logged %d errors about the lost group after the restart, want 3", n)
	}
	storetest.MustEnqueue(t, s, "after")
	if d := storetest.TakeOne(t, s, storetest.Lease); d.Claim.Key != "after" {
		t.Errorf("Take after the restart = %s, want the new event", d.Claim.Key)
	}
}

// TestRedisMarkerWithoutRecord leaves the sync key of an async event
// marked with no record behind it, as a crash between Enqueue's two steps
// would: a sync claim and an enqueue of that key both get it.
func TestRedisMarkerWithoutRecord(t *testing.T) {
	srv := redistest.New(t)
	s := openRedis(t, srv)
	raw := rawClient(t, srv)
	ctx := context.Background()
	for _, k := range []string{"marked/sync", "marked/async"} {
		if err := raw.Set(ctx, k, asyncMarker, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Lookup(ctx, "marked/sync"); !errors.Is(err, dedup.ErrNotFound) {
		t.Errorf("Lookup of a bare marker = %v, want ErrNotFound", err)
	}
	if _, rec := storetest.MustClaim(t, s, "marked/sync", storetest.Lease); rec.State != dedup.Absent {
		t.Errorf("Claim over a bare marker: %v, want a fresh claim", rec.State)
	}
	storetest.MustEnqueue(t, s, "marked/async")
}

// TestRedisEnqueueWaitsForReplicas enqueues on a master with one replica
// and WaitReplicas 1: the suite passes, and an enqueue the replica does
// not acknowledge is an error that leaves nothing queued or claimed. On
// Redis before 7.2 (no WAITAOF) the store falls back to WAIT alone.
func TestRedisEnqueueWaitsForReplicas(t *testing.T) {
	master := redistest.New(t)
	host, port, _ := net.SplitHostPort(master.Addr)
	replica := redistest.New(t, "--replicaof", host, port)
	raw := rawClient(t, master)
	ctx := context.Background()
	storetest.Eventually(t, "the replica to be online", func() bool {
		info := raw.Info(ctx, "replication").Val()
		return strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
	cfg := Config{URL: master.URL(), WaitReplicas: 1, WaitTimeout: ackTimeout}
	t.Run("conformance", func(t *testing.T) { storetest.Run(t, redisBackends(cfg)) })

	// The enqueue the replica must acknowledge waits as long as a loaded
	// machine may need; only the one meant to go unacknowledged waits
	// briefly.
	acked := open(t, cfg)
	storetest.MustEnqueue(t, acked, "acknowledged")
	version := raw.Info(ctx, "server").Val()
	if acked.aof && strings.Contains(version, "redis_version:7.0") {
		t.Error("the store waits for WAITAOF on a Redis without it")
	}
	cfg.WaitTimeout = 100 * time.Millisecond
	s := open(t, cfg)
	replica.Pause()
	defer replica.Resume()
	if _, _, err := s.Enqueue(ctx, "refused", storetest.Request, 0); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Enqueue with the replica paused = %v, want ErrNotReplicated", err)
	}
	if _, err := s.Lookup(ctx, "refused"); !errors.Is(err, dedup.ErrNotFound) {
		t.Errorf("an enqueue no replica acknowledged was kept: Lookup = %v", err)
	}
	if st := storetest.Stats(t, s); st.Depth != 1 {
		t.Errorf("queue depth %d after the refused enqueue, want the 1 acknowledged", st.Depth)
	}
}

func TestRedisCheckDurability(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		args     []string
		ok       bool
		readable bool
		want     string
	}{
		{"no append-only file", nil, false, true, "appendonly is no"},
		{"evicting", []string{"--appendonly", "yes", "--maxmemory-policy", "allkeys-lru"}, false, true, "maxmemory-policy is allkeys-lru"},
		{"fsync left to the system", []string{"--appendonly", "yes", "--appendfsync", "no"}, false, true, "appendfsync is no"},
		{"durable", []string{"--appendonly", "yes"}, true, true, "survive a Redis restart"},
		{"CONFIG refused, read from INFO", []string{"--appendonly", "yes", "--rename-command", "CONFIG", ""}, true, true, "read from INFO"},
		{"CONFIG refused, INFO says evicting", []string{"--maxmemory-policy", "volatile-lru", "--appendonly", "yes", "--rename-command", "CONFIG", ""}, false, true, "maxmemory-policy is volatile-lru"},
		{"CONFIG and INFO refused", []string{"--appendonly", "yes", "--rename-command", "CONFIG", "", "--rename-command", "INFO", ""}, false, false, "cannot read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openRedis(t, redistest.New(t, tc.args...))
			d, err := s.CheckDurability(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if d.OK() != tc.ok || d.Readable != tc.readable || !strings.Contains(d.String(), tc.want) {
				t.Errorf("CheckDurability = %+v (%q), want OK %v, readable %v, saying %q", d, d, tc.ok, tc.readable, tc.want)
			}
		})
	}
	t.Run("cluster", func(t *testing.T) {
		c := redistest.NewCluster(t, redistest.ClusterConfig{Args: []string{"--appendonly", "yes"}})
		d, err := open(t, Config{ClusterAddrs: c.Addrs()}).CheckDurability(ctx)
		if err != nil || !d.OK() {
			t.Errorf("CheckDurability on a cluster with appendonly = %+v, %v; want OK", d, err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		srv := redistest.New(t)
		s := openRedis(t, srv)
		srv.Stop()
		if _, err := s.CheckDurability(ctx); err == nil {
			t.Error("CheckDurability with Redis down succeeded")
		}
	})
}

// TestRedisQueueACL runs the conformance suite as the least-privileged ACL user
// docs/stores.md gives, with its key patterns for the queue's hash tag.
func TestRedisQueueACL(t *testing.T) {
	srv := redistest.New(t, "--user", "dedup", "on", ">s3cret", "~q*", "~{q*",
		"+@read", "+@write", "+@scripting", "+@connection", "+wait", "+time")
	storetest.Run(t, redisBackends(Config{URL: srv.URL(), Username: "dedup", Password: "s3cret"}))
}

// TestRedisQueuePrunesConsumers checks that the consumers of processes
// gone are deleted from the group, but never one with deliveries pending.
func TestRedisQueuePrunesConsumers(t *testing.T) {
	srv := redistest.New(t)
	raw := rawClient(t, srv)
	ctx := context.Background()
	settled, holding, pruner := openRedis(t, srv), openRedis(t, srv), openRedis(t, srv)
	storetest.MustEnqueue(t, settled, "a")
	if err := settled.Succeed(ctx, storetest.TakeOne(t, settled, storetest.Lease), storetest.Replayed, storetest.Keep); err != nil {
		t.Fatal(err)
	}
	storetest.MustEnqueue(t, holding, "b")
	storetest.TakeOne(t, holding, storetest.Lease)
	storetest.MustEnqueue(t, pruner, "c")
	storetest.TakeOne(t, pruner, storetest.Lease)
	stream := pruner.queue.stream(storetest.Request.Route)
	if n := len(raw.XInfoConsumers(ctx, stream, queueGroup).Val()); n != 3 {
		t.Fatalf("%d consumers, want 3", n)
	}
	n, err := pruner.pruneConsumers(ctx, 0) // every consumer idle long enough
	if err != nil || n != 1 {
		t.Fatalf("pruneConsumers = %d, %v; want 1 (the one with nothing pending)", n, err)
	}
	names := map[string]bool{}
	for _, c := range raw.XInfoConsumers(ctx, stream, queueGroup).Val() {
		names[c.Name] = true
	}
	if !names[holding.consumer] || !names[pruner.consumer] || names[settled.consumer] {
		t.Errorf("consumers left %v, want the holder's and the pruner's", names)
	}
}

// TestRedisQueueUnreadableRequest damages a queued request: Take
// dead-letters that event, saying why, and hands out the others.
func TestRedisQueueUnreadableRequest(t *testing.T) {
	srv := redistest.New(t)
	s := openRedis(t, srv)
	ctx := context.Background()
	storetest.MustEnqueue(t, s, "damaged")
	storetest.MustEnqueue(t, s, "fine")
	if err := rawClient(t, srv).Set(ctx, s.queue.request("damaged"), "\x7fnot a request", 0).Err(); err != nil {
		t.Fatal(err)
	}
	storetest.CheckUnreadable(t, s.Backend())
}

// TestRedisQueueNewGroupNotLost: on a new Redis, every lane's first Take
// finds no consumer group, and the first to recreate it logs a new queue
// at info. Two Takes per lane and a lane per route run at once, so a Take
// of another lane may run after that recreation, find the group, and say
// so (groupSeen) before the recreating Take logs: the log must not then
// call the new queue one Redis lost (it did, at error level, on a loaded
// machine: TestAsyncRedisDurabilityLogged failed on it). The interleaving
// is played here step by step: the Take's script, the other Take's
// effect, then the recreation and its log line.
func TestRedisQueueNewGroupNotLost(t *testing.T) {
	srv := redistest.New(t)
	s, logs := observedStore(t, srv)
	ctx := context.Background()

	seen := s.groupSeen.Load()
	_, missing, err := s.take(ctx, dedup.Lane{Route: "/a"}, 1, storetest.Lease, nil)
	if err != nil || !missing {
		t.Fatalf("the first Take on a new Redis = missing %v, %v; want the group missing", missing, err)
	}
	s.groupSeen.Store(true) // a Take of another lane, run after the recreation below
	if err := s.recreateGroups(ctx, seen); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterLevelExact(zap.ErrorLevel).Len(); n != 0 {
		t.Errorf("a new queue logged %d errors, want none: %v", n, logs.All())
	}
	if n := logs.FilterMessageSnippet("created the async queue's consumer group").Len(); n != 1 {
		t.Errorf("logged the new queue's group %d times, want 1: %v", n, logs.All())
	}
}

// observedStore opens a store on srv whose log, from info up, the test
// reads.
func observedStore(t *testing.T, srv *redistest.Server) (*Store, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	s, err := Open(Config{URL: srv.URL(), Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, logs
}
