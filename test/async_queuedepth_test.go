package test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// The QUEUE_MAX_DEPTH class. However the first-seen events of async
// routes arrive, the proxy accepts one (202) only while fewer than
// QUEUE_MAX_DEPTH events wait for delivery in the store's queue; every
// other one is answered 503 queue-full with Retry-After, and nothing of it
// is kept; a copy of an accepted event is still answered 200 duplicate.
//
// Each shape below runs on each store it names, with QUEUE_MAX_DEPTH=20,
// one delivery slot per route and proxy (and one delivery taken ahead for
// it), and an app that holds every request it gets: the slots and what is
// taken ahead are filled first, so that nothing more leaves the queue
// while the 40 events of the shape arrive.
//
//	shape              how the 40 first-seen events arrive          stores                               202s
//	one after another  each sent once the one before was answered   DATA_DIR, Redis, Redis Cluster, PG   20
//	burst              all 40 at once                               DATA_DIR, Redis, PostgreSQL          20
//	two routes         one after another, alternating two routes    DATA_DIR, Redis, PostgreSQL          20
//	two proxies        one after another, alternating two proxies   Redis, Redis Cluster                 20
//	                   on one store
//	two proxies        the same                                     PostgreSQL                           20 to 40: slack
//	two proxies, each  the same, each sent once every proxy's           PostgreSQL                           20
//	reading            gauge shows the depth so far
//
// PostgreSQL checks the bound against each proxy's own reckoning (its
// last read of the depth, plus what it changed since), so with two proxies
// the queue may pass the bound by what the other proxy accepted since
// that read (docs/delivery.md, Backpressure): each proxy alone still never
// passes it, and once both have read the depth, both refuse. How old a
// read may be has no bound a test can count on (a second, or 20 times the
// read's length, which a machine starved of CPU stretches): the run
// without waits passes the bound by up to the other proxy's 20, all of
// them when no read landed within the run, and the run that waits for
// every proxy's read of the depth before each event shows what a read
// takes in: exactly the bound.
var depthShapes = []struct {
	name    string
	routes  []provider // the events go to these routes in turn
	proxies int        // ... and to this many proxies in turn
	burst   bool       // all at once, rather than one after another
	// read makes each event wait until every proxy's gauge shows the
	// depth so far: each proxy has read it since the event before.
	read   bool
	stores []asyncStore
}{
	{"one after another", []provider{acme}, 1, false, false, []asyncStore{diskStore, redisStore, clusterStore, pgStore}},
	{"burst", []provider{acme}, 1, true, false, []asyncStore{diskStore, redisStore, pgStore}},
	{"two routes", []provider{acme, jsonPath}, 1, false, false, []asyncStore{diskStore, redisStore, pgStore}},
	{"two proxies", []provider{acme}, 2, false, false, []asyncStore{redisStore, clusterStore, pgStore}},
	{"two proxies each reading", []provider{acme}, 2, false, true, []asyncStore{pgStore}},
}

// depthMax is the QUEUE_MAX_DEPTH of the runs, and depthSent the
// first-seen events each sends.
const (
	depthMax  = 20
	depthSent = 40
)

// TestAsyncQueueMaxDepth runs every shape of depthShapes on each of its
// stores.
func TestAsyncQueueMaxDepth(t *testing.T) {
	t.Parallel()
	for _, shape := range depthShapes {
		for _, st := range shape.stores {
			t.Run(shape.name+"/"+st.name, func(t *testing.T) {
				t.Parallel()
				queueMaxDepthRun(t, st, shape.routes, shape.proxies, shape.burst, shape.read)
			})
		}
	}
}

// depthArrival is one first-seen event of a run and what it was answered.
type depthArrival struct {
	p  provider
	ev event
	px int // the proxy it was sent to
	a  answer
}

