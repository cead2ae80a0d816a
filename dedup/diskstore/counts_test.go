package diskstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	bolt "go.etcd.io/bbolt"
)

// TestMoments checks moments against a plain count of each time, through
// additions and removals in any order (a removal may come first: two
// commits' tallies applied the other way round), enough of them to
// compact the heap many times.
func TestMoments(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var m moments
	want := map[int64]int{}
	for i := range 20000 {
		tm := rng.Int64N(300)
		k := 1
		if rng.IntN(2) == 0 {
			k = -1
		}
		m.add(tm, k)
		want[tm] += k
		if i%7 == 0 {
			checkMoments(t, &m, want)
		}
	}
	checkMoments(t, &m, want)
}

// TestMomentsCompact: with the earliest time held on, as an old event
// retried for days is, the times of the events accepted and settled
// meanwhile never come first, and the heap is compacted instead of
// keeping them all.
func TestMomentsCompact(t *testing.T) {
	var m moments
	m.add(0, 1)
	for tm := int64(1); tm <= 10000; tm++ {
		m.add(tm, 1)
		m.add(tm, -1)
	}
	if first, ok := m.earliest(); !ok || first != 0 || m.total != 1 {
		t.Errorf("earliest = %d, %v, total %d; want 0, true, 1", first, ok, m.total)
	}
	if len(m.order) > 2*64 || len(m.n) > 2*64 {
		t.Errorf("holding one time, the heap has %d and the counts %d: not compacted", len(m.order), len(m.n))
	}
}

// checkMoments compares m with want, a count of each time.
func checkMoments(t *testing.T, m *moments, want map[int64]int) {
	t.Helper()
	first, total := int64(-1), 0
	for tm, k := range want {
		total += k
		if k != 0 && (first < 0 || tm < first) {
			first = tm
		}
	}
	got, ok := m.earliest()
	if ok != (first >= 0) || (ok && got != first) {
		t.Fatalf("earliest = %d, %v; want %d", got, ok, first)
	}
	if m.total != total {
		t.Fatalf("total = %d, want %d", m.total, total)
	}
}

// TestDeadlines: how many times are still ahead, as now moves on, with
// changes arriving in any order and some after their time passed.
func TestDeadlines(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var d deadlines
	var ops []struct {
		at int64
		k  int
	}
	now := int64(0)
	for range 5000 {
		at := now + rng.Int64N(100) - 10 // a few already passed
		k := 1
		if rng.IntN(3) == 0 {
			k = -1
		}
		d.add(at, k)
		ops = append(ops, struct {
			at int64
			k  int
		}{at, k})
		now += rng.Int64N(3)
		want := 0
		for _, op := range ops {
			if op.at > now {
				want += op.k
			}
		}
		if got := d.ahead(now); got != want {
			t.Fatalf("ahead(%d) = %d, want %d", now, got, want)
		}
	}
}

// TestDiskStatsKeptInStep runs every queue operation from many goroutines
// at once, so that they share batches and some batched calls fail (the
// ErrNotOwner of a lost delivery) and run again, with leases and dead
// letters that run out on the way: the counts Stats reports are then
// what reading the whole file says, and what the file says again once
// reopened.
func TestDiskStatsKeptInStep(t *testing.T) {
	dir := t.TempDir()
	d := openDiskAt(t, dir)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() { churn(t, d, rand.New(rand.NewPCG(uint64(w), 5)), 150) })
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	checkStats(t, d, "after the churn")
	if err := d.sweep(); err != nil {
		t.Fatal(err)
	}
	checkStats(t, d, "after a sweep")
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = openDiskAt(t, dir)
	checkStats(t, d, "reopened")
}

