package storetest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// MustEnqueue enqueues Request under key, failing the test unless the
// enqueue is won.
func MustEnqueue(t *testing.T, s dedup.Queue, key string) {
	t.Helper()
	won, rec, err := s.Enqueue(context.Background(), key, Request, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !won {
		t.Fatalf("Enqueue %s: taken (%v), want free", key, rec.State)
	}
}

// MustEnqueueOn enqueues Request, accepted on route, under key, failing
// the test unless the enqueue is won.
func MustEnqueueOn(t *testing.T, s dedup.Queue, key, route string) {
	t.Helper()
	req := Request
	req.Route = route
	won, rec, err := s.Enqueue(context.Background(), key, req, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !won {
		t.Fatalf("Enqueue %s: taken (%v), want free", key, rec.State)
	}
}

// Take takes up to n due deliveries of any route, failing the test on an
// error.
func Take(t *testing.T, s dedup.Queue, n int, lease time.Duration) []dedup.Delivery {
	t.Helper()
	return TakeFrom(t, s, dedup.AllRoutes, n, lease)
}

// TakeFrom takes up to n due deliveries of lane, failing the test on an
// error.
func TakeFrom(t *testing.T, s dedup.Queue, lane dedup.Lane, n int, lease time.Duration) []dedup.Delivery {
	t.Helper()
	ds, err := s.Take(context.Background(), lane, n, lease)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// takenOver waits until the one delivery taken with the lease Short has
// been held that long, and returns it as taken over. Every taker passes
// the same lease (LEASE_TTL): Redis takes a delivery over once it has
// been held for the taker's.
func takenOver(t *testing.T, s dedup.Queue) dedup.Delivery {
	t.Helper()
	var d dedup.Delivery
	Eventually(t, "the expired lease to be taken over", func() bool {
		ds := Take(t, s, 10, Short)
		if len(ds) == 1 {
			d = ds[0]
		}
		return len(ds) == 1
	})
	return d
}

// keysOf is the sorted keys of ds.
func keysOf(ds []dedup.Delivery) []string {
	keys := make([]string, len(ds))
	for i, d := range ds {
		keys[i] = d.Claim.Key
	}
	slices.Sort(keys)
	return keys
}

// TakeOne takes the one delivery due, failing the test unless there is
// exactly one.
func TakeOne(t *testing.T, s dedup.Queue, lease time.Duration) dedup.Delivery {
	t.Helper()
	ds := Take(t, s, 1, lease)
	if len(ds) != 1 {
		t.Fatalf("Take(1) = %d deliveries, want 1", len(ds))
	}
	return ds[0]
}

// DeadLetter queues Request under each key and dead-letters it, as a
// worker whose last attempt failed would: for the tests of what reads the
// dead letters (the admin API, the CLI).
func DeadLetter(t *testing.T, s dedup.Queue, keys ...string) {
	t.Helper()
	for _, key := range keys {
		MustEnqueue(t, s, key)
	}
	ds := Take(t, s, len(keys), Lease)
	if len(ds) != len(keys) {
		t.Fatalf("Take(%d) = %d deliveries, want all", len(keys), len(ds))
	}
	for _, d := range ds {
		if err := s.Fail(context.Background(), d, 500, "the app answered 500", Keep); err != nil {
			t.Fatal(err)
		}
	}
}

// Stats returns the queue's stats, failing the test on an error.
func Stats(t *testing.T, s dedup.Queue) dedup.QueueStats {
	t.Helper()
	st, err := s.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// CheckBetween checks that got, kept with millisecond precision, lies
// between before and after.
func CheckBetween(t *testing.T, what string, got, before, after time.Time) {
	t.Helper()
	if got.Before(before.Truncate(time.Millisecond)) || got.After(after) {
		t.Errorf("%s = %s, want between %s and %s", what, got, before, after)
	}
}

// CheckUnreadable checks what a queue does with a stored request it cannot
// read (written by something else, or damaged): of the events "damaged",
// whose request the caller damaged, and "fine", both enqueued with
// MustEnqueue, Take hands out the fine one and dead-letters the other,
// saying why.
func CheckUnreadable(t *testing.T, b dedup.Backend) {
	t.Helper()
	ds := Take(t, b.Queue, 10, Lease)
	if len(ds) != 1 || ds[0].Claim.Key != "fine" {
		t.Errorf("Take = %+v, want only the readable event", ds)
	}
	rec := MustLookup(t, b.Store, "damaged")
	if rec.State != dedup.Failed || !strings.Contains(rec.Delivery.LastError, "cannot be read") {
		t.Errorf("the damaged event: %v %+v, want failed, saying why", rec.State, rec.Delivery)
	}
}
