package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// edgeCases: a queue across a shutdown, under a cancelled context, and
// given bad arguments.
var edgeCases = []queueCase{
	{"shutdown leaves work queued", func(t *testing.T, s queueStore, again func() queueStore) {
		MustEnqueue(t, s, "taken")
		MustEnqueue(t, s, "waiting")
		ds := Take(t, s, 1, Short)
		if len(ds) != 1 {
			t.Fatalf("Take(1) = %d", len(ds))
		}
		held := ds[0]
		next := again()
		other := "waiting"
		if held.Claim.Key == "waiting" {
			other = "taken"
		}
		if rec := MustLookup(t, next, other); rec.State != dedup.Queued {
			t.Errorf("after the restart the untaken event is %v, want queued", rec.State)
		}
		got := map[string]int{}
		Eventually(t, "the new instance to take both events", func() bool {
			for _, d := range Take(t, next, 10, Short) {
				if _, seen := got[d.Claim.Key]; !seen {
					got[d.Claim.Key] = d.Attempt
				}
			}
			return len(got) == 2
		})
		if want := map[string]int{held.Claim.Key: 2, other: 1}; !reflect.DeepEqual(got, want) {
			t.Errorf("attempts after the restart %v, want %v", got, want)
		}
	}},
	{"cancelled context", func(t *testing.T, s queueStore, _ func() queueStore) {
		MustEnqueue(t, s, "k")
		d := TakeOne(t, s, Lease)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for name, call := range map[string]func() error{
			"Enqueue":     func() error { _, _, err := s.Enqueue(ctx, "free", Request, 0); return err },
			"Take":        func() error { _, err := s.Take(ctx, dedup.AllRoutes, 1, Lease); return err },
			"Extend":      func() error { return s.Extend(ctx, d, Lease) },
			"Succeed":     func() error { return s.Succeed(ctx, d, Replayed, Keep) },
			"Retry":       func() error { return s.Retry(ctx, d, time.Now(), 500, "x") },
			"Fail":        func() error { return s.Fail(ctx, d, 500, "x", Keep) },
			"Requeue":     func() error { return s.Requeue(ctx, "k") },
			"DeadLetters": func() error { _, _, err := s.DeadLetters(ctx, "", 1); return err },
			"Stats":       func() error { _, err := s.Stats(ctx); return err },
		} {
			if err := call(); !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a cancelled context = %v, want context.Canceled", name, err)
			}
		}
		if rec := MustLookup(t, s, "k"); rec.State != dedup.Delivering {
			t.Errorf("after the cancelled calls: %v, want delivering", rec.State)
		}
		if _, err := s.Lookup(context.Background(), "free"); !errors.Is(err, dedup.ErrNotFound) {
			t.Errorf("a cancelled Enqueue stored the key: %v", err)
		}
	}},
	{"bad arguments", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		MustEnqueue(t, s, "k")
		if _, err := s.Take(ctx, dedup.AllRoutes, 1, 0); err == nil {
			t.Error("Take with a zero Lease succeeded")
		}
		if ds := Take(t, s, 0, Lease); len(ds) != 0 {
			t.Errorf("Take(0) = %d deliveries", len(ds))
		}
		d := TakeOne(t, s, Lease)
		if err := s.Extend(ctx, d, 0); err == nil || errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("Extend with a zero lease = %v, want an argument error", err)
		}
		if err := s.Succeed(ctx, d, Replayed, 0); err == nil || errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("Succeed with a zero ttl = %v, want an argument error", err)
		}
		if err := s.Succeed(ctx, d, dedup.Result{Status: 70000}, Keep); err == nil || errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("Succeed with status 70000 = %v, want an argument error", err)
		}
		if err := s.Fail(ctx, d, 500, "x", 0); err == nil || errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("Fail with a zero keep = %v, want an argument error", err)
		}
		if rec := MustLookup(t, s, "k"); rec.State != dedup.Delivering {
			t.Errorf("after the rejected calls: %v, want delivering", rec.State)
		}
		if _, _, err := s.DeadLetters(ctx, "not a cursor", 10); !errors.Is(err, dedup.ErrBadCursor) {
			t.Errorf("DeadLetters with a made-up cursor = %v, want dedup.ErrBadCursor", err)
		}
	}},
}
