package storetest

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// deliveryCases: what a delivery goes through, taken from its lane,
// leased, extended, and settled: succeeded, retried, or taken over once its
// lease runs out.
var deliveryCases = []queueCase{
	{"take and succeed", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		before := time.Now()
		MustEnqueue(t, s, "k")
		after := time.Now()
		rec := MustLookup(t, s, "k")
		if rec.State != dedup.Queued || rec.Delivery.Attempts != 0 || rec.Delivery.LastStatus != 0 || rec.Delivery.LastError != "" {
			t.Errorf("just enqueued: %+v, want queued with no attempts", rec)
		}
		CheckBetween(t, "Since", rec.Since, before, after)
		CheckBetween(t, "NextAttemptAt", rec.Delivery.NextAttemptAt, before, after)

		d := TakeOne(t, s, Lease)
		if d.Claim.Key != "k" || d.Attempt != 1 || !reflect.DeepEqual(d.Request, Request) {
			t.Errorf("Take = key %q, attempt %d, request %+v; want k, 1, %+v", d.Claim.Key, d.Attempt, d.Request, Request)
		}
		CheckBetween(t, "AcceptedAt", d.AcceptedAt, before, after)
		if rec := MustLookup(t, s, "k"); rec.State != dedup.Delivering || rec.Delivery.Attempts != 1 || !rec.Delivery.NextAttemptAt.IsZero() {
			t.Errorf("taken: %+v, want delivering, attempt 1, no next attempt", rec)
		}
		if ds := Take(t, s, 10, Lease); len(ds) != 0 {
			t.Errorf("a held delivery was handed out again: %d", len(ds))
		}
		before = time.Now()
		if err := s.Succeed(ctx, d, Replayed, Keep); err != nil {
			t.Fatal(err)
		}
		after = time.Now()
		rec = MustLookup(t, s, "k")
		checkCompleted(t, rec, Replayed, before, after, Keep)
		if rec.Delivery.Attempts != 1 {
			t.Errorf("completed after %d attempts, want 1", rec.Delivery.Attempts)
		}
		if won, rec, err := s.Enqueue(ctx, "k", Request, 0); err != nil || won || rec.State != dedup.Completed {
			t.Errorf("Enqueue of a delivered key = %v, %v, %v; want a loss to completed", won, rec.State, err)
		}
		if _, rec, _ := s.Claim(ctx, "k", Lease); rec.State != dedup.Completed {
			t.Errorf("sync Claim of a delivered key saw %v, want completed", rec.State)
		}
		// The holder writing its outcome again (its first answer lost to
		// a timeout, though the store had taken it) is told it is done,
		// not that another worker took the event over.
		if err := s.Succeed(ctx, d, Replayed, Keep); err != nil {
			t.Errorf("the holder's second Succeed = %v, want nil", err)
		}
		if rec := MustLookup(t, s, "k"); rec.State != dedup.Completed || rec.Delivery.Attempts != 1 {
			t.Errorf("after the second Succeed: %v after %d attempts, want completed after 1", rec.State, rec.Delivery.Attempts)
		}
		stranger := d
		stranger.Claim.Token = hex.EncodeToString(make([]byte, 16))
		if err := s.Succeed(ctx, stranger, Replayed, Keep); !errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("a stranger's Succeed of a delivered event = %v, want ErrNotOwner", err)
		}
		if ds := Take(t, s, 10, Lease); len(ds) != 0 {
			t.Errorf("a delivered event was handed out again")
		}
	}},
	{"requests round trip", func(t *testing.T, s queueStore, _ func() queueStore) {
		want := map[string]dedup.Request{}
		for i, r := range Requests {
			key := fmt.Sprint("k", i)
			want[key] = r
			if won, _, err := s.Enqueue(context.Background(), key, r, 0); err != nil || !won {
				t.Fatalf("Enqueue %s = %v, %v", key, won, err)
			}
		}
		got := map[string]dedup.Request{}
		for _, d := range Take(t, s, 10, Lease) {
			got[d.Claim.Key] = d.Request
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("taken requests %+v, want %+v", got, want)
		}
	}},
	{"take with nothing due", func(t *testing.T, s queueStore, _ func() queueStore) {
		if ds := Take(t, s, 10, Lease); len(ds) != 0 {
			t.Errorf("Take on an empty queue = %d deliveries", len(ds))
		}
		MustEnqueue(t, s, "a")
		MustEnqueue(t, s, "b")
		MustEnqueue(t, s, "c")
		if ds := Take(t, s, 2, Lease); len(ds) != 2 {
			t.Errorf("Take(2) = %d deliveries, want 2", len(ds))
		}
		if ds := Take(t, s, 2, Lease); len(ds) != 1 {
			t.Errorf("then Take(2) = %d deliveries, want the 1 left", len(ds))
		}
	}},
	{"retry scheduling", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		MustEnqueue(t, s, "later")
		MustEnqueue(t, s, "now")
		byKey := map[string]dedup.Delivery{}
		for _, d := range Take(t, s, 10, Lease) {
			byKey[d.Claim.Key] = d
		}
		next := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		if err := s.Retry(ctx, byKey["later"], next, 503, "app answered 503"); err != nil {
			t.Fatal(err)
		}
		rec := MustLookup(t, s, "later")
		want := dedup.DeliveryStatus{Attempts: 1, LastStatus: 503, LastError: "app answered 503", NextAttemptAt: next}
		if rec.State != dedup.Queued || !reflect.DeepEqual(rec.Delivery, want) {
			t.Errorf("retrying: %v %+v, want queued %+v", rec.State, rec.Delivery, want)
		}
		if err := s.Retry(ctx, byKey["now"], time.Now().Add(-time.Second), 0, "connection refused"); err != nil {
			t.Fatal(err)
		}
		ds := Take(t, s, 10, Lease)
		if len(ds) != 1 || ds[0].Claim.Key != "now" || ds[0].Attempt != 2 {
			t.Fatalf("Take after the retries = %+v, want only the due one, attempt 2", ds)
		}
		if ds[0].Claim.Token == byKey["now"].Claim.Token {
			t.Error("the second attempt kept the first one's token")
		}
		if rec := MustLookup(t, s, "now"); rec.State != dedup.Delivering || rec.Delivery.Attempts != 2 || rec.Delivery.LastError != "connection refused" {
			t.Errorf("second attempt: %v %+v", rec.State, rec.Delivery)
		}
		for name, call := range map[string]func() error{
			"Succeed": func() error { return s.Succeed(ctx, byKey["now"], Replayed, Keep) },
			"Retry":   func() error { return s.Retry(ctx, byKey["now"], time.Now(), 500, "x") },
			"Fail":    func() error { return s.Fail(ctx, byKey["now"], 500, "x", Keep) },
		} {
			if err := call(); !errors.Is(err, dedup.ErrNotOwner) {
				t.Errorf("%s with the first attempt's delivery = %v, want ErrNotOwner", name, err)
			}
		}
		if err := s.Retry(ctx, byKey["later"], next, 503, "again"); !errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("Retry of a delivery already given back = %v, want ErrNotOwner", err)
		}
	}},
	{"takeover after the lease", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		MustEnqueue(t, s, "k")
		first := TakeOne(t, s, Short)
		second := takenOver(t, s)
		if second.Claim.Key != "k" || second.Attempt != 2 || second.Claim.Token == first.Claim.Token {
			t.Errorf("takeover = %q attempt %d, want k attempt 2 with a new token", second.Claim.Key, second.Attempt)
		}
		for name, call := range map[string]func() error{
			"Succeed": func() error { return s.Succeed(ctx, first, Replayed, Keep) },
			"Retry":   func() error { return s.Retry(ctx, first, time.Now(), 500, "x") },
			"Fail":    func() error { return s.Fail(ctx, first, 500, "x", Keep) },
		} {
			if err := call(); !errors.Is(err, dedup.ErrNotOwner) {
				t.Errorf("the first holder's %s = %v, want ErrNotOwner", name, err)
			}
		}
		// The second holder's lease may have run out by now too, but
		// while no one took it over, the delivery is still its own.
		if err := s.Succeed(ctx, second, Replayed, Keep); err != nil {
			t.Errorf("the second holder's Succeed: %v", err)
		}
	}},
	{"lookup of an overdue delivery", func(t *testing.T, s queueStore, _ func() queueStore) {
		MustEnqueue(t, s, "k")
		TakeOne(t, s, Short)
		Eventually(t, "the lease to run out", func() bool { return MustLookup(t, s, "k").State == dedup.Queued })
		if rec := MustLookup(t, s, "k"); rec.Delivery.Attempts != 1 || rec.Delivery.NextAttemptAt.IsZero() {
			t.Errorf("overdue: %+v, want 1 attempt and when it became due", rec.Delivery)
		}
	}},
	{"lanes", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		// Route a's events queued ahead of everything else, as a route
		// whose app hangs leaves them: b's lane still finds its own.
		for i := range 30 {
			MustEnqueueOn(t, s, fmt.Sprint("a", i), "a")
		}
		MustEnqueueOn(t, s, "b", "b")
		MustEnqueueOn(t, s, "c", "c")
		MustEnqueueOn(t, s, "none", "")
		if ds := TakeFrom(t, s, dedup.RouteLane("b"), 10, Lease); len(ds) != 1 || ds[0].Claim.Key != "b" || ds[0].Request.Route != "b" {
			t.Errorf("Take from b's lane behind 30 of a's = %+v, want b's event only", keysOf(ds))
		}
		rest := keysOf(TakeFrom(t, s, dedup.RestLane("a", "b"), 10, Lease))
		if want := []string{"c", "none"}; !reflect.DeepEqual(rest, want) {
			t.Errorf("Take from the rest lane = %v, want %v (a route without a lane, and the empty route)", rest, want)
		}
		as := TakeFrom(t, s, dedup.RouteLane("a"), 10, Lease)
		if len(as) != 10 {
			t.Fatalf("Take(10) from a's lane = %d deliveries, want 10", len(as))
		}
		for _, d := range as {
			if d.Request.Route != "a" {
				t.Errorf("a's lane handed out %s of route %q", d.Claim.Key, d.Request.Route)
			}
		}
		// A retry comes back in its own lane, and so does a requeued dead
		// letter.
		if err := s.Retry(ctx, as[0], time.Now().Add(-time.Second), 500, "x"); err != nil {
			t.Fatal(err)
		}
		if err := s.Fail(ctx, as[1], 500, "x", Keep); err != nil {
			t.Fatal(err)
		}
		if err := s.Requeue(ctx, as[1].Claim.Key); err != nil {
			t.Fatal(err)
		}
		if ds := TakeFrom(t, s, dedup.RestLane("a"), 10, Lease); len(ds) != 0 {
			t.Errorf("the rest lane without a's handed out %v", keysOf(ds))
		}
		if ds := TakeFrom(t, s, dedup.RouteLane("b"), 10, Lease); len(ds) != 0 {
			t.Errorf("b's lane handed out %v", keysOf(ds))
		}
		if ds := Take(t, s, 100, Lease); len(ds) != 22 {
			t.Errorf("Take from every lane = %d deliveries, want the 20 of a's never taken, its retry and its requeued dead letter", len(ds))
		}
	}},
	{"extend", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		MustEnqueue(t, s, "k")
		d := TakeOne(t, s, Short)
		start := time.Now()
		if err := s.Extend(ctx, d, Lease); err != nil {
			t.Fatal(err)
		}
		// Past the first lease, with no one taking the delivery over.
		for time.Since(start) < 3*Short {
			if ds := Take(t, s, 10, Short); len(ds) != 0 {
				t.Fatalf("an extended lease was taken over after %s", time.Since(start))
			}
			time.Sleep(Short / 3)
		}
		if rec := MustLookup(t, s, "k"); rec.State != dedup.Delivering {
			t.Errorf("an extended delivery is %v, want delivering", rec.State)
		}
		if err := s.Succeed(ctx, d, Replayed, Keep); err != nil {
			t.Errorf("Succeed after Extend: %v", err)
		}
		if err := s.Extend(ctx, d, Lease); !errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("Extend of a completed delivery = %v, want ErrNotOwner", err)
		}

		MustEnqueue(t, s, "lost")
		first := TakeOne(t, s, Short)
		second := takenOver(t, s)
		if err := s.Extend(ctx, first, Lease); !errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("the first holder's Extend after a takeover = %v, want ErrNotOwner", err)
		}
		if err := s.Extend(ctx, second, Lease); err != nil {
			t.Errorf("the second holder's Extend: %v", err)
		}
		if _, err := s.Forget(ctx, "lost"); err != nil {
			t.Fatal(err)
		}
		if err := s.Extend(ctx, second, Lease); !errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("Extend of a forgotten delivery = %v, want ErrNotOwner", err)
		}
	}},
}