func queueMaxDepthRun(t *testing.T, st asyncStore, rs []provider, proxies int, burst, read bool) {
	app := newScriptedApp(t, nil)
	hold := app.holdAll()
	env := asyncEnv(app.URL, st.env(t))
	env["ROUTES"] = routes(acme, jsonPath)
	env["QUEUE_MAX_DEPTH"] = fmt.Sprint(depthMax)
	env["DELIVERY_CONCURRENCY"] = "1"
	// Nothing the app holds times out, or comes back for a retry, while
	// the test runs.
	env["UPSTREAM_TIMEOUT"] = "2m"
	pxs := make([]*proxy, proxies)
	for i := range pxs {
		pxs[i] = startProxy(t, env)
	}
	t.Cleanup(hold) // before the proxies stop: they would wait for the app
	ctx, client := testContext(t), newClient(t)

	// Fill every delivery slot, and what the workers take ahead of it:
	// two events per route for each proxy's workers, one held by the app,
	// one taken, waiting for it.
	slots := 2 * proxies
	for i := range 2 * proxies {
		for _, p := range []provider{acme, jsonPath} {
			expect(t, "an event to fill a delivery slot", mustSend(t, ctx, client, pxs[0], p, p.Event(1000+i)), 202, "queued")
		}
	}
	// Each is taken as a lone event is, by whichever proxy's lane looks
	// first.
	taken := pxs[0].bounds().taken()
	awaitHeld(t, app, slots, taken)
	for i := range 2 * proxies {
		for _, p := range []provider{acme, jsonPath} {
			pxs[0].awaitState(t, p, p.Event(1000+i).ID, "delivering", taken)
		}
	}

	// The first event of the run waits in the queue; once every proxy's
	// gauge shows it, each has read the depth since the slots filled.
	arrivals := make([]depthArrival, depthSent)
	for i := range arrivals {
		p := rs[i%len(rs)]
		arrivals[i] = depthArrival{p: p, ev: p.Event(i), px: i % proxies}
	}
	first := &arrivals[0]
	first.a = mustSend(t, ctx, client, pxs[first.px], first.p, first.ev)
	expect(t, "the first event of the run", first.a, 202, "queued")
	for _, px := range pxs {
		px.awaitMetric(t, "webhook_dedup_queue_depth", nil, 1)
	}

	rest := arrivals[1:]
	if burst {
		var wg sync.WaitGroup
		for i := range rest {
			wg.Go(func() {
				a, err := rest[i].p.send(ctx, client, pxs[rest[i].px].Addr, rest[i].ev)
				if err != nil {
					t.Errorf("POST %s: %v", rest[i].ev.ID, err)
				}
				rest[i].a = a
			})
		}
		wg.Wait()
	} else {
		accepted := 1
		for i := range rest {
			if read {
				for _, px := range pxs {
					px.awaitMetric(t, "webhook_dedup_queue_depth", nil, float64(accepted))
				}
			}
			rest[i].a = mustSend(t, ctx, client, pxs[rest[i].px], rest[i].p, rest[i].ev)
			if rest[i].a.Status == http.StatusAccepted {
				accepted++
			}
		}
	}
	if t.Failed() {
		return
	}

	var accepted, refused []depthArrival
	perProxy := make([]int, proxies)
	for _, ar := range arrivals {
		switch {
		case ar.a.Status == http.StatusAccepted && ar.a.Dedup() == "queued":
			accepted = append(accepted, ar)
			perProxy[ar.px]++
		case ar.a.Status == http.StatusServiceUnavailable && ar.a.Dedup() == "queue-full":
			if ra, err := ar.a.retryAfter(); err != nil || ra <= 0 {
				t.Errorf("%s refused without a Retry-After in whole seconds: %s", ar.ev.ID, ar.a)
			}
			refused = append(refused, ar)
		default:
			t.Errorf("%s answered %s; want 202 queued or 503 queue-full", ar.ev.ID, ar.a)
		}
	}
	t.Logf("%d of %d accepted (per proxy: %v), %d refused, with QUEUE_MAX_DEPTH=%d", len(accepted), depthSent, perProxy, len(refused), depthMax)
	switch {
	case st.name == pgStore.name && proxies > 1 && !read:
		// Each proxy counts its own acceptances at once, the other's at
		// its next read: each proxy alone stays within the bound, and
		// together they pass it by no more than the other's share, all
		// of it when neither read the depth during the run.
		for i, n := range perProxy {
			if n > depthMax {
				t.Errorf("proxy %d accepted %d, more than QUEUE_MAX_DEPTH=%d on its own", i, n, depthMax)
			}
		}
		if len(accepted) < depthMax || len(accepted) > proxies*depthMax {
			t.Errorf("%d accepted; want from QUEUE_MAX_DEPTH=%d to %d (the other proxy's acceptances since a proxy's last read)", len(accepted), depthMax, proxies*depthMax)
		}
	case len(accepted) != depthMax:
		t.Errorf("%d of %d first-seen events accepted with the delivery slots full; want exactly QUEUE_MAX_DEPTH=%d", len(accepted), depthSent, depthMax)
	}

	// The gauge agrees: what was accepted waits; the refused left nothing.
	for _, px := range pxs {
		if got := px.awaitMetric(t, "webhook_dedup_queue_depth", nil, float64(len(accepted))); got != float64(len(accepted)) {
			t.Errorf("webhook_dedup_queue_depth = %v, want the %d accepted", got, len(accepted))
		}
	}
	for _, ar := range refused {
		if ev := pxs[0].event(t, ar.p, ar.ev.ID); ev.State != "" {
			t.Errorf("refused %s is %q in the store, want unknown", ar.ev.ID, ev.State)
		}
	}
	// Every proxy has read the depth by now: whichever gets it, a
	// first-seen event is refused, and copies are answered as such.
	for i, px := range pxs {
		p := rs[i%len(rs)]
		expect(t, "a first-seen event once every proxy read the depth", mustSend(t, ctx, client, px, p, p.Event(2000+i)), 503, "queue-full")
		for _, ar := range accepted {
			expect(t, "a copy of accepted "+ar.ev.ID, mustSend(t, ctx, client, px, ar.p, ar.ev), 200, "duplicate")
		}
		expect(t, "a copy of an event the app holds", mustSend(t, ctx, client, px, acme, acme.Event(1000)), 200, "duplicate")
		for _, ar := range refused {
			expect(t, "a copy of refused "+ar.ev.ID, mustSend(t, ctx, client, px, ar.p, ar.ev), 503, "queue-full")
		}
	}
	if t.Failed() || len(refused) == 0 {
		return
	}

	// Once the app answers, the queue drains and the refused are taken:
	// the workers go through what waits (drained), and the proxy
	// refuses no longer once it has read the depth since (observed).
	hold()
	again := refused[0]
	b := pxs[0].bounds()
	await(t, b.drained(slots+len(accepted), 0)+b.observed(), func() error {
		if a := mustSend(t, ctx, client, pxs[0], again.p, again.ev); a.Status != http.StatusAccepted {
			return fmt.Errorf("once the app answers, refused %s is still answered %s", again.ev.ID, a)
		}
		return nil
	})
}

// awaitHeld waits until the app holds n requests at once, for at most
// deadline.
func awaitHeld(t *testing.T, app *scriptedApp, n int, deadline time.Duration) {
	t.Helper()
	await(t, deadline, func() error {
		if got := int(app.inside.Load()); got < n {
			return fmt.Errorf("the app holds %d requests, want %d (every delivery slot)", got, n)
		}
		return nil
	})
}
