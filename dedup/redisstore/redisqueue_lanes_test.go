package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// The previous version's scripts, as it ran them: what it leaves in Redis
// is what this one must deliver.
var (
	//go:embed testdata/v1/queue_enqueue.lua
	v1EnqueueLua string
	//go:embed testdata/v1/queue_take.lua
	v1TakeLua string
	//go:embed testdata/v1/queue_settle.lua
	v1SettleLua string
	//go:embed testdata/v1/queue_requeue.lua
	v1RequeueLua string
)

// v1 runs the previous version's scripts on one queue, as its process
// "old" did.
type v1 struct {
	t   *testing.T
	raw *redis.Client
	q   queueKeys
}

func (o v1) run(lua string, keys []string, args ...any) any {
	o.t.Helper()
	v, err := redis.NewScript(lua).Run(context.Background(), o.raw, keys, args...).Result()
	if err != nil {
		o.t.Fatal(err)
	}
	return v
}

// settleKeys are the KEYS of its settle and requeue scripts.
func (o v1) settleKeys(key string) []string {
	return []string{o.q.record(key), o.q.request(key), o.q.stream(""), o.q.open, o.q.retry(""), o.q.dead}
}

func (o v1) enqueue(key string) {
	o.t.Helper()
	if err := markerScript.Run(context.Background(), o.raw, []string{key}, asyncMarker).Err(); err != nil {
		o.t.Fatal(err)
	}
	tok := codec.NewToken()
	o.run(v1EnqueueLua, []string{o.q.record(key), o.q.request(key), o.q.stream(""), o.q.open},
		key, codec.EncodeRequest(storetest.Request), fmt.Sprintf("%x", tok))
}

// take returns the {key: token} of what it hands out.
func (o v1) take(n int, lease time.Duration) map[string]string {
	o.t.Helper()
	args := []any{queueGroup, "old", n, lease.Milliseconds(), o.q.tag}
	for range n {
		tok := codec.NewToken()
		args = append(args, fmt.Sprintf("%x", tok))
	}
	got := map[string]string{}
	for _, item := range o.run(v1TakeLua, []string{o.q.stream(""), o.q.retry(""), o.q.cursor("")}, args...).([]any) {
		f := item.([]any)
		got[f[0].(string)] = f[2].(string)
	}
	return got
}

// TestRedisQueueOldLayout writes events with the previous version's
// scripts (one stream, records without a route) in every state it leaves
// them: queued, due for a retry, held by a process that died, dead-lettered.
// This version delivers each in the empty route's lane (the rest lane),
// takes the dead one over, requeues the dead letter there, and sends the
// first retry of one to its request's route lane. An event of this
// version that a process of the previous one requeued (during a rolling
// upgrade) lands on the old stream: it moves to its own lane.
func TestRedisQueueOldLayout(t *testing.T) {
	srv := redistest.New(t)
	raw := rawClient(t, srv)
	s := openRedis(t, srv)
	ctx := context.Background()
	old := v1{t, raw, s.queue}
	route := storetest.Request.Route
	own, rest := dedup.RouteLane(route), dedup.RestLane(route)

	// The previous version created the group on its first Take.
	if err := raw.XGroupCreateMkStream(ctx, s.queue.stream(""), queueGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"held", "retrying", "dead", "queued"} {
		old.enqueue(k)
	}
	taken := old.take(3, storetest.Short)
	if len(taken) != 3 || taken["queued"] != "" {
		t.Fatalf("the old Take handed out %v, want the first three", taken)
	}
	due := strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10)
	old.run(v1SettleLua, old.settleKeys("retrying"), queueGroup, "retrying", taken["retrying"], "retry", due, 503, "x")
	old.run(v1SettleLua, old.settleKeys("dead"), queueGroup, "dead", taken["dead"], "fail", storetest.Keep.Milliseconds(), 500, "x")
	// And "held" stays with "old", which stops: its lease runs out.

	if ds := storetest.TakeFrom(t, s, own, 10, storetest.Lease); len(ds) != 0 {
		t.Errorf("the route's own lane handed out %d of the old events, want none: they are the empty route's", len(ds))
	}
	got := map[string]dedup.Delivery{}
	for _, d := range storetest.TakeFrom(t, s, rest, 10, storetest.Lease) {
		got[d.Claim.Key] = d
	}
	if len(got) != 2 || got["queued"].Attempt != 1 || got["retrying"].Attempt != 2 || got["queued"].Request.Route != route {
		t.Fatalf("the rest lane handed out %+v, want queued (attempt 1) and retrying (attempt 2)", got)
	}
	storetest.Eventually(t, "the dead process's delivery to be taken over", func() bool {
		for _, d := range storetest.TakeFrom(t, s, rest, 10, storetest.Short) {
			got[d.Claim.Key] = d
		}
		return got["held"].Attempt != 0
	})
	if got["held"].Attempt != 2 {
		t.Errorf("the dead process's delivery taken over as attempt %d, want 2", got["held"].Attempt)
	}
	if err := s.Requeue(ctx, "dead"); err != nil {
		t.Fatal(err)
	}
	if ds := storetest.TakeFrom(t, s, rest, 10, storetest.Lease); len(ds) != 1 || ds[0].Claim.Key != "dead" || ds[0].Attempt != 1 {
		t.Errorf("after requeueing the old dead letter, the rest lane handed out %+v, want it as attempt 1", ds)
	} else {
		got["dead"] = ds[0]
	}

	// Its first retry takes an old event to its request's route lane.
	if err := s.Retry(ctx, got["queued"], time.Now().Add(-time.Second), 503, "x"); err != nil {
		t.Fatal(err)
	}
	if ds := storetest.TakeFrom(t, s, rest, 10, storetest.Lease); len(ds) != 0 {
		t.Errorf("the rest lane handed out %d after the retry, want none", len(ds))
	}
	if ds := storetest.TakeFrom(t, s, own, 10, storetest.Lease); len(ds) != 1 || ds[0].Claim.Key != "queued" || ds[0].Attempt != 2 {
		t.Errorf("the route's lane after the retry = %+v, want the old event's attempt 2", ds)
	} else {
		got["queued"] = ds[0]
	}

	// An event of this version dead-lettered, and requeued by a process
	// of the previous version: onto the old stream.
	storetest.MustEnqueue(t, s, "new")
	d := storetest.TakeOne(t, s, storetest.Lease)
	if err := s.Fail(ctx, d, 500, "x", storetest.Keep); err != nil {
		t.Fatal(err)
	}
	if n := old.run(v1RequeueLua, old.settleKeys("new"), "new"); n != int64(1) {
		t.Fatalf("the old Requeue = %v", n)
	}
	if ds := storetest.TakeFrom(t, s, rest, 10, storetest.Lease); len(ds) != 0 {
		t.Errorf("the rest lane handed out %v, want the event moved to its own lane", ds)
	}
	if ds := storetest.TakeFrom(t, s, own, 10, storetest.Lease); len(ds) != 1 || ds[0].Claim.Key != "new" || ds[0].Attempt != 1 {
		t.Errorf("the route's lane = %+v, want the requeued event, attempt 1", ds)
	} else {
		got["new"] = ds[0]
	}

	for k, d := range got {
		if err := s.Succeed(ctx, d, storetest.Replayed, storetest.Keep); err != nil {
			t.Errorf("Succeed %s: %v", k, err)
		}
	}
	if st := storetest.Stats(t, s); st.Depth != 0 || st.OldestAge != 0 || st.DeadLetters != 0 {
		t.Errorf("Stats once everything was delivered = %+v", st)
	}
	if n := raw.XLen(ctx, s.queue.stream("")).Val(); n != 0 {
		t.Errorf("the old stream holds %d entries once everything was delivered", n)
	}
}

