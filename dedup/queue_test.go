package dedup

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// queueStore is what the queue conformance suite exercises: a store that
// keeps sync records and the async queue side by side.
type queueStore interface {
	store
	Queue
}

// openQueue opens an empty queue store for one case. again opens another
// instance on the same data, as a restarted process would (closing s first
// where two instances cannot share the data).
type openQueue func(t *testing.T) (s queueStore, again func() queueStore)

// queueReq is the request the cases enqueue.
var queueReq = testRequests[0]

// queueTests is the queue conformance suite. Each case gets a store of its
// own, so that Take sees only the case's events.
var queueTests = []struct {
	name string
	run  func(t *testing.T, s queueStore, again func() queueStore)
}{
	{"enqueue once under concurrent enqueues", func(t *testing.T, s queueStore, _ func() queueStore) {
		oneWinner(t, 32, "enqueues", Queued, func() (bool, Record, error) {
			return s.Enqueue(context.Background(), "k", queueReq)
		})
		if ds := take(t, s, 10, lease); len(ds) != 1 {
			t.Errorf("Take handed out %d deliveries, want the one event once", len(ds))
		}
	}},
	{"enqueue of a claimed or completed key loses", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		c, _ := mustClaim(t, s, "k", lease)
		if won, rec, err := s.Enqueue(ctx, "k", queueReq); err != nil || won || rec.State != InFlight {
			t.Errorf("Enqueue of an in-flight key = %v, %v, %v; want a loss to in-flight", won, rec.State, err)
		}
		if err := s.Complete(ctx, c, replayed, keep); err != nil {
			t.Fatal(err)
		}
		if won, rec, err := s.Enqueue(ctx, "k", queueReq); err != nil || won || rec.State != Completed || rec.Result.Status != replayed.Status {
			t.Errorf("Enqueue of a completed key = %v, %+v, %v; want a loss to the completed record", won, rec, err)
		}
		if ds := take(t, s, 10, lease); len(ds) != 0 {
			t.Errorf("a lost Enqueue queued %d deliveries", len(ds))
		}
	}},
	{"sync claim of a queued key loses", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		mustEnqueue(t, s, "k")
		c, rec, err := s.Claim(ctx, "k", lease)
		if err != nil || c != (Claim{}) || rec.State != Queued {
			t.Errorf("Claim of a queued key = %+v, %v, %v; want a loss to queued", c, rec.State, err)
		}
		d := takeOne(t, s, lease)
		if _, rec, _ := s.Claim(ctx, "k", lease); rec.State != Delivering {
			t.Errorf("Claim of a delivering key saw %v, want delivering", rec.State)
		}
		// A claim token of the queue does not complete or release the
		// record as if it were a sync claim's.
		if err := s.Release(ctx, d.Claim); !errors.Is(err, ErrNotOwner) {
			t.Errorf("Release with a delivery's claim = %v, want ErrNotOwner", err)
		}
		if err := s.Complete(ctx, d.Claim, replayed, keep); !errors.Is(err, ErrNotOwner) {
			t.Errorf("Complete with a delivery's claim = %v, want ErrNotOwner", err)
		}
		if rec := mustLookup(t, s, "k"); rec.State != Delivering {
			t.Errorf("after the sync calls: %v, want delivering", rec.State)
		}
	}},
	{"take and succeed", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		before := time.Now()
		mustEnqueue(t, s, "k")
		after := time.Now()
		rec := mustLookup(t, s, "k")
		if rec.State != Queued || rec.Delivery.Attempts != 0 || rec.Delivery.LastStatus != 0 || rec.Delivery.LastError != "" {
			t.Errorf("just enqueued: %+v, want queued with no attempts", rec)
		}
		checkBetween(t, "Since", rec.Since, before, after)
		checkBetween(t, "NextAttemptAt", rec.Delivery.NextAttemptAt, before, after)

		d := takeOne(t, s, lease)
		if d.Claim.Key != "k" || d.Attempt != 1 || !reflect.DeepEqual(d.Request, queueReq) {
			t.Errorf("Take = key %q, attempt %d, request %+v; want k, 1, %+v", d.Claim.Key, d.Attempt, d.Request, queueReq)
		}
		checkBetween(t, "AcceptedAt", d.AcceptedAt, before, after)
		if rec := mustLookup(t, s, "k"); rec.State != Delivering || rec.Delivery.Attempts != 1 || !rec.Delivery.NextAttemptAt.IsZero() {
			t.Errorf("taken: %+v, want delivering, attempt 1, no next attempt", rec)
		}
		if ds := take(t, s, 10, lease); len(ds) != 0 {
			t.Errorf("a held delivery was handed out again: %d", len(ds))
		}
		before = time.Now()
		if err := s.Succeed(ctx, d, replayed, keep); err != nil {
			t.Fatal(err)
		}
		after = time.Now()
		rec = mustLookup(t, s, "k")
		checkCompleted(t, rec, replayed, before, after, keep)
		if rec.Delivery.Attempts != 1 {
			t.Errorf("completed after %d attempts, want 1", rec.Delivery.Attempts)
		}
		if won, rec, err := s.Enqueue(ctx, "k", queueReq); err != nil || won || rec.State != Completed {
			t.Errorf("Enqueue of a delivered key = %v, %v, %v; want a loss to completed", won, rec.State, err)
		}
		if _, rec, _ := s.Claim(ctx, "k", lease); rec.State != Completed {
			t.Errorf("sync Claim of a delivered key saw %v, want completed", rec.State)
		}
		if err := s.Succeed(ctx, d, replayed, keep); !errors.Is(err, ErrNotOwner) {
			t.Errorf("second Succeed = %v, want ErrNotOwner", err)
		}
		if ds := take(t, s, 10, lease); len(ds) != 0 {
			t.Errorf("a delivered event was handed out again")
		}
	}},
	{"requests round trip", func(t *testing.T, s queueStore, _ func() queueStore) {
		want := map[string]Request{}
		for i, r := range testRequests {
			key := fmt.Sprint("k", i)
			want[key] = r
			if won, _, err := s.Enqueue(context.Background(), key, r); err != nil || !won {
				t.Fatalf("Enqueue %s = %v, %v", key, won, err)
			}
		}
		got := map[string]Request{}
		for _, d := range take(t, s, 10, lease) {
			got[d.Claim.Key] = d.Request
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("taken requests %+v, want %+v", got, want)
		}
	}},
	{"take with nothing due", func(t *testing.T, s queueStore, _ func() queueStore) {
		if ds := take(t, s, 10, lease); len(ds) != 0 {
			t.Errorf("Take on an empty queue = %d deliveries", len(ds))
		}
		mustEnqueue(t, s, "a")
		mustEnqueue(t, s, "b")
		mustEnqueue(t, s, "c")
		if ds := take(t, s, 2, lease); len(ds) != 2 {
			t.Errorf("Take(2) = %d deliveries, want 2", len(ds))
		}
		if ds := take(t, s, 2, lease); len(ds) != 1 {
			t.Errorf("then Take(2) = %d deliveries, want the 1 left", len(ds))
		}
	}},
	{"retry scheduling", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		mustEnqueue(t, s, "later")
		mustEnqueue(t, s, "now")
		byKey := map[string]Delivery{}
		for _, d := range take(t, s, 10, lease) {
			byKey[d.Claim.Key] = d
		}
		next := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		if err := s.Retry(ctx, byKey["later"], next, 503, "app answered 503"); err != nil {
			t.Fatal(err)
		}
		rec := mustLookup(t, s, "later")
		want := DeliveryStatus{Attempts: 1, LastStatus: 503, LastError: "app answered 503", NextAttemptAt: next}
		if rec.State != Queued || !reflect.DeepEqual(rec.Delivery, want) {
			t.Errorf("retrying: %v %+v, want queued %+v", rec.State, rec.Delivery, want)
		}
		if err := s.Retry(ctx, byKey["now"], time.Now().Add(-time.Second), 0, "connection refused"); err != nil {
			t.Fatal(err)
		}
		ds := take(t, s, 10, lease)
		if len(ds) != 1 || ds[0].Claim.Key != "now" || ds[0].Attempt != 2 {
			t.Fatalf("Take after the retries = %+v, want only the due one, attempt 2", ds)
		}
		if ds[0].Claim.Token == byKey["now"].Claim.Token {
			t.Error("the second attempt kept the first one's token")
		}
		if rec := mustLookup(t, s, "now"); rec.State != Delivering || rec.Delivery.Attempts != 2 || rec.Delivery.LastError != "connection refused" {
			t.Errorf("second attempt: %v %+v", rec.State, rec.Delivery)
		}
		for name, call := range map[string]func() error{
			"Succeed": func() error { return s.Succeed(ctx, byKey["now"], replayed, keep) },
			"Retry":   func() error { return s.Retry(ctx, byKey["now"], time.Now(), 500, "x") },
			"Fail":    func() error { return s.Fail(ctx, byKey["now"], 500, "x", keep) },
		} {
			if err := call(); !errors.Is(err, ErrNotOwner) {
				t.Errorf("%s with the first attempt's delivery = %v, want ErrNotOwner", name, err)
			}
		}
		if err := s.Retry(ctx, byKey["later"], next, 503, "again"); !errors.Is(err, ErrNotOwner) {
			t.Errorf("Retry of a delivery already given back = %v, want ErrNotOwner", err)
		}
	}},
	{"takeover after the lease", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		mustEnqueue(t, s, "k")
		first := takeOne(t, s, short)
		var second Delivery
		// Every taker passes the same lease (LEASE_TTL): Redis takes a
		// delivery over once it has been held for the taker's.
		eventually(t, "the expired lease to be taken over", func() bool {
			ds := take(t, s, 10, short)
			if len(ds) == 1 {
				second = ds[0]
			}
			return len(ds) == 1
		})
		if second.Claim.Key != "k" || second.Attempt != 2 || second.Claim.Token == first.Claim.Token {
			t.Errorf("takeover = %q attempt %d, want k attempt 2 with a new token", second.Claim.Key, second.Attempt)
		}
		for name, call := range map[string]func() error{
			"Succeed": func() error { return s.Succeed(ctx, first, replayed, keep) },
			"Retry":   func() error { return s.Retry(ctx, first, time.Now(), 500, "x") },
			"Fail":    func() error { return s.Fail(ctx, first, 500, "x", keep) },
		} {
			if err := call(); !errors.Is(err, ErrNotOwner) {
				t.Errorf("the first holder's %s = %v, want ErrNotOwner", name, err)
			}
		}
		// The second holder's lease may have run out by now too, but
		// while no one took it over, the delivery is still its own.
		if err := s.Succeed(ctx, second, replayed, keep); err != nil {
			t.Errorf("the second holder's Succeed: %v", err)
		}
	}},
	{"lookup of an overdue delivery", func(t *testing.T, s queueStore, _ func() queueStore) {
		mustEnqueue(t, s, "k")
		takeOne(t, s, short)
		eventually(t, "the lease to run out", func() bool { return mustLookup(t, s, "k").State == Queued })
		if rec := mustLookup(t, s, "k"); rec.Delivery.Attempts != 1 || rec.Delivery.NextAttemptAt.IsZero() {
			t.Errorf("overdue: %+v, want 1 attempt and when it became due", rec.Delivery)
		}
	}},
	{"fail and dead letters", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		const n = 5
		for i := range n {
			mustEnqueue(t, s, fmt.Sprint("k", i))
		}
		before := time.Now()
		for _, d := range take(t, s, n, lease) {
			if err := s.Fail(ctx, d, 500, "gave up on "+d.Claim.Key, keep); err != nil {
				t.Fatal(err)
			}
		}
		after := time.Now()
		rec := mustLookup(t, s, "k0")
		if rec.State != Failed || rec.Delivery.Attempts != 1 || rec.Delivery.LastStatus != 500 || rec.Delivery.LastError != "gave up on k0" {
			t.Errorf("failed: %v %+v", rec.State, rec.Delivery)
		}
		if rec.TTL <= 0 || rec.TTL > keep {
			t.Errorf("failed record's TTL %s, want in (0, %s]", rec.TTL, keep)
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
				checkBetween(t, "FailedAt", dl.FailedAt, before, after)
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
		if st := stats(t, s); st.DeadLetters != n || st.Depth != 0 {
			t.Errorf("Stats = %+v, want %d dead letters and nothing queued", st, n)
		}
		if won, rec, err := s.Enqueue(ctx, "k0", queueReq); err != nil || won || rec.State != Failed {
			t.Errorf("Enqueue of a dead letter = %v, %v, %v; want a loss to failed", won, rec.State, err)
		}
		if ds := take(t, s, 10, lease); len(ds) != 0 {
			t.Errorf("dead letters were handed out: %d", len(ds))
		}
	}},
	{"dead letters expire", func(t *testing.T, s queueStore, _ func() queueStore) {
		mustEnqueue(t, s, "k")
		if err := s.Fail(context.Background(), takeOne(t, s, lease), 0, "timeout", short); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the dead letter to expire", func() bool {
			_, err := s.Lookup(context.Background(), "k")
			return errors.Is(err, ErrNotFound)
		})
		if dls, _, err := s.DeadLetters(context.Background(), "", 10); err != nil || len(dls) != 0 {
			t.Errorf("DeadLetters after expiry = %+v, %v", dls, err)
		}
		if st := stats(t, s); st.DeadLetters != 0 {
			t.Errorf("Stats after expiry = %+v, want no dead letters", st)
		}
		mustEnqueue(t, s, "k")
	}},
	{"requeue", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		mustEnqueue(t, s, "k")
		if err := s.Requeue(ctx, "k"); !errors.Is(err, ErrNotFailed) {
			t.Errorf("Requeue of a queued event = %v, want ErrNotFailed", err)
		}
		d := takeOne(t, s, lease)
		if err := s.Requeue(ctx, "k"); !errors.Is(err, ErrNotFailed) {
			t.Errorf("Requeue of a delivering event = %v, want ErrNotFailed", err)
		}
		if err := s.Fail(ctx, d, 500, "boom", keep); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		if err := s.Requeue(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		rec := mustLookup(t, s, "k")
		if rec.State != Queued || rec.Delivery.Attempts != 0 || rec.TTL != 0 {
			t.Errorf("requeued: %v %+v TTL %s, want queued, no attempts, no expiry", rec.State, rec.Delivery, rec.TTL)
		}
		checkBetween(t, "NextAttemptAt", rec.Delivery.NextAttemptAt, before, after)
		if dls, _, _ := s.DeadLetters(ctx, "", 10); len(dls) != 0 {
			t.Errorf("a requeued event is still a dead letter: %+v", dls)
		}
		again := takeOne(t, s, lease)
		if again.Attempt != 1 || !reflect.DeepEqual(again.Request, queueReq) {
			t.Errorf("after Requeue: attempt %d, request %+v; want a first attempt of the same request", again.Attempt, again.Request)
		}
		checkBetween(t, "AcceptedAt", again.AcceptedAt, before, after)
		if err := s.Requeue(ctx, "unknown"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Requeue of an unknown key = %v, want ErrNotFound", err)
		}
		c, _ := mustClaim(t, s, "sync", lease)
		if err := s.Requeue(ctx, "sync"); !errors.Is(err, ErrNotFailed) {
			t.Errorf("Requeue of an in-flight sync key = %v, want ErrNotFailed", err)
		}
		if err := s.Complete(ctx, c, replayed, keep); err != nil {
			t.Fatal(err)
		}
		if err := s.Requeue(ctx, "sync"); !errors.Is(err, ErrNotFailed) {
			t.Errorf("Requeue of a completed sync key = %v, want ErrNotFailed", err)
		}
	}},
	{"stats", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		if st := stats(t, s); st != (QueueStats{}) {
			t.Errorf("empty queue: %+v", st)
		}
		start := time.Now()
		for _, k := range []string{"a", "b", "c"} {
			mustEnqueue(t, s, k)
		}
		st := stats(t, s)
		if st.Depth != 3 || st.OldestAge < 0 || st.OldestAge > time.Since(start)+time.Millisecond {
			t.Errorf("3 queued: %+v, want depth 3 and an oldest age within the test's time", st)
		}
		d := takeOne(t, s, lease)
		if st := stats(t, s); st.Depth != 2 {
			t.Errorf("one taken: depth %d, want 2", st.Depth)
		}
		if err := s.Retry(ctx, d, time.Now().Add(time.Hour), 500, "x"); err != nil {
			t.Fatal(err)
		}
		if st := stats(t, s); st.Depth != 3 {
			t.Errorf("one retrying: depth %d, want 3", st.Depth)
		}
		d = takeOne(t, s, lease)
		if err := s.Fail(ctx, d, 500, "x", keep); err != nil {
			t.Fatal(err)
		}
		if st := stats(t, s); st.Depth != 2 || st.DeadLetters != 1 {
			t.Errorf("one failed: %+v, want depth 2 and 1 dead letter", st)
		}
		for _, d := range take(t, s, 10, lease) {
			if err := s.Succeed(ctx, d, replayed, keep); err != nil {
				t.Fatal(err)
			}
		}
		if st := stats(t, s); st.Depth != 1 || st.DeadLetters != 1 {
			t.Errorf("the due ones delivered: %+v, want the retrying one and the dead letter", st)
		}
	}},
	{"forget removes a queued event from the queue", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		forget := func(key string) {
			t.Helper()
			if had, err := s.Forget(ctx, key); err != nil || !had {
				t.Fatalf("Forget %s = %v, %v; want true", key, had, err)
			}
			if _, err := s.Lookup(ctx, key); !errors.Is(err, ErrNotFound) {
				t.Errorf("Lookup after Forget = %v, want ErrNotFound", err)
			}
		}
		mustEnqueue(t, s, "queued")
		mustEnqueue(t, s, "delivering")
		mustEnqueue(t, s, "retrying")
		mustEnqueue(t, s, "failed")
		forget("queued")
		ds := map[string]Delivery{}
		for _, d := range take(t, s, 10, lease) {
			ds[d.Claim.Key] = d
		}
		if len(ds) != 3 {
			t.Fatalf("Take after forgetting one of 4 = %d deliveries, want 3", len(ds))
		}
		if err := s.Retry(ctx, ds["retrying"], time.Now().Add(-time.Second), 500, "x"); err != nil {
			t.Fatal(err)
		}
		if err := s.Fail(ctx, ds["failed"], 500, "x", keep); err != nil {
			t.Fatal(err)
		}
		forget("delivering")
		forget("retrying")
		forget("failed")
		if err := s.Succeed(ctx, ds["delivering"], replayed, keep); !errors.Is(err, ErrNotOwner) {
			t.Errorf("Succeed of a forgotten delivery = %v, want ErrNotOwner", err)
		}
		if got := take(t, s, 10, lease); len(got) != 0 {
			t.Errorf("forgotten events were handed out: %+v", got)
		}
		if st := stats(t, s); st != (QueueStats{}) {
			t.Errorf("Stats after forgetting everything = %+v", st)
		}
		if dls, _, _ := s.DeadLetters(ctx, "", 10); len(dls) != 0 {
			t.Errorf("a forgotten dead letter is listed: %+v", dls)
		}
		mustEnqueue(t, s, "queued")
		if d := takeOne(t, s, lease); d.Attempt != 1 {
			t.Errorf("an event enqueued again after Forget starts at attempt %d, want 1", d.Attempt)
		}
	}},
	{"shutdown leaves work queued", func(t *testing.T, s queueStore, again func() queueStore) {
		mustEnqueue(t, s, "taken")
		mustEnqueue(t, s, "waiting")
		ds := take(t, s, 1, short)
		if len(ds) != 1 {
			t.Fatalf("Take(1) = %d", len(ds))
		}
		held := ds[0]
		next := again()
		other := "waiting"
		if held.Claim.Key == "waiting" {
			other = "taken"
		}
		if rec := mustLookup(t, next, other); rec.State != Queued {
			t.Errorf("after the restart the untaken event is %v, want queued", rec.State)
		}
		got := map[string]int{}
		eventually(t, "the new instance to take both events", func() bool {
			for _, d := range take(t, next, 10, short) {
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
		mustEnqueue(t, s, "k")
		d := takeOne(t, s, lease)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for name, call := range map[string]func() error{
			"Enqueue":     func() error { _, _, err := s.Enqueue(ctx, "free", queueReq); return err },
			"Take":        func() error { _, err := s.Take(ctx, 1, lease); return err },
			"Succeed":     func() error { return s.Succeed(ctx, d, replayed, keep) },
			"Retry":       func() error { return s.Retry(ctx, d, time.Now(), 500, "x") },
			"Fail":        func() error { return s.Fail(ctx, d, 500, "x", keep) },
			"Requeue":     func() error { return s.Requeue(ctx, "k") },
			"DeadLetters": func() error { _, _, err := s.DeadLetters(ctx, "", 1); return err },
			"Stats":       func() error { _, err := s.Stats(ctx); return err },
		} {
			if err := call(); !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a cancelled context = %v, want context.Canceled", name, err)
			}
		}
		if rec := mustLookup(t, s, "k"); rec.State != Delivering {
			t.Errorf("after the cancelled calls: %v, want delivering", rec.State)
		}
		if _, err := s.Lookup(context.Background(), "free"); !errors.Is(err, ErrNotFound) {
			t.Errorf("a cancelled Enqueue stored the key: %v", err)
		}
	}},
	{"bad arguments", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		mustEnqueue(t, s, "k")
		if _, err := s.Take(ctx, 1, 0); err == nil {
			t.Error("Take with a zero lease succeeded")
		}
		if ds := take(t, s, 0, lease); len(ds) != 0 {
			t.Errorf("Take(0) = %d deliveries", len(ds))
		}
		d := takeOne(t, s, lease)
		if err := s.Succeed(ctx, d, replayed, 0); err == nil || errors.Is(err, ErrNotOwner) {
			t.Errorf("Succeed with a zero ttl = %v, want an argument error", err)
		}
		if err := s.Succeed(ctx, d, Result{Status: 70000}, keep); err == nil || errors.Is(err, ErrNotOwner) {
			t.Errorf("Succeed with status 70000 = %v, want an argument error", err)
		}
		if err := s.Fail(ctx, d, 500, "x", 0); err == nil || errors.Is(err, ErrNotOwner) {
			t.Errorf("Fail with a zero keep = %v, want an argument error", err)
		}
		if rec := mustLookup(t, s, "k"); rec.State != Delivering {
			t.Errorf("after the rejected calls: %v, want delivering", rec.State)
		}
		if _, _, err := s.DeadLetters(ctx, "not a cursor", 10); err == nil {
			t.Error("DeadLetters with a made-up cursor succeeded")
		}
	}},
}

