package delivery

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// TestRouteLanes: a route whose app hangs holds its own slots only.
// Another route's events, queued behind many of the hanging route's, are
// delivered while it hangs; so are those of a route no longer async (the
// rest lane); and the slots gauge shows which route holds what.
func TestRouteLanes(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	var delivered sync.Map // route → *atomic.Int32
	count := func(route string) *atomic.Int32 {
		n, _ := delivered.LoadOrStore(route, new(atomic.Int32))
		return n.(*atomic.Int32)
	}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/hang") {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		count(r.URL.Path).Add(1)
	}))
	t.Cleanup(app.Close)

	q := newQueue(t)
	enqueue := func(route string, n int) {
		for i := range n {
			req := webhookRequest(fmt.Sprintf(`{"id":"%s-%d"}`, route, i))
			req.RequestURI, req.Route = route, route
			q.enqueue(t, fmt.Sprint(route, i), req)
		}
	}
	enqueue("/hang", 20) // ahead of everything else in the queue
	enqueue("/fast", 50)
	enqueue("/gone", 5)
	m := NewMetrics(prometheus.NewRegistry(), q, nil)
	run(t, Config{Queue: q, Upstream: mustURL(t, app.URL), Routes: []string{"/hang", "/fast"}, Concurrency: 4,
		UpstreamTimeout: time.Minute, PollInterval: 20 * time.Millisecond, Metrics: m})
	t.Cleanup(unblock) // before the workers' stop, which waits for the attempts

	await(t, "/fast's and /gone's events delivered while /hang's app hangs", func() bool {
		return count("/fast").Load() == 50 && count("/gone").Load() == 5
	})
	if got := testutil.ToFloat64(m.inUse.WithLabelValues("/hang")); got != 4 {
		t.Errorf("slots in use by /hang = %v, want all 4 of its own", got)
	}
	// The app counts an event before its answer is back, and the slot is
	// freed once the outcome is written.
	await(t, "/fast's slots freed once its events are delivered", func() bool {
		return testutil.ToFloat64(m.inUse.WithLabelValues("/fast")) == 0
	})
	unblock()
	await(t, "/hang's events delivered once its app answers", func() bool { return count("/hang").Load() == 20 })
	for i := range 20 {
		key := fmt.Sprint("/hang", i)
		await(t, key+" completed", func() bool { return q.record(t, key).State == dedup.Completed })
	}
}

// TestLeaseKept: a delivery keeps its lease for as long as this process
// holds it, so that another worker sharing the queue (a replica) does not
// take the event over and send it to the app a second time: while its
// attempt outlasts LEASE_TTL, and while, taken ahead, it waits that long
// for a worker.
func TestLeaseKept(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events int // with one worker: the first attempted, the rest taken ahead
	}{
		{"an attempt outlasts the lease", 1},
		{"a delivery taken ahead waits longer than the lease", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApp(t, nil)
			release := a.holdAll(t)
			q := newQueue(t)
			for i := range tc.events {
				q.enqueue(t, fmt.Sprint("k", i), webhookRequest(fmt.Sprintf(`{"id":"evt_%d"}`, i)))
			}
			// A renewal is a write to the disk, bounded by StoreTimeout;
			// it starts a third of a lease after the one before ended, so
			// a lease of twice StoreTimeout outlasts one that takes its
			// whole bound. Shorter, the test failed by chance when a
			// loaded machine's disk took more than two thirds of it.
			const storeTimeout = time.Second
			const lease = 2 * storeTimeout
			cfg := Config{Queue: q, Upstream: mustURL(t, a.URL), Concurrency: 1, UpstreamTimeout: time.Minute, Lease: lease, StoreTimeout: storeTimeout, PollInterval: 20 * time.Millisecond}
			run(t, cfg)
			await(t, "the first attempt at the app, the other events taken ahead", func() bool {
				for i := range tc.events {
					if q.record(t, fmt.Sprint("k", i)).State != dedup.Delivering {
						return false
					}
				}
				return len(a.requests()) == 1
			})
			run(t, cfg) // the replica
			t.Cleanup(release)
			// Several leases pass while the app holds the attempt.
			for start := time.Now(); time.Since(start) < 2*lease; time.Sleep(10 * time.Millisecond) {
				if n := len(a.requests()); n > 1 {
					t.Fatalf("the app got %d requests while the first attempt was still running", n)
				}
			}
			release()
			for i := range tc.events {
				key := fmt.Sprint("k", i)
				await(t, key+" completed", func() bool { return q.record(t, key).State == dedup.Completed })
			}
			if n := len(a.requests()); n != tc.events {
				t.Errorf("the app got %d requests, want each of the %d events once", n, tc.events)
			}
		})
	}
}

