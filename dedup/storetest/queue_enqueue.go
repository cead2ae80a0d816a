package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// enqueueCases: an event is queued once, within maxDepth, and never
// beside a sync claim of its key.
var enqueueCases = []queueCase{
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
		var won, full, lost atomic.Int32
		var wg, warmed sync.WaitGroup
		start := make(chan struct{})
		warmed.Add(n)
		for i := range n {
			wg.Go(func() {
				req := Request
				req.Route = []string{"/a", "/b"}[i%2]
				// Each caller's own connection first, as on a busy proxy
				// (oneWinner's warm): 40 callers on a pool of one would
				// each dial (and shake hands over TLS) inside their
				// enqueue, within its bound, and meet in the store one
				// after another.
				if err := warmUp(func() error { return s.Ping(ctx) }, n); err != nil {
					t.Error(err)
				}
				warmed.Done()
				<-start
				ok, rec, err := enqueueAnswered(ctx, s, fmt.Sprint("k", i), req, bound, n, &lost)
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
		warmed.Wait()
		close(start)
		wg.Wait()
		if lost.Load() > 0 {
			t.Logf("%d tries of the %d enqueues cut short by the store's own bound, each sent again as its sender would", lost.Load(), n)
		}
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
}

// enqueueAnswered is Enqueue of a key no one else enqueues, sent again
// while the store's own bound on an operation cuts it short, as the
// sender of a 503 does: such a call may have queued the event or not, and
// says nothing of the bound. A retry of one that did finds the key queued,
// which is then its win (ok true). lost counts the tries cut short. It
// gives up after n tries: each is bounded by the store's own operation
// timeout, so n is the time of n callers' calls served one after another.
func enqueueAnswered(ctx context.Context, s dedup.Queue, key string, req dedup.Request, maxDepth, n int, lost *atomic.Int32) (bool, dedup.Record, error) {
	var err error
	for try := range n {
		var ok bool
		var rec dedup.Record
		if ok, rec, err = s.Enqueue(ctx, key, req, maxDepth); !timedOut(err) {
			if try > 0 && err == nil && !ok && rec.State == dedup.Queued {
				return true, rec, nil
			}
			return ok, rec, err
		}
		lost.Add(1)
	}
	return false, dedup.Record{}, fmt.Errorf("enqueue %s: cut short by the store's bound %d times: %w", key, n, err)
}