// testQueue runs the queue conformance suite, each case on a store of its
// own from open.
func testQueue(t *testing.T, open openQueue) {
	for _, tt := range queueTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, again := open(t)
			tt.run(t, s, again)
		})
	}
}

func mustEnqueue(t *testing.T, s Queue, key string) {
	t.Helper()
	won, rec, err := s.Enqueue(context.Background(), key, queueReq)
	if err != nil {
		t.Fatal(err)
	}
	if !won {
		t.Fatalf("Enqueue %s: taken (%v), want free", key, rec.State)
	}
}

func take(t *testing.T, s Queue, n int, lease time.Duration) []Delivery {
	t.Helper()
	ds, err := s.Take(context.Background(), n, lease)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func takeOne(t *testing.T, s Queue, lease time.Duration) Delivery {
	t.Helper()
	ds := take(t, s, 1, lease)
	if len(ds) != 1 {
		t.Fatalf("Take(1) = %d deliveries, want 1", len(ds))
	}
	return ds[0]
}

func stats(t *testing.T, s Queue) QueueStats {
	t.Helper()
	st, err := s.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// checkBetween checks that got, kept with millisecond precision, lies
// between before and after.
func checkBetween(t *testing.T, what string, got, before, after time.Time) {
	t.Helper()
	if got.Before(before.Truncate(time.Millisecond)) || got.After(after) {
		t.Errorf("%s = %s, want between %s and %s", what, got, before, after)
	}
}
