package storetest

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// queueStore is what the queue cases exercise: a store's records and its
// queue, side by side.
type queueStore struct {
	dedup.Store
	dedup.Queue
}

// Requests are requests of every shape a queue must keep intact, byte for
// byte.
var Requests = []dedup.Request{
	{
		Method: "POST", RequestURI: "/webhooks/stripe?x=1&y=%20", Host: "hooks.example.com",
		Header:     http.Header{"Content-Type": {"application/json"}, "Stripe-Signature": {"t=1,v1=abc"}, "X-Many": {"a", "", "c"}},
		RemoteAddr: "203.0.113.9:41234", TLS: true,
		Body:  []byte(`{"id":"evt_1"}`),
		Route: "/webhooks/stripe", Namespace: "stripe", TTL: 96 * time.Hour,
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	},
	{Method: "PUT", RequestURI: "/", Host: "h", RemoteAddr: "[::1]:1"},
	{Method: "POST", RequestURI: "/b", Header: http.Header{"x-not-canonical": {"v"}}, Body: []byte{0, 0xff, '\n', 0x80},
		Route: "/b", Namespace: "/b", TTL: 1500 * time.Millisecond, TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"},
	// Header values may carry bytes that are not UTF-8 (obs-text): they
	// reach the app as they came.
	{Method: "POST", RequestURI: "/raw", Header: http.Header{"X-Raw": {"caf\xe9", "\xff\xfe", "ok"}}, Body: []byte("{}")},
}

// Request is the request the queue cases enqueue: every part of it set,
// a header of several values among them.
var Request = Requests[0]

// queueTests is the queue conformance suite. Each case gets a store of its
// own, so that take sees only the case's events.
var queueTests = []struct {
	name string
	run  func(t *testing.T, s queueStore, again func() queueStore)
}{
	{"enqueue once under concurrent enqueues", func(t *testing.T, s queueStore, _ func() queueStore) {
		warm := func() error { return s.Ping(context.Background()) }
		var rounds atomic.Int32 // every caller of a round stores the same number
		oneWinner(t, 32, "enqueues", dedup.Queued, warm, func(round int) (bool, dedup.Record, error) {
			rounds.Store(int32(round + 1))
			return s.Enqueue(context.Background(), fmt.Sprint("k", round), Request, 0)
		})
		if ds := Take(t, s, 100, Lease); len(ds) != int(rounds.Load()) {
			t.Errorf("Take handed out %d deliveries, want each of the %d rounds' event once", len(ds), rounds.Load())
		}
	}},
	{"enqueue of a claimed or completed key loses", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		c, _ := MustClaim(t, s, "k", Lease)
		if won, rec, err := s.Enqueue(ctx, "k", Request, 0); err != nil || won || rec.State != dedup.InFlight {
			t.Errorf("Enqueue of an in-flight key = %v, %v, %v; want a loss to in-flight", won, rec.State, err)
		}
		if err := s.Complete(ctx, c, Replayed, Keep); err != nil {
			t.Fatal(err)
		}
		if won, rec, err := s.Enqueue(ctx, "k", Request, 0); err != nil || won || rec.State != dedup.Completed || rec.Result.Status != Replayed.Status {
			t.Errorf("Enqueue of a completed key = %v, %+v, %v; want a loss to the completed record", won, rec, err)
		}
		if ds := Take(t, s, 10, Lease); len(ds) != 0 {
			t.Errorf("a lost Enqueue queued %d deliveries", len(ds))
		}
	}},
	{"enqueue refused once maxDepth events wait", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		const bound = 3
		enqueue := func(key, route string, maxDepth int) (bool, dedup.Record, error) {
			req := Request
			req.Route = route
			return s.Enqueue(ctx, key, req, maxDepth)
		}
		refused := func(what, key string, maxDepth int) {
			t.Helper()
			if won, rec, err := enqueue(key, "/b", maxDepth); won || !errors.Is(err, dedup.ErrQueueFull) {
				t.Errorf("%s: Enqueue %s with maxDepth %d = %v, %v, %v; want dedup.ErrQueueFull", what, key, maxDepth, won, rec.State, err)
			}
		}
		// The depth is the whole queue's, every route's.
		for i, route := range []string{"/a", "/b", "/a"} {
			if won, rec, err := enqueue(fmt.Sprint("k", i), route, bound); err != nil || !won {
				t.Fatalf("Enqueue k%d below the bound = %v, %v, %v; want won", i, won, rec.State, err)
			}
		}
		refused("with maxDepth events waiting", "over", bound)
		// Nothing of it is kept: the key is free, to a sync claim too.
		if _, err := s.Lookup(ctx, "over"); !errors.Is(err, dedup.ErrNotFound) {
			t.Errorf("Lookup of the refused key = %v, want dedup.ErrNotFound", err)
		}
		c, _ := MustClaim(t, s, "over", Lease)
		if err := s.Release(ctx, c); err != nil {
			t.Fatal(err)
		}
		// A copy of a queued event is answered as one, full or not.
		if won, rec, err := enqueue("k1", "/b", bound); err != nil || won || rec.State != dedup.Queued {
			t.Errorf("Enqueue of a queued key with the queue full = %v, %v, %v; want a loss to queued", won, rec.State, err)
		}
		if won, _, err := enqueue("k3", "/b", bound+1); err != nil || !won {
			t.Fatalf("Enqueue below a larger bound = %v, %v; want won", won, err)
		}
		// Deliveries under way do not wait: taking two makes room for two.
		ds := Take(t, s, 2, Lease)
		if len(ds) != 2 {
			t.Fatalf("Take(2) = %d deliveries", len(ds))
		}
		for i := range 2 {
			if won, _, err := enqueue(fmt.Sprint("room", i), "/a", bound+1); err != nil || !won {
				t.Errorf("Enqueue room%d with two taken = %v, %v; want won", i, won, err)
			}
		}
		refused("full again", "over", bound+1)
		// A retry waits again, never refused, past the bound if need be.
		if err := s.Retry(ctx, ds[0], time.Now(), 503, "busy"); err != nil {
			t.Fatal(err)
		}
		refused("with a retry past the bound", "over", bound+2)
		if st := Stats(t, s); st.Depth != bound+2 {
			t.Errorf("Stats = %+v after the retry, want depth %d", st, bound+2)
		}
		// A settled delivery changes nothing; maxDepth 0 is no bound.
		if err := s.Succeed(ctx, ds[1], Replayed, Keep); err != nil {
			t.Fatal(err)
		}
		refused("after a success", "over", bound+2)
		if won, _, err := enqueue("over", "/b", 0); err != nil || !won {
			t.Errorf("Enqueue with maxDepth 0 = %v, %v; want won", won, err)
		}
	}},
	{"enqueue bounded under concurrent enqueues", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		const bound, n = 10, 40
		MustEnqueue(t, s, "before")
		var won, full atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				req := Request
				req.Route = []string{"/a", "/b"}[i%2]
				<-start
				ok, rec, err := s.Enqueue(ctx, fmt.Sprint("k", i), req, bound)
				switch {
				case errors.Is(err, dedup.ErrQueueFull):
					full.Add(1)
				case err != nil || !ok:
					t.Errorf("Enqueue k%d = %v, %v, %v; want won or dedup.ErrQueueFull", i, ok, rec.State, err)
				default:
					won.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if won.Load() != bound-1 || full.Load() != n-bound+1 {
			t.Errorf("%d enqueues at once with 1 waiting and maxDepth %d: %d won, %d refused; want %d and %d", n, bound, won.Load(), full.Load(), bound-1, n-bound+1)
		}
		if st := Stats(t, s); st.Depth != bound {
			t.Errorf("Stats = %+v, want depth %d", st, bound)
		}
	}},
	{"sync claim of a queued key loses", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		MustEnqueue(t, s, "k")
		c, rec, err := s.Claim(ctx, "k", Lease)
		if err != nil || c != (dedup.Claim{}) || rec.State != dedup.Queued {
			t.Errorf("Claim of a queued key = %+v, %v, %v; want a loss to queued", c, rec.State, err)
		}
		d := TakeOne(t, s, Lease)
		if _, rec, _ := s.Claim(ctx, "k", Lease); rec.State != dedup.Delivering {
			t.Errorf("Claim of a delivering key saw %v, want delivering", rec.State)
		}
		// A claim token of the queue does not complete or release the
		// record as if it were a sync claim's.
		if err := s.Release(ctx, d.Claim); !errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("Release with a delivery's claim = %v, want ErrNotOwner", err)
		}
		if err := s.Complete(ctx, d.Claim, Replayed, Keep); !errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("Complete with a delivery's claim = %v, want ErrNotOwner", err)
		}
		if rec := MustLookup(t, s, "k"); rec.State != dedup.Delivering {
			t.Errorf("after the sync calls: %v, want delivering", rec.State)
		}
	}},
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

// runQueue runs the queue cases, each on a store of its own from open.
func runQueue(t *testing.T, open Open) {
	for _, tt := range queueTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, again := open(t)
			if again == nil {
				t.Fatal("a store that keeps a queue must open again on the same data (Open's again)")
			}
			tt.run(t, queueStore{b.Store, b.Queue}, func() queueStore {
				b := again()
				return queueStore{b.Store, b.Queue}
			})
		})
	}
}

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
