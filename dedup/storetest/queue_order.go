package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// orderCases: ordered events (Request.OrderKey). Only the head of each key
// is taken; the next once the head completed, was forgotten, or was
// dead-lettered without OrderBlock; retries and takeovers keep the head
// first; keys, and events without one, go in parallel.
var orderCases = []queueCase{
	{"ordered: only the head of each key is taken", func(t *testing.T, s queueStore, again func() queueStore) {
		enqueueOrdered(t, s, "a", "a1", "a2", "a3")
		enqueueOrdered(t, s, "b", "b1", "b2")
		enqueueOrdered(t, s, "", "u1", "u2")
		checkBlockedBy(t, s, "a2", "a1")
		checkBlockedBy(t, s, "a3", "a1")
		checkBlockedBy(t, s, "b1", "")
		// A restart keeps the places.
		s = again()
		if st := Stats(t, s); st.Depth != 7 {
			t.Errorf("Depth = %d, want 7: the waiting events are queued", st.Depth)
		}
		held := Take(t, s, 100, Lease)
		if got, want := keysOf(held), []string{"a1", "b1", "u1", "u2"}; !slices.Equal(got, want) {
			t.Fatalf("Take = %v, want the heads and the unordered events %v", got, want)
		}
		for _, want := range [][]string{{"a2", "b2"}, {"a3"}, nil} {
			if got := takeKeys(t, s); len(got) != 0 {
				t.Fatalf("Take while the heads are held = %v, want none", got)
			}
			for _, d := range held {
				succeed(t, s, d)
			}
			held = Take(t, s, 100, Lease)
			if got := keysOf(held); !slices.Equal(got, want) {
				t.Fatalf("Take once the heads completed = %v, want %v", got, want)
			}
		}
	}},
	{"ordered: a retried head keeps its place", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		enqueueOrdered(t, s, "a", "a1", "a2")
		d := takeOnly(t, s, "a1")
		// Backing off: nothing of the key is due meanwhile.
		if err := s.Retry(ctx, d, time.Now().Add(2*Short), 500, "the app answered 500"); err != nil {
			t.Fatal(err)
		}
		if got := takeKeys(t, s); len(got) != 0 {
			t.Fatalf("Take while the head backs off = %v, want none", got)
		}
		Eventually(t, "the head's retry", func() bool {
			ds := Take(t, s, 10, Lease)
			for _, got := range ds {
				if got.Claim.Key != "a1" || got.Attempt != 2 {
					t.Fatalf("Take = %s attempt %d, want a1's second attempt", got.Claim.Key, got.Attempt)
				}
				d = got
			}
			return len(ds) == 1
		})
		// Due at once: still the head.
		if err := s.Retry(ctx, d, time.Now().Add(-time.Second), 503, "unavailable"); err != nil {
			t.Fatal(err)
		}
		succeed(t, s, takeOnly(t, s, "a1"))
		takeOnly(t, s, "a2")
	}},
	{"ordered: a head whose lease ran out is taken over first", func(t *testing.T, s queueStore, _ func() queueStore) {
		enqueueOrdered(t, s, "a", "a1", "a2")
		first := TakeOne(t, s, Short)
		if first.Claim.Key != "a1" {
			t.Fatalf("Take = %s, want a1", first.Claim.Key)
		}
		if d := takenOver(t, s); d.Claim.Key != "a1" {
			t.Fatalf("taken over: %s, want the head a1", d.Claim.Key)
		} else {
			succeed(t, s, d)
		}
		takeOnly(t, s, "a2")
	}},
	{"ordered: skip goes on past a dead letter, which a retry puts at the end", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		enqueueOrdered(t, s, "a", "a1", "a2", "a3")
		fail(t, s, takeOnly(t, s, "a1"))
		if rec := MustLookup(t, s, "a1"); rec.State != dedup.Failed || rec.TTL <= 0 || rec.TTL > Keep {
			t.Errorf("a skipped dead letter: %v, TTL %s; want failed, kept for %s", rec.State, rec.TTL, Keep)
		}
		checkBlockedBy(t, s, "a3", "a2")
		a2 := takeOnly(t, s, "a2")
		if err := s.Requeue(ctx, "a1"); err != nil {
			t.Fatal(err)
		}
		checkBlockedBy(t, s, "a1", "a2")
		succeed(t, s, a2)
		succeed(t, s, takeOnly(t, s, "a3"))
		succeed(t, s, takeOnly(t, s, "a1"))
	}},
	{"ordered: block holds the key on a dead letter until it is retried", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		enqueueBlocking(t, s, "a", "a1", "a2")
		fail(t, s, takeOnly(t, s, "a1"))
		if got := takeKeys(t, s); len(got) != 0 {
			t.Fatalf("Take behind a blocking dead letter = %v, want none", got)
		}
		checkBlockedBy(t, s, "a2", "a1")
		if rec := MustLookup(t, s, "a1"); rec.State != dedup.Failed || rec.TTL != 0 {
			t.Errorf("a blocking dead letter: %v, TTL %s; want failed, kept until retried or forgotten", rec.State, rec.TTL)
		}
		if dl, _, err := s.DeadLetters(ctx, "", 10); err != nil || len(dl) != 1 || dl[0].Key != "a1" {
			t.Errorf("DeadLetters = %+v, %v; want a1", dl, err)
		}
		if err := s.Requeue(ctx, "a1"); err != nil {
			t.Fatal(err)
		}
		// It keeps its place at the head.
		succeed(t, s, takeOnly(t, s, "a1"))
		takeOnly(t, s, "a2")
	}},
	{"ordered: block lets the key go on once its dead letter is forgotten", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		enqueueBlocking(t, s, "a", "a1", "a2", "a3")
		fail(t, s, takeOnly(t, s, "a1"))
		if got := takeKeys(t, s); len(got) != 0 {
			t.Fatalf("Take behind a blocking dead letter = %v, want none", got)
		}
		if had, err := s.Forget(ctx, "a1"); err != nil || !had {
			t.Fatalf("Forget = %v, %v", had, err)
		}
		takeOnly(t, s, "a2")
		// Forgetting an event that waits takes it out of its key only.
		if had, err := s.Forget(ctx, "a3"); err != nil || !had {
			t.Fatalf("Forget = %v, %v", had, err)
		}
		enqueueBlocking(t, s, "a", "a4")
		checkBlockedBy(t, s, "a4", "a2")
	}},
	{"ordered: a blocking dead letter is listed by when it failed", func(t *testing.T, s queueStore, _ func() queueStore) {
		// A dead letter kept for its key (block) expires never: it must
		// still be listed, filtered and paged by its failure time, among
		// the dead letters that do expire, failed before and after it.
		enqueueOrdered(t, s, "", "early")
		failBatch(t, s, []string{"early"})
		before := nextMilli(t)
		enqueueBlocking(t, s, "a", "a1", "a2")
		failBatch(t, s, []string{"a1"})
		after := nextMilli(t)
		enqueueOrdered(t, s, "", "late")
		failBatch(t, s, []string{"late"}) // a2 waits behind a1
		check := func(q dedup.EventQuery, want ...string) {
			t.Helper()
			q.State = dedup.Failed
			if got := eventKeys(listAll(t, s, q, 1)); !slices.Equal(got, want) {
				t.Errorf("Events(failed, since %s, until %s) = %v, want %v", q.Since, q.Until, got, want)
			}
		}
		check(dedup.EventQuery{}, "a1", "early", "late")
		check(dedup.EventQuery{Since: before, Until: after}, "a1")
		check(dedup.EventQuery{Since: after}, "late")
		check(dedup.EventQuery{Until: before}, "early")
		check(dedup.EventQuery{Since: after.Add(time.Hour)})
		for _, ev := range listAll(t, s, dedup.EventQuery{State: dedup.Failed, KeyPrefix: "a1"}, 10) {
			if since := ev.Record.Since; since.Before(before.Add(-time.Millisecond)) || !since.Before(after) {
				t.Errorf("the blocking dead letter failed at %s, want between %s and %s", since, before, after)
			}
		}
	}},
	{"ordered: forgetting a head that is held lets the next go", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		enqueueOrdered(t, s, "a", "a1", "a2")
		takeOnly(t, s, "a1")
		if had, err := s.Forget(ctx, "a1"); err != nil || !had {
			t.Fatalf("Forget = %v, %v", had, err)
		}
		takeOnly(t, s, "a2")
	}},
}

