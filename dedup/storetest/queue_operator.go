package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// operatorCases: what an operator sees of the queue and does to it: dead
// letters, requeue, Stats, forget.
var operatorCases = []queueCase{
	{"fail and dead letters", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		const n = 5
		for i := range n {
			MustEnqueue(t, s, fmt.Sprint("k", i))
		}
		before := time.Now()
		for _, d := range Take(t, s, n, Lease) {
			if err := s.Fail(ctx, d, 500, "gave up on "+d.Claim.Key, Keep); err != nil {
				t.Fatal(err)
			}
		}
		after := time.Now()
		rec := MustLookup(t, s, "k0")
		if rec.State != dedup.Failed || rec.Delivery.Attempts != 1 || rec.Delivery.LastStatus != 500 || rec.Delivery.LastError != "gave up on k0" {
			t.Errorf("failed: %v %+v", rec.State, rec.Delivery)
		}
		if rec.TTL <= 0 || rec.TTL > Keep {
			t.Errorf("failed record's TTL %s, want in (0, %s]", rec.TTL, Keep)
		}
		seen := map[string]bool{}
		cursor, pages := "", 0
		for {
			page, next, err := s.DeadLetters(ctx, cursor, 2)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(page) > 2 {
				t.Fatalf("page of %d, limit 2", len(page))
			}
			for _, dl := range page {
				if seen[dl.Key] {
					t.Errorf("%s listed twice", dl.Key)
				}
				seen[dl.Key] = true
				if dl.Attempts != 1 || dl.LastStatus != 500 || dl.LastError != "gave up on "+dl.Key {
					t.Errorf("dead letter %+v", dl)
				}
				CheckBetween(t, "FailedAt", dl.FailedAt, before, after)
			}
			if next == "" {
				break
			}
			if pages > n {
				t.Fatal("the cursor never ends")
			}
			cursor = next
		}
		if len(seen) != n || pages != 3 {
			t.Errorf("listed %d dead letters in %d pages, want %d in 3", len(seen), pages, n)
		}
		if st := Stats(t, s); st.DeadLetters != n || st.Depth != 0 {
			t.Errorf("Stats = %+v, want %d dead letters and nothing queued", st, n)
		}
		if won, rec, err := s.Enqueue(ctx, "k0", Request, 0); err != nil || won || rec.State != dedup.Failed {
			t.Errorf("Enqueue of a dead letter = %v, %v, %v; want a loss to failed", won, rec.State, err)
		}
		if ds := Take(t, s, 10, Lease); len(ds) != 0 {
			t.Errorf("dead letters were handed out: %d", len(ds))
		}
	}},
	{"dead letters expire", func(t *testing.T, s queueStore, _ func() queueStore) {
		MustEnqueue(t, s, "k")
		if err := s.Fail(context.Background(), TakeOne(t, s, Lease), 0, "timeout", Short); err != nil {
			t.Fatal(err)
		}
		Eventually(t, "the dead letter to expire", func() bool {
			_, err := s.Lookup(context.Background(), "k")
			return errors.Is(err, dedup.ErrNotFound)
		})
		if dls, _, err := s.DeadLetters(context.Background(), "", 10); err != nil || len(dls) != 0 {
			t.Errorf("DeadLetters after expiry = %+v, %v", dls, err)
		}
		if st := Stats(t, s); st.DeadLetters != 0 {
			t.Errorf("Stats after expiry = %+v, want no dead letters", st)
		}
		MustEnqueue(t, s, "k")
	}},
	{"requeue", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		MustEnqueue(t, s, "k")
		if err := s.Requeue(ctx, "k"); !errors.Is(err, dedup.ErrNotFailed) {
			t.Errorf("Requeue of a queued event = %v, want ErrNotFailed", err)
		}
		d := TakeOne(t, s, Lease)
		if err := s.Requeue(ctx, "k"); !errors.Is(err, dedup.ErrNotFailed) {
			t.Errorf("Requeue of a delivering event = %v, want ErrNotFailed", err)
		}
		if err := s.Fail(ctx, d, 500, "boom", Keep); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		if err := s.Requeue(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		rec := MustLookup(t, s, "k")
		if rec.State != dedup.Queued || rec.Delivery.Attempts != 0 || rec.TTL != 0 {
			t.Errorf("requeued: %v %+v TTL %s, want queued, no attempts, no expiry", rec.State, rec.Delivery, rec.TTL)
		}
		CheckBetween(t, "NextAttemptAt", rec.Delivery.NextAttemptAt, before, after)
		if dls, _, _ := s.DeadLetters(ctx, "", 10); len(dls) != 0 {
			t.Errorf("a requeued event is still a dead letter: %+v", dls)
		}
		again := TakeOne(t, s, Lease)
		if again.Attempt != 1 || !reflect.DeepEqual(again.Request, Request) {
			t.Errorf("after Requeue: attempt %d, request %+v; want a first attempt of the same request", again.Attempt, again.Request)
		}
		CheckBetween(t, "AcceptedAt", again.AcceptedAt, before, after)
		if err := s.Requeue(ctx, "unknown"); !errors.Is(err, dedup.ErrNotFound) {
			t.Errorf("Requeue of an unknown key = %v, want ErrNotFound", err)
		}
		c, _ := MustClaim(t, s, "sync", Lease)
		if err := s.Requeue(ctx, "sync"); !errors.Is(err, dedup.ErrNotFailed) {
			t.Errorf("Requeue of an in-flight sync key = %v, want ErrNotFailed", err)
		}
		if err := s.Complete(ctx, c, Replayed, Keep); err != nil {
			t.Fatal(err)
		}
		if err := s.Requeue(ctx, "sync"); !errors.Is(err, dedup.ErrNotFailed) {
			t.Errorf("Requeue of a completed sync key = %v, want ErrNotFailed", err)
		}
	}},
	{"a cursor holds after the dead letters it passed are requeued", func(t *testing.T, s queueStore, _ func() queueStore) {
		// A bulk retry (the admin API's) pages through the dead letters
		// with the cursor while it requeues them, so they leave the
		// listing behind the cursor.
		ctx := context.Background()
		DeadLetter(t, s, "k0", "k1", "k2")
		first, next, err := s.DeadLetters(ctx, "", 1)
		if err != nil || len(first) != 1 || next == "" {
			t.Fatalf("first page of 1: %+v %q %v, want one and a cursor", first, next, err)
		}
		if err := s.Requeue(ctx, first[0].Key); err != nil {
			t.Fatal(err)
		}
		rest, next, err := s.DeadLetters(ctx, next, 10)
		if err != nil || len(rest) != 2 || next != "" {
			t.Fatalf("from the cursor after requeueing what it passed: %+v %q %v, want the other 2", rest, next, err)
		}
		for _, dl := range rest {
			if dl.Key == first[0].Key {
				t.Errorf("%s listed again after its requeue", dl.Key)
			}
		}
	}},
	{"Stats", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		if st := Stats(t, s); !reflect.DeepEqual(st, dedup.QueueStats{}) {
			t.Errorf("empty queue: %+v", st)
		}
		start := time.Now()
		for _, k := range []string{"a", "b", "c"} {
			MustEnqueue(t, s, k)
		}
		st := Stats(t, s)
		if st.Depth != 3 || st.OldestAge < 0 || st.OldestAge > time.Since(start)+time.Millisecond {
			t.Errorf("3 queued: %+v, want depth 3 and an oldest age within the test's time", st)
		}
		d := TakeOne(t, s, Lease)
		if st := Stats(t, s); st.Depth != 2 {
			t.Errorf("one taken: depth %d, want 2", st.Depth)
		}
		if err := s.Retry(ctx, d, time.Now().Add(time.Hour), 500, "x"); err != nil {
			t.Fatal(err)
		}
		if st := Stats(t, s); st.Depth != 3 {
			t.Errorf("one retrying: depth %d, want 3", st.Depth)
		}
		d = TakeOne(t, s, Lease)
		if err := s.Fail(ctx, d, 500, "x", Keep); err != nil {
			t.Fatal(err)
		}
		if st := Stats(t, s); st.Depth != 2 || st.DeadLetters != 1 {
			t.Errorf("one failed: %+v, want depth 2 and 1 dead letter", st)
		}
		for _, d := range Take(t, s, 10, Lease) {
			if err := s.Succeed(ctx, d, Replayed, Keep); err != nil {
				t.Fatal(err)
			}
		}
		if st := Stats(t, s); st.Depth != 1 || st.DeadLetters != 1 {
			t.Errorf("the due ones delivered: %+v, want the retrying one and the dead letter", st)
		}
	}},
	{"Stats by route", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		check := func(what string, want map[string]int) {
			t.Helper()
			st := Stats(t, s)
			if !reflect.DeepEqual(st.Routes, want) {
				t.Errorf("%s: depth by route %v, want %v", what, st.Routes, want)
			}
			sum := 0
			for _, n := range st.Routes {
				sum += n
			}
			if sum != st.Depth {
				t.Errorf("%s: depth by route sums to %d, the depth is %d", what, sum, st.Depth)
			}
		}
		MustEnqueueOn(t, s, "a1", "/a")
		MustEnqueueOn(t, s, "a2", "/a")
		MustEnqueueOn(t, s, "b1", "/b")
		MustEnqueueOn(t, s, "none", "")
		check("queued", map[string]int{"/a": 2, "/b": 1, "": 1})
		ds, err := s.Take(ctx, dedup.RouteLane("/a"), 1, Lease)
		if err != nil || len(ds) != 1 {
			t.Fatalf("Take of /a's lane: %v, %v", ds, err)
		}
		check("one of /a delivering", map[string]int{"/a": 1, "/b": 1, "": 1})
		if err := s.Retry(ctx, ds[0], time.Now().Add(time.Hour), 500, "x"); err != nil {
			t.Fatal(err)
		}
		check("one of /a retrying", map[string]int{"/a": 2, "/b": 1, "": 1})
		ds, err = s.Take(ctx, dedup.RouteLane("/b"), 1, Lease)
		if err != nil || len(ds) != 1 {
			t.Fatalf("Take of /b's lane: %v, %v", ds, err)
		}
		if err := s.Fail(ctx, ds[0], 500, "x", Keep); err != nil {
			t.Fatal(err)
		}
		check("/b's dead-lettered", map[string]int{"/a": 2, "": 1})
		ds, err = s.Take(ctx, dedup.RestLane("/a", "/b"), 1, Lease)
		if err != nil || len(ds) != 1 {
			t.Fatalf("Take of the rest lane: %v, %v", ds, err)
		}
		if err := s.Succeed(ctx, ds[0], Replayed, Keep); err != nil {
			t.Fatal(err)
		}
		check("the route-less one delivered", map[string]int{"/a": 2})
	}},
	{"forget removes a queued event from the queue", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		forget := func(key string) {
			t.Helper()
			if had, err := s.Forget(ctx, key); err != nil || !had {
				t.Fatalf("Forget %s = %v, %v; want true", key, had, err)
			}
			if _, err := s.Lookup(ctx, key); !errors.Is(err, dedup.ErrNotFound) {
				t.Errorf("Lookup after Forget = %v, want ErrNotFound", err)
			}
		}
		MustEnqueue(t, s, "queued")
		MustEnqueue(t, s, "delivering")
		MustEnqueue(t, s, "retrying")
		MustEnqueue(t, s, "failed")
		forget("queued")
		ds := map[string]dedup.Delivery{}
		for _, d := range Take(t, s, 10, Lease) {
			ds[d.Claim.Key] = d
		}
		if len(ds) != 3 {
			t.Fatalf("Take after forgetting one of 4 = %d deliveries, want 3", len(ds))
		}
		if err := s.Retry(ctx, ds["retrying"], time.Now().Add(-time.Second), 500, "x"); err != nil {
			t.Fatal(err)
		}
		if err := s.Fail(ctx, ds["failed"], 500, "x", Keep); err != nil {
			t.Fatal(err)
		}
		forget("delivering")
		forget("retrying")
		forget("failed")
		if err := s.Succeed(ctx, ds["delivering"], Replayed, Keep); !errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("Succeed of a forgotten delivery = %v, want ErrNotOwner", err)
		}
		if got := Take(t, s, 10, Lease); len(got) != 0 {
			t.Errorf("forgotten events were handed out: %+v", got)
		}
		if st := Stats(t, s); !reflect.DeepEqual(st, dedup.QueueStats{}) {
			t.Errorf("Stats after forgetting everything = %+v", st)
		}
		if dls, _, _ := s.DeadLetters(ctx, "", 10); len(dls) != 0 {
			t.Errorf("a forgotten dead letter is listed: %+v", dls)
		}
		MustEnqueue(t, s, "queued")
		if d := TakeOne(t, s, Lease); d.Attempt != 1 {
			t.Errorf("an event enqueued again after Forget starts at attempt %d, want 1", d.Attempt)
		}
	}},
}
