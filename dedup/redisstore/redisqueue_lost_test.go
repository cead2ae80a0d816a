package redisstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// TestRedisQueueLostTakeReply stops Redis (SIGSTOP) while a Take's
// command is on the wire, so that the Take times out and Redis runs it
// once it continues: the deliveries it leased go to the next Take at once,
// as the same attempts under the same tokens, and to no Take after that.
// Without it they would wait for their lease to run out (issue 22).
func TestRedisQueueLostTakeReply(t *testing.T) {
	srv := redistest.New(t)
	s := openRedis(t, srv)
	raw := rawClient(t, srv)
	ctx := context.Background()
	keys := []string{"lost:a", "lost:b", "lost:c"}
	for _, k := range keys {
		storetest.MustEnqueue(t, s, k)
	}
	// The Take must reach the socket of a connection already set up: a
	// new one's handshake would hang on the stopped server, and the
	// command never be sent. A Take of a lane with nothing due loads the
	// script, creates the groups, and puts its connection back on top of
	// the pool (LIFO), for the next call.
	if ds := storetest.TakeFrom(t, s, dedup.RouteLane("elsewhere"), 10, storetest.Lease); len(ds) != 0 {
		t.Fatalf("Take of another route's lane = %d deliveries", len(ds))
	}
	srv.Pause()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	ds, err := s.Take(short, dedup.AllRoutes, 10, storetest.Lease)
	cancel()
	srv.Resume()
	if err == nil {
		t.Fatalf("a Take with Redis stopped answered %d deliveries", len(ds))
	}
	// Redis runs the command once it continues, though no one waits for
	// the answer any more.
	storetest.Eventually(t, "the lost Take to lease the events", func() bool {
		for _, k := range keys {
			if rec, err := s.Lookup(ctx, k); err != nil || rec.State != dedup.Delivering {
				return false
			}
		}
		return true
	})

	before := time.Now()
	ds = storetest.Take(t, s, 10, storetest.Lease)
	if len(ds) != len(keys) {
		t.Fatalf("the Take after the lost one = %d deliveries, want the %d it leased", len(ds), len(keys))
	}
	for _, d := range ds {
		if d.Attempt != 1 {
			t.Errorf("%s handed out again as attempt %d, want 1: the lost Take's attempt", d.Claim.Key, d.Attempt)
		}
		// The lease runs from this hand-out, not from the lost one's.
		end, err := raw.HGet(ctx, s.queue.record(d.Claim.Key), "n").Int64()
		if err != nil || time.UnixMilli(end).Before(before.Add(storetest.Lease).Truncate(time.Millisecond)) {
			t.Errorf("%s's lease ends at %v (%v), want a lease from the hand-out on, %v", d.Claim.Key, time.UnixMilli(end), err, before.Add(storetest.Lease))
		}
	}
	if again := storetest.Take(t, s, 10, storetest.Lease); len(again) != 0 {
		t.Errorf("handed out again by a third Take: %d deliveries", len(again))
	}
	for _, d := range ds {
		if err := s.Succeed(ctx, d, storetest.Replayed, storetest.Keep); err != nil {
			t.Errorf("Succeed of a delivery handed out again: %v", err)
		}
	}
	if s.lost.n != 0 {
		t.Errorf("%d tokens still kept once the lost Take's deliveries were handed out", s.lost.n)
	}
}

// TestRedisQueueLostTakeFenced: a Take whose answer was lost and whose
// script has not run yet when the next Take of its lane runs (several
// Takes queue up on different connections while Redis is frozen, and it
// runs them in any order once it thaws) is fenced by that Take, which the
// store then forgets it for: when the lost Take's script runs at last,
// with its own take ID and tokens, it leases nothing, and what is due is
// handed out by ordinary Takes at once. Unfenced, it would lease what is
// due under tokens no one presents again, to wait out the lease.
func TestRedisQueueLostTakeFenced(t *testing.T) {
	srv := redistest.New(t)
	s := openRedis(t, srv)
	raw := rawClient(t, srv)
	ctx := context.Background()
	lane := dedup.RouteLane("/a")
	storetest.MustEnqueueOn(t, s, "early", "/a")
	late := newTakeCall(3)
	s.lost.add(laneID(lane), late)

	ds := storetest.TakeFrom(t, s, lane, 10, storetest.Lease)
	if len(ds) != 1 || ds[0].Claim.Key != "early" || ds[0].Attempt != 1 {
		t.Fatalf("the Take after the lost one = %+v, want the one event due, attempt 1", ds)
	}
	if len(s.lost.takes) != 0 || s.lost.n != 0 {
		t.Errorf("after the Take that fenced it: %d lost Takes, %d tokens kept; want none", len(s.lost.takes), s.lost.n)
	}
	// The mark goes with the lease: marks do not pile up.
	if ttl := raw.PTTL(ctx, s.queue.fenced).Val(); ttl <= 0 || ttl > storetest.Lease {
		t.Errorf("the fence expires in %v, want within the lease, %v", ttl, storetest.Lease)
	}

	keys := []string{"due:1", "due:2", "due:3"}
	for _, k := range keys {
		storetest.MustEnqueueOn(t, s, k, "/a")
	}
	// Redis runs the lost Take's command at last.
	got, _, err := s.takeAs(ctx, lane, len(late.tokens), storetest.Lease, late, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("the fenced Take ran late and handed out %d deliveries", len(got))
	}
	for _, k := range keys {
		if rec := storetest.MustLookup(t, s, k); rec.State != dedup.Queued || rec.Delivery.Attempts != 0 {
			t.Errorf("%s is %v after %d attempts once the fenced Take ran, want queued, none", k, rec.State, rec.Delivery.Attempts)
		}
	}
	ds = storetest.TakeFrom(t, s, lane, 10, storetest.Lease)
	if len(ds) != len(keys) {
		t.Fatalf("the next Take = %d deliveries, want the %d due at once", len(ds), len(keys))
	}
	for _, d := range ds {
		if d.Attempt != 1 || slices.Contains(late.tokens, d.Claim.Token) {
			t.Errorf("%s handed out as attempt %d under token %s, want attempt 1 under a fresh token", d.Claim.Key, d.Attempt, d.Claim.Token)
		}
		if err := s.Succeed(ctx, d, storetest.Replayed, storetest.Keep); err != nil {
			t.Errorf("Succeed %s: %v", d.Claim.Key, err)
		}
	}
}

