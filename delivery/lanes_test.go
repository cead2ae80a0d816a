package delivery

import (
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

// TestLeaseKept: an attempt that outlasts LEASE_TTL keeps its lease, so
// that another worker sharing the queue (a replica) does not take the
// event over and send it to the app a second time.
func TestLeaseKept(t *testing.T) {
	a := newApp(t, nil)
	release := a.holdAll(t)
	q := newQueue(t)
	q.enqueue(t, "k1", webhookRequest(`{"id":"evt_1"}`))
	// A renewal is a write to the disk, bounded by StoreTimeout (here
	// STORE_TIMEOUT's default); it starts a third of a lease after the
	// one before ended, so a lease of twice StoreTimeout outlasts one that
	// takes its whole bound. Shorter, the test failed by chance when a
	// loaded machine's disk took more than two thirds of it to write.
	const storeTimeout = time.Second
	const lease = 2 * storeTimeout
	cfg := Config{Queue: q, Upstream: mustURL(t, a.URL), UpstreamTimeout: time.Minute, Lease: lease, StoreTimeout: storeTimeout, PollInterval: 20 * time.Millisecond}
	run(t, cfg)
	run(t, cfg) // the replica
	t.Cleanup(release)
	await(t, "the first attempt to reach the app", func() bool { return len(a.requests()) == 1 })
	// Several leases pass while the app holds the attempt.
	for start := time.Now(); time.Since(start) < 2*lease; time.Sleep(10 * time.Millisecond) {
		if n := len(a.requests()); n > 1 {
			t.Fatalf("the app got the event %d times while the first attempt was still running", n)
		}
	}
	release()
	await(t, "completion", func() bool { return q.record(t, "k1").State == dedup.Completed })
	if n := len(a.requests()); n != 1 {
		t.Errorf("the app got the event %d times, want once", n)
	}
}
