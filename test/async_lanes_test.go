package test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// laneApp is an app whose handler for one route hangs until the test lets
// go, and which notes when each event of the other routes arrived.
type laneApp struct {
	*httptest.Server
	release func()
	held    atomic.Int32 // requests of the hanging route it holds
	mu      sync.Mutex
	arrived map[string]time.Time // by X-Acme-Event-Id
}

func newLaneApp(t *testing.T, hangs string) *laneApp {
	hold := make(chan struct{})
	var once sync.Once
	a := &laneApp{release: func() { once.Do(func() { close(hold) }) }, arrived: map[string]time.Time{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == hangs {
			a.held.Add(1)
			defer a.held.Add(-1)
			select {
			case <-hold:
			case <-r.Context().Done():
			}
			return
		}
		a.mu.Lock()
		a.arrived[r.Header.Get("X-Acme-Event-Id")] = time.Now()
		a.mu.Unlock()
	}))
	t.Cleanup(a.Close)
	t.Cleanup(a.release) // before the server's Close, which waits for the held requests
	return a
}

func (a *laneApp) arrivedAt(id string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.arrived[id]
	return at, ok
}

// TestAsyncRouteLanes: a route whose app hangs holds its own
// DELIVERY_CONCURRENCY slots, not another route's: with 20 events of the
// hanging route queued first, 300 events of another route are delivered
// while it hangs, each within a few seconds of its acceptance (before
// per-route slots: the hanging route took all 16 slots and the others
// waited for UPSTREAM_TIMEOUT), and the slots gauge names the route that
// holds them.
func TestAsyncRouteLanes(t *testing.T) {
	t.Parallel()
	app := newLaneApp(t, jsonPath.Path)
	env := asyncEnv(app.URL, diskStore.env(t))
	env["ROUTES"] = routes(acme, jsonPath)
	env["UPSTREAM_TIMEOUT"] = "2m"
	px := startProxy(t, env)
	ctx, client := testContext(t), newClient(t)
	for i := range 20 {
		expect(t, "a webhook of the hanging route", mustSend(t, ctx, client, px, jsonPath, jsonPath.Event(i)), 202, "queued")
	}
	b := px.bounds()
	await(t, b.taken(), func() error {
		if n := app.held.Load(); n < 16 {
			return fmt.Errorf("the app holds %d of the hanging route's requests, want the 16 of DELIVERY_CONCURRENCY", n)
		}
		return nil
	})

	const n = 300
	accepted := make([]time.Time, n)
	for i := range n {
		expect(t, "a webhook of the other route", mustSend(t, ctx, client, px, acme, acme.Event(i)), 202, "queued")
		accepted[i] = time.Now()
	}
	// The other route's lane goes through its backlog in rounds of its
	// own DELIVERY_CONCURRENCY attempts, its first taken as a lone event
	// would be.
	lags := make([]time.Duration, 0, n)
	await(t, b.taken()+b.drained(n, 0), func() error {
		for i := len(lags); i < n; i++ {
			at, ok := app.arrivedAt(acme.Event(i).ID)
			if !ok {
				return fmt.Errorf("%d of %d events of the other route delivered while the first route's app hangs", i, n)
			}
			lags = append(lags, at.Sub(accepted[i]))
		}
		return nil
	})
	slices.Sort(lags)
	p50, p99 := lags[n/2], lags[n*99/100]
	t.Logf("accept to delivery on the other route while the first hangs: p50 %s, p99 %s", p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	if p99 > 5*time.Second {
		t.Errorf("accept to delivery p99 %s, want a few seconds at most", p99)
	}
	if v := sample(px.metrics(t), "webhook_dedup_delivery_slots_in_use", map[string]string{"route": jsonPath.Path}); v != 16 {
		t.Errorf("slots in use by the hanging route = %v, want its 16", v)
	}
}

// TestAsyncDeliveryDuringIntake: 200 senders at once, as fast as the
// proxy answers, do not starve the delivery workers, on every durable
// store: the app keeps receiving events while they send. Before the
// enqueue gate, 5% of what was accepted reached the app meanwhile on
// DATA_DIR, all the rest only after the senders stopped; with the gate
// alone, a third (each delivery waited for a Take and a settle, an accept
// for one enqueue); with the next deliveries taken ahead, most of it. The
// ratio is logged, not asserted (docs/performance.md measures it on a
// quiet machine): on a loaded one it moves with what else runs. The floor
// asserts progress only, at a third of the worst ratio measured under
// load with the race detector (0.31) and above what the proxy without the
// enqueue gate leaves (0.07–0.08), so that only starvation fails it.
func TestAsyncDeliveryDuringIntake(t *testing.T) {
	t.Parallel()
	// The senders send for at least lasting and until minAccepted events
	// were accepted, so that the ratio is of enough events to mean
	// something however slow the machine.
	const (
		senders     = 200
		lasting     = 3 * time.Second
		minAccepted = 1000
		floor       = 0.10
	)
	for _, st := range []asyncStore{diskStore, redisStore, pgStore} {
		t.Run(st.name, func(t *testing.T) {
			app := newScriptedApp(t, nil)
			px := startProxy(t, asyncEnv(app.URL, st.env(t)))
			ctx, client := testContext(t), newClient(t)
			var accepted, next atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			sending := func() bool { return time.Since(start) < lasting || accepted.Load() < minAccepted }
			for range senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for sending() && ctx.Err() == nil {
						a, err := acme.send(ctx, client, px.Addr, acme.Event(int(next.Add(1))))
						if err != nil {
							t.Error(err)
							return
						}
						if a.Status == 202 {
							accepted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			took, delivered, n := time.Since(start), app.total(), accepted.Load()
			ratio := float64(delivered) / float64(n)
			// The enqueue gate widens while delivery keeps more than its
			// share, within DELIVERY_CONCURRENCY (16) and four times it.
			turns := sample(px.metrics(t), "webhook_dedup_enqueue_turns", nil)
			t.Logf("%d senders for %s: %d accepted (%.0f/s), %d delivered meanwhile (%.2f of them); enqueue turns %v", senders, took.Round(time.Millisecond), n, float64(n)/took.Seconds(), delivered, ratio, turns)
			if turns < 16 || turns > 64 {
				t.Errorf("webhook_dedup_enqueue_turns = %v, want 16 to 64", turns)
			}
			if ratio < floor {
				t.Errorf("%d of %d accepted events delivered while the senders sent (%.2f), want at least %.2f: intake starves delivery", delivered, n, ratio, floor)
			}
		})
	}
}