// TestRedisQueueLostTakesResolved: what Take does with lost Takes. A Take
// of another lane neither passes nor resolves them. The next Take of
// their lane resolves them all at once, and the store forgets them: it
// fences them all, hands out again up to n of what one that ran leased
// and still holds (same token, same attempt), and puts the rest back in
// the queue as it was (the attempt not counted), for the next Take at
// once. One that never ran leases nothing when it does.
func TestRedisQueueLostTakesResolved(t *testing.T) {
	srv := redistest.New(t)
	s := openRedis(t, srv)
	ctx := context.Background()
	for _, k := range []string{"mine:1", "mine:2", "mine:3"} {
		storetest.MustEnqueueOn(t, s, k, "/a")
	}
	storetest.MustEnqueueOn(t, s, "other", "/b")
	a := dedup.RouteLane("/a")
	// As a Take of /a's lane whose answer was lost leaves things: the
	// script ran and leased the three (one token left unused), and Take
	// kept the call.
	ran := newTakeCall(4)
	ds, _, err := s.takeAs(ctx, a, len(ran.tokens), storetest.Lease, ran, nil)
	if err != nil || len(ds) != 3 {
		t.Fatalf("take of /a = %d, %v", len(ds), err)
	}
	leased := map[string]string{}
	for _, d := range ds {
		leased[d.Claim.Key] = d.Claim.Token
	}
	s.lost.add(laneID(a), ran)
	never := newTakeCall(2)
	s.lost.add(laneID(a), never)

	if ds := storetest.TakeFrom(t, s, dedup.RouteLane("/b"), 10, storetest.Lease); len(ds) != 1 || ds[0].Claim.Key != "other" {
		t.Errorf("Take of /b = %+v, want /b's event alone", ds)
	}
	if len(s.lost.takes) != 2 || s.lost.n != 6 {
		t.Fatalf("after a Take of another lane: %d lost Takes, %d tokens; want 2, 6", len(s.lost.takes), s.lost.n)
	}
	first := storetest.TakeFrom(t, s, a, 2, storetest.Lease)
	if len(first) != 2 {
		t.Fatalf("Take(2) of /a = %d deliveries, want 2 of the lost ones", len(first))
	}
	for _, d := range first {
		if d.Attempt != 1 || leased[d.Claim.Key] != d.Claim.Token {
			t.Errorf("%s handed out again as attempt %d under %s, want attempt 1 under the lost Take's %s", d.Claim.Key, d.Attempt, d.Claim.Token, leased[d.Claim.Key])
		}
		delete(leased, d.Claim.Key)
	}
	if len(s.lost.takes) != 0 || s.lost.n != 0 {
		t.Errorf("after the Take that resolved them: %d lost Takes, %d tokens kept; want none", len(s.lost.takes), s.lost.n)
	}
	var third string
	for k := range leased {
		third = k
	}
	if rec := storetest.MustLookup(t, s, third); rec.State != dedup.Queued || rec.Delivery.Attempts != 0 {
		t.Errorf("%s, found beyond the Take's 2, is %v after %d attempts; want queued again, none", third, rec.State, rec.Delivery.Attempts)
	}
	storetest.MustEnqueueOn(t, s, "mine:4", "/a")
	if got, _, err := s.takeAs(ctx, a, len(never.tokens), storetest.Lease, never, nil); err != nil || len(got) != 0 {
		t.Errorf("the lost Take that never ran, run late = %d deliveries, %v; want none", len(got), err)
	}
	second := storetest.TakeFrom(t, s, a, 10, storetest.Lease)
	if len(second) != 2 {
		t.Fatalf("then Take of /a = %+v, want %s put back and mine:4", second, third)
	}
	for _, d := range second {
		if d.Attempt != 1 || slices.Contains(ran.tokens, d.Claim.Token) || slices.Contains(never.tokens, d.Claim.Token) {
			t.Errorf("%s handed out as attempt %d under %s, want attempt 1 under a fresh token", d.Claim.Key, d.Attempt, d.Claim.Token)
		}
	}
	if ds := storetest.TakeFrom(t, s, a, 10, storetest.Lease); len(ds) != 0 {
		t.Errorf("a further Take of /a handed out %+v", ds)
	}
	for _, d := range append(first, second...) {
		if err := s.Succeed(ctx, d, storetest.Replayed, storetest.Keep); err != nil {
			t.Errorf("Succeed %s: %v", d.Claim.Key, err)
		}
	}
}

