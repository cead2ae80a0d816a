package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/redistest"
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

// TestRedisQueueLostTakesResolved: what Take does with the tokens of lost
// Takes. A Take of another lane neither passes nor drops them. A Take of
// their lane that finds one of a lost Take's tokens drops the rest of
// them, unless it stopped short (it handed out all it was asked): then
// it keeps those it did not find. The tokens of a lost Take that shows no
// sign of having run (not run yet, or it leased nothing) are kept.
func TestRedisQueueLostTakesResolved(t *testing.T) {
	srv := redistest.New(t)
	s := openRedis(t, srv)
	ctx := context.Background()
	storetest.MustEnqueueOn(t, s, "mine:1", "/a")
	storetest.MustEnqueueOn(t, s, "mine:2", "/a")
	storetest.MustEnqueueOn(t, s, "other", "/b")
	a := laneID(dedup.RouteLane("/a"))
	until := time.Now().Add(storetest.Lease)
	fresh := func(n int) []string {
		var toks []string
		for range n {
			tok := codec.NewToken()
			toks = append(toks, fmt.Sprintf("%x", tok))
		}
		return toks
	}
	// As a Take of /a's lane whose answer was lost leaves things: the
	// script ran, and Take kept its tokens (those it leased under, and
	// one it did not use).
	ds, _, _, err := s.take(ctx, dedup.RouteLane("/a"), 2, storetest.Lease, nil)
	if err != nil || len(ds) != 2 {
		t.Fatalf("take of /a = %d, %v", len(ds), err)
	}
	s.lost.add(a, append(fresh(1), ds[0].Claim.Token, ds[1].Claim.Token), until)
	s.lost.add(a, fresh(2), until) // one that never ran

	if ds := storetest.TakeFrom(t, s, dedup.RouteLane("/b"), 10, storetest.Lease); len(ds) != 1 || ds[0].Claim.Key != "other" {
		t.Errorf("Take of /b = %+v, want /b's event alone", ds)
	}
	if len(s.lost.takes) != 2 || s.lost.n != 5 {
		t.Fatalf("after a Take of another lane: %d lost Takes, %d tokens; want 2, 5", len(s.lost.takes), s.lost.n)
	}
	first := storetest.TakeFrom(t, s, dedup.RouteLane("/a"), 1, storetest.Lease)
	if len(first) != 1 || first[0].Attempt != 1 {
		t.Fatalf("Take(1) of /a = %+v, want one lost delivery, attempt 1", first)
	}
	if s.lost.n != 4 {
		t.Errorf("after a Take that stopped short: %d tokens kept, want 4 (all but the one found)", s.lost.n)
	}
	second := storetest.TakeFrom(t, s, dedup.RouteLane("/a"), 10, storetest.Lease)
	if len(second) != 1 || second[0].Attempt != 1 || second[0].Claim.Key == first[0].Claim.Key {
		t.Fatalf("then Take of /a = %+v, want the other lost delivery, attempt 1", second)
	}
	if len(s.lost.takes) != 1 || s.lost.n != 2 {
		t.Errorf("once the lost Take's deliveries were found: %d lost Takes, %d tokens; want the one that never ran, 2", len(s.lost.takes), s.lost.n)
	}
	if ds := storetest.TakeFrom(t, s, dedup.RouteLane("/a"), 10, storetest.Lease); len(ds) != 0 {
		t.Errorf("a further Take of /a handed out %+v", ds)
	}
}