// enqueueOrdered enqueues Request under each key in turn, with the order
// key orderKey (none if empty), skipping on a dead letter.
func enqueueOrdered(t *testing.T, s dedup.Queue, orderKey string, keys ...string) {
	t.Helper()
	enqueueWithOrder(t, s, orderKey, false, keys)
}

// enqueueBlocking is enqueueOrdered with OrderBlock.
func enqueueBlocking(t *testing.T, s dedup.Queue, orderKey string, keys ...string) {
	t.Helper()
	enqueueWithOrder(t, s, orderKey, true, keys)
}

func enqueueWithOrder(t *testing.T, s dedup.Queue, orderKey string, block bool, keys []string) {
	t.Helper()
	req := Request
	req.OrderKey, req.OrderBlock = orderKey, block
	for _, key := range keys {
		won, rec, err := s.Enqueue(context.Background(), key, req, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !won {
			t.Fatalf("Enqueue %s: taken (%v), want free", key, rec.State)
		}
	}
}

// takeKeys takes every due delivery, leased for Lease, and returns their
// sorted keys.
func takeKeys(t *testing.T, s dedup.Queue) []string {
	t.Helper()
	return keysOf(Take(t, s, 100, Lease))
}

// takeOnly takes every due delivery, failing the test unless it is key's
// alone.
func takeOnly(t *testing.T, s dedup.Queue, key string) dedup.Delivery {
	t.Helper()
	ds := Take(t, s, 100, Lease)
	if len(ds) != 1 || ds[0].Claim.Key != key {
		t.Fatalf("Take = %v, want %s alone", keysOf(ds), key)
	}
	return ds[0]
}

func succeed(t *testing.T, s dedup.Queue, d dedup.Delivery) {
	t.Helper()
	if err := s.Succeed(context.Background(), d, Replayed, Keep); err != nil {
		t.Fatalf("Succeed %s: %v", d.Claim.Key, err)
	}
}

func fail(t *testing.T, s dedup.Queue, d dedup.Delivery) {
	t.Helper()
	if err := s.Fail(context.Background(), d, 500, "the app answered 500", Keep); err != nil {
		t.Fatalf("Fail %s: %v", d.Claim.Key, err)
	}
}

// checkBlockedBy checks that key is queued, with no next attempt of its
// own while it waits behind head (none: key is due).
func checkBlockedBy(t *testing.T, s dedup.Store, key, head string) {
	t.Helper()
	rec := MustLookup(t, s, key)
	if rec.State != dedup.Queued || rec.Delivery.BlockedBy != head || (head != "") != rec.Delivery.NextAttemptAt.IsZero() {
		t.Errorf("%s: %v, blocked by %q, next attempt %s; want queued, blocked by %q", key, rec.State, rec.Delivery.BlockedBy, rec.Delivery.NextAttemptAt, head)
	}
}