// TestRedisQueueExtendResetsIdle: Extend starts the entry's idle time
// again, without counting a delivery, so XAUTOCLAIM leaves it alone for a
// lease instead of reassigning it at every poll once the first lease has
// gone.
func TestRedisQueueExtendResetsIdle(t *testing.T) {
	srv := redistest.New(t)
	s := openRedis(t, srv)
	raw := rawClient(t, srv)
	ctx := context.Background()
	stream := s.queue.stream(storetest.Request.Route)
	storetest.MustEnqueue(t, s, "k")
	d := storetest.TakeOne(t, s, storetest.Lease)
	pending := func() redis.XPendingExt {
		t.Helper()
		p, err := raw.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: queueGroup, Start: "-", End: "+", Count: 10}).Result()
		if err != nil || len(p) != 1 {
			t.Fatalf("XPENDING = %v, %v; want one entry", p, err)
		}
		return p[0]
	}
	storetest.Eventually(t, "the entry to be idle for a Short lease", func() bool { return pending().Idle >= storetest.Short })
	if err := s.Extend(ctx, d, storetest.Lease); err != nil {
		t.Fatal(err)
	}
	p := pending()
	if p.Idle >= storetest.Short || p.RetryCount != 1 || p.Consumer != s.consumer {
		t.Errorf("after Extend: idle %s, delivered %d times, to %s; want idle anew, once, to %s", p.Idle, p.RetryCount, p.Consumer, s.consumer)
	}
}

// TestRedisQueueStatsAcrossLanes: the depth counts every route's queued
// events, less those held in any lane.
func TestRedisQueueStatsAcrossLanes(t *testing.T) {
	s := openRedis(t, redistest.New(t))
	for i, r := range []string{"/a", "/a", "/b", "", "/c"} {
		storetest.MustEnqueueOn(t, s, fmt.Sprint("k", i), r)
	}
	if st := storetest.Stats(t, s); st.Depth != 5 {
		t.Errorf("5 queued on 4 routes: depth %d", st.Depth)
	}
	storetest.TakeFrom(t, s, dedup.RouteLane("/a"), 1, storetest.Lease)
	storetest.TakeFrom(t, s, dedup.RouteLane("/b"), 1, storetest.Lease)
	storetest.TakeFrom(t, s, dedup.RestLane("/a", "/b", "/c"), 1, storetest.Lease)
	if st := storetest.Stats(t, s); st.Depth != 2 {
		t.Errorf("3 held in 3 lanes of 5 queued: depth %d, want 2", st.Depth)
	}
}

// TestRedisQueueRestLaneTakesTurns: each Take of the rest lane starts its
// round of routes one further, so a route with much queued does not keep
// another's events waiting.
func TestRedisQueueRestLaneTakesTurns(t *testing.T) {
	s := openRedis(t, redistest.New(t))
	for i := range 10 {
		storetest.MustEnqueueOn(t, s, fmt.Sprint("busy", i), "/busy")
	}
	storetest.MustEnqueueOn(t, s, "quiet", "/quiet")
	// The first Take of a new queue creates its groups, and takes twice.
	storetest.TakeFrom(t, s, dedup.RouteLane("none"), 1, storetest.Lease)
	seen := map[string]bool{}
	// The round is of three routes: the empty one's, /busy's, /quiet's.
	for range 3 {
		for _, d := range storetest.TakeFrom(t, s, dedup.RestLane(), 1, storetest.Lease) {
			seen[d.Request.Route] = true
		}
	}
	if !seen["/quiet"] || !seen["/busy"] {
		t.Errorf("three Takes of one from the rest lane drew on %v, want both routes", seen)
	}
}