// TestRedisQueueTakeSentOnce: a Take batched with a call of a later
// deadline, while Redis is stopped (SIGSTOP), times out and is not sent
// again. go-redis used to send a pipeline whose answer timed out again
// while the latest of its callers' deadlines allowed: every copy ran once
// Redis continued, each leasing what was due under the Take's tokens, and
// the Take got the answer of the last copy alone, so the deliveries of
// the others waited out their lease, held by no one (the end-to-end
// TestAsyncRedisPaused, 2 runs in 5). Sent once, its answer lost, the
// Take is kept as lost, and whatever it leased goes to the next Take.
func TestRedisQueueTakeSentOnce(t *testing.T) {
	srv := redistest.New(t)
	const timeout = 300 * time.Millisecond
	s, err := Open(Config{URL: srv.URL(), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	lane := dedup.RouteLane("/a")
	keys := []string{"once:1", "once:2", "once:3"}
	for _, k := range keys {
		storetest.MustEnqueueOn(t, s, k, "/a")
	}
	// The scripts loaded (a NOSCRIPT answer would send the Take again
	// as EVAL, on purpose), and connections set up beforehand, as on a
	// busy proxy: one set up while Redis is stopped would never get
	// through its handshake, and no copy be sent on it.
	if ds := storetest.TakeFrom(t, s, dedup.RouteLane("elsewhere"), 10, storetest.Lease); len(ds) != 0 {
		t.Fatalf("Take of another route's lane = %d deliveries", len(ds))
	}
	if err := lookupScript.Run(ctx, s.scripts, []string{"once:later"}).Err(); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	var warm sync.WaitGroup
	for range 8 {
		warm.Go(func() { _ = s.Ping(ctx) })
	}
	warm.Wait()
	b := s.scripts.(pipelined).b
	batched := func(n int) func() bool {
		return func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			return b.busy && b.next != nil && len(b.next.calls) == n
		}
	}

	srv.Pause()
	t.Cleanup(srv.Resume) // for a test that fails while Redis is stopped
	// A call of a short deadline on its way to Redis; the Take leads the
	// batch gathered meanwhile, sent once that call gives up, and a call
	// of a later deadline joins it.
	short, cancelShort := context.WithTimeout(ctx, timeout/4)
	defer cancelShort()
	var calls sync.WaitGroup
	calls.Go(func() { _, _ = s.Stats(short) })
	storetest.Eventually(t, "a call on its way", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.busy
	})
	var took []dedup.Delivery
	var tookErr error
	calls.Go(func() { took, tookErr = s.Take(ctx, lane, 1, storetest.Lease) })
	storetest.Eventually(t, "the Take to lead the next batch", batched(1))
	later, cancel := context.WithTimeout(ctx, 10*timeout)
	defer cancel()
	calls.Go(func() { _ = lookupScript.Run(later, s.scripts, []string{"once:later"}).Err() })
	storetest.Eventually(t, "a call of a later deadline to join the batch", batched(2))
	// Stopped for several timeouts, as long as it takes the batch to time
	// out and, before, to be sent again more than once.
	time.Sleep(4 * timeout) // the stop itself, not a wait for a condition
	srv.Resume()
	calls.Wait()

	handed := map[string]string{}
	for _, d := range took {
		handed[d.Claim.Key] = d.Claim.Token
	}
	// Whatever the Take leased, the next Takes hand out at once: nothing
	// waits out a lease.
	for range 3 {
		for _, d := range storetest.TakeFrom(t, s, lane, 10, storetest.Lease) {
			if tok, ok := handed[d.Claim.Key]; ok {
				t.Errorf("%s handed out twice, under %s then %s", d.Claim.Key, tok, d.Claim.Token)
			}
			handed[d.Claim.Key] = d.Claim.Token
		}
	}
	for _, k := range keys {
		if _, ok := handed[k]; !ok {
			rec := storetest.MustLookup(t, s, k)
			t.Errorf("%s not handed out (%v, attempt %d; the Take answered %d deliveries, %v): leased by a copy of the Take whose answer no one read, until its lease ends",
				k, rec.State, rec.Delivery.Attempts, len(took), tookErr)
		}
	}
}