// churn runs rounds random queue operations on a few keys and routes.
func churn(t *testing.T, d *Store, rng *rand.Rand, rounds int) {
	ctx := context.Background()
	short := func() time.Duration {
		return []time.Duration{time.Millisecond, 5 * time.Millisecond, time.Hour}[rng.IntN(3)]
	}
	var held []dedup.Delivery
	for range rounds {
		var err error
		switch op := rng.IntN(8); {
		case op < 3:
			req := storetest.Request
			req.Route = fmt.Sprint("r", rng.IntN(3))
			_, _, err = d.Enqueue(ctx, fmt.Sprint("k", rng.IntN(40)), req, 0)
		case op == 3:
			var ds []dedup.Delivery
			ds, err = d.Take(ctx, dedup.RouteLane(fmt.Sprint("r", rng.IntN(4))), 1+rng.IntN(3), short())
			held = append(held, ds...)
		case op == 4:
			_, err = d.Forget(ctx, fmt.Sprint("k", rng.IntN(40)))
		case op == 5:
			err = d.Requeue(ctx, fmt.Sprint("k", rng.IntN(40)))
		default:
			if len(held) > 0 {
				i := rng.IntN(len(held))
				err = settleAny(ctx, d, rng, held[i], short())
				held = append(held[:i], held[i+1:]...)
			}
		}
		if err != nil && !errors.Is(err, dedup.ErrNotOwner) && !errors.Is(err, dedup.ErrNotFound) && !errors.Is(err, dedup.ErrNotFailed) {
			t.Error(err)
			return
		}
	}
}

// settleAny settles dl one of the ways a worker does, or extends it.
func settleAny(ctx context.Context, d *Store, rng *rand.Rand, dl dedup.Delivery, short time.Duration) error {
	switch rng.IntN(4) {
	case 0:
		return d.Succeed(ctx, dl, storetest.Replayed, short)
	case 1:
		return d.Retry(ctx, dl, time.Now().Add(short-time.Hour/2), 500, "x")
	case 2:
		return d.Fail(ctx, dl, 500, "x", short)
	default:
		return d.Extend(ctx, dl, short)
	}
}

// checkStats compares the counts d keeps with what walking its file
// says, at one instant.
func checkStats(t *testing.T, d *Store, when string) {
	t.Helper()
	now := time.Now()
	want := walkStats(t, d, now.UnixMilli())
	if got := d.counts.stats(now); !reflect.DeepEqual(got, want) {
		t.Errorf("%s: Stats = %+v, reading the whole file %+v", when, got, want)
	}
}

// walkStats is the stats of d's queue at now, from reading every entry of
// its indexes (what Stats did before it kept counts).
func walkStats(t *testing.T, d *Store, now int64) dedup.QueueStats {
	t.Helper()
	var st dedup.QueueStats
	err := d.db.View(func(tx *bolt.Tx) error {
		b := buckets(tx)
		oldest := int64(0)
		for _, name := range b.laneNames() {
			c := b.lanes.Bucket(name).Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				s, ok := b.get(k[8:], now)
				if !ok {
					continue
				}
				a, err := codec.DecodeAsync(s.value)
				if err != nil {
					return err
				}
				if oldest == 0 || a.Accepted < oldest {
					oldest = a.Accepted
				}
				if a.State != dedup.Delivering || a.At <= now {
					st.Depth++
					if st.Routes == nil {
						st.Routes = map[string]int{}
					}
					st.Routes[routeOfLane(name)]++
				}
			}
		}
		if oldest != 0 {
			st.OldestAge = max(0, time.Duration(now-oldest)*time.Millisecond)
		}
		c := b.dead.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if _, ok := b.get(k[8:], now); ok {
				st.DeadLetters++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// BenchmarkStats reads the queue's stats (a /metrics scrape) with 1,000
// and 20,000 events queued: what it costs must not grow with the backlog.
func BenchmarkStats(b *testing.B) {
	for _, queued := range []int{1000, 20000} {
		b.Run(fmt.Sprint("queued=", queued), func(b *testing.B) {
			d, err := Open(Config{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = d.Close() })
			fillQueue(b, d, queued)
			ctx := context.Background()
			if st, err := d.Stats(ctx); err != nil || st.Depth != queued {
				b.Fatalf("Stats = %+v, %v; want a depth of %d", st, err, queued)
			}
			for b.Loop() {
				if _, err := d.Stats(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fillQueue enqueues n events from many goroutines, so that they share
// commits, and without fsyncs: only the size of the queue matters here.
func fillQueue(tb testing.TB, d *Store, n int) {
	tb.Helper()
	d.db.NoSync = true
	defer func() { d.db.NoSync = false }()
	const workers = 64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if _, _, err := d.Enqueue(context.Background(), fmt.Sprint("bench/", i), storetest.Request, 0); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}