// TestTakenAhead: each lane keeps Concurrency deliveries taken ahead of
// its Concurrency attempts, no more, so that a worker done with one goes
// on with the next without waiting for a Take; all are delivered, each
// once (TestConcurrencyBound: at most Concurrency at once at the app).
func TestTakenAhead(t *testing.T) {
	a := newApp(t, nil)
	release := a.holdAll(t)
	q := newQueue(t)
	const n, concurrency = 10, 3
	for i := range n {
		q.enqueue(t, fmt.Sprint("k", i), webhookRequest("{}"))
	}
	run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), Concurrency: concurrency, PollInterval: time.Millisecond})
	t.Cleanup(release) // before run's stop, should the test fail
	delivering := func() int {
		held := 0
		for i := range n {
			if q.record(t, fmt.Sprint("k", i)).State == dedup.Delivering {
				held++
			}
		}
		return held
	}
	await(t, "the attempts at the app and the deliveries taken ahead", func() bool {
		return a.inside.Load() == concurrency && delivering() == 2*concurrency
	})
	// Polls pass: nothing more is taken while the workers are busy.
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; time.Sleep(10 * time.Millisecond) {
		if got := delivering(); got != 2*concurrency {
			t.Fatalf("%d deliveries held with %d attempts running, want %d: as many more taken ahead", got, concurrency, 2*concurrency)
		}
	}
	release()
	await(t, "all delivered", func() bool { return q.depth(t) == 0 && len(a.requests()) == n && delivering() == 0 })
}

// takesAtOnce is a queue that counts its Takes under way, and holds every
// Take but the first until two are under way (or 10 s have passed).
type takesAtOnce struct {
	*diskQueue
	mu              sync.Mutex
	calls, underWay int
	most            int
	two             chan struct{} // closed once two are under way
}

func (q *takesAtOnce) Take(ctx context.Context, lane dedup.Lane, n int, lease time.Duration) ([]dedup.Delivery, error) {
	q.mu.Lock()
	q.calls++
	first := q.calls == 1
	q.underWay++
	if q.underWay == 2 && q.most < 2 {
		close(q.two)
	}
	q.most = max(q.most, q.underWay)
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.underWay--
		q.mu.Unlock()
	}()
	if !first {
		select {
		case <-q.two:
		case <-time.After(loadMargin): // a bound, should the second Take never come
		}
	}
	return q.diskQueue.Take(ctx, lane, n, lease)
}

// TestTakesUnderWay: a lane has a second Take under way while the first
// has not answered, so that a store slow to answer one (PostgreSQL, its
// CPU shared among the enqueues' connections) does not hold the lane's
// deliveries to what one Take brings at a time.
func TestTakesUnderWay(t *testing.T) {
	a := newApp(t, nil)
	q := &takesAtOnce{diskQueue: newQueue(t), two: make(chan struct{})}
	for i := range 20 {
		q.enqueue(t, fmt.Sprint("k", i), webhookRequest("{}"))
	}
	run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), Concurrency: 2, PollInterval: time.Millisecond})
	await(t, "two Takes under way at once", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.most == 2
	})
	await(t, "all delivered", func() bool { return q.depth(t) == 0 && len(a.requests()) == 20 })
}
