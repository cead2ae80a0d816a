package delivery

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// TestPacerSpacing: attempts waiting at once pass one interval apart, the
// k-th no sooner than k intervals after the first, however many wait.
func TestPacerSpacing(t *testing.T) {
	const interval, n = 20 * time.Millisecond, 12
	p := &pacer{interval: interval, now: time.Now}
	start := time.Now()
	passed := make(chan time.Time, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, err := p.wait(context.Background()); err != nil {
				t.Error(err)
			}
			passed <- time.Now()
		})
	}
	wg.Wait()
	close(passed)
	var at []time.Duration
	for ts := range passed {
		at = append(at, ts.Sub(start))
	}
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	for k, d := range at {
		if d < time.Duration(k)*interval {
			t.Errorf("attempt %d passed after %s, want no sooner than %s (all: %v)", k, d, time.Duration(k)*interval, at)
		}
	}
}

// TestPacerLateTurns: turns handed out on time but waited for late (the
// workers that hold them reached by the CPU only after all of them had
// come) still start one interval apart, each start reported as it
// happens, rather than all at once.
func TestPacerLateTurns(t *testing.T) {
	const interval, n = 30 * time.Millisecond, 5
	p := &pacer{interval: interval, now: time.Now}
	turns := make([]time.Time, n)
	for i := range turns {
		turns[i] = p.turn()
	}
	// Every turn has come before any worker waits for its own.
	<-time.After(time.Until(turns[n-1].Add(interval)))
	starts := make(chan [2]time.Time, n)
	var wg sync.WaitGroup
	for _, turn := range turns {
		wg.Go(func() {
			start, err := p.waitFor(context.Background(), turn)
			if err != nil {
				t.Error(err)
			}
			starts <- [2]time.Time{start, time.Now()}
		})
	}
	wg.Wait()
	close(starts)
	var at []time.Time
	for s := range starts {
		if s[1].Before(s[0]) {
			t.Errorf("start reported as %s, after waitFor returned at %s", s[0], s[1])
		}
		at = append(at, s[0])
	}
	slices.SortFunc(at, func(x, y time.Time) int { return x.Compare(y) })
	for k := 1; k < len(at); k++ {
		if gap := at[k].Sub(at[k-1]); gap < interval {
			t.Errorf("start %d came %s after the one before, want at least the interval %s", k, gap, interval)
		}
	}
	// A turn handed out now comes after the last start.
	if turn := p.turn(); turn.Before(at[n-1].Add(interval)) {
		t.Errorf("a turn handed out after the late starts begins %s before the interval after the last", at[n-1].Add(interval).Sub(turn))
	}
}

// TestPacerPause: a pause holds every attempt until its end, those whose
// turns were handed out before it began included, and each pass after it
// is still spaced; without a rate, a pause alone holds them.
func TestPacerPause(t *testing.T) {
	for _, interval := range []time.Duration{0, 30 * time.Millisecond} {
		t.Run(fmt.Sprint("interval ", interval), func(t *testing.T) {
			p := &pacer{interval: interval, now: time.Now}
			// Three turns handed out, then the pause.
			turns := []time.Time{p.turn(), p.turn(), p.turn()}
			const pause = 150 * time.Millisecond
			until := time.Now().Add(pause)
			p.pause(until)
			if !p.holding() {
				t.Error("holding() false during a pause")
			}
			done := make(chan time.Time, len(turns))
			for _, turn := range turns {
				go func() {
					_, _ = p.waitFor(context.Background(), turn)
					done <- time.Now()
				}()
			}
			var passed []time.Time
			for range turns {
				passed = append(passed, <-done)
			}
			sort.Slice(passed, func(i, j int) bool { return passed[i].Before(passed[j]) })
			for k, ts := range passed {
				if want := until.Add(time.Duration(k) * interval); ts.Before(want) {
					t.Errorf("attempt %d passed %s before the pause's end (+%d intervals)", k, want.Sub(ts), k)
				}
			}
			await(t, "holding() false once the pause is over and no turn is ahead", func() bool { return !p.holding() })
		})
	}
}

// TestPacerCancel: a wait ends with its context.
func TestPacerCancel(t *testing.T) {
	p := &pacer{now: time.Now}
	p.pause(time.Now().Add(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := p.wait(ctx); err == nil {
		t.Fatal("wait returned nil during an hour's pause")
	}
	if p.holding() != true {
		t.Error("the pause ended with the wait")
	}
}

// TestHeldSince: the time held back since t counts only the waits after t,
// whole or in part, none beyond now, and periods dropped past the bound
// only lengthen it.
func TestHeldSince(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	p := &pacer{now: func() time.Time { return now }}
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	p.held.book(at(10), at(20))
	p.held.book(at(30), at(33))
	p.held.book(at(32), at(35))   // overlapping: extends it
	p.held.book(at(35.5), at(40)) // within heldGap of its end: joined, the gap counted
	p.held.book(at(38), at(39))   // within it: nothing more
	p.held.book(at(50), at(70))   // booked past now
	now = at(60)
	for _, tc := range []struct {
		since float64
		want  time.Duration
	}{
		{0, 10*time.Second + 10*time.Second + 10*time.Second},
		{15, 5*time.Second + 10*time.Second + 10*time.Second},
		{25, 10*time.Second + 10*time.Second},
		{37, 3*time.Second + 10*time.Second},
		{55, 5 * time.Second},
		{60, 0},
	} {
		if got := p.heldSince(at(tc.since)); got != tc.want {
			t.Errorf("heldSince(+%vs) = %s, want %s", tc.since, got, tc.want)
		}
	}
	var h heldTime
	for i := range maxHeldPeriods + 10 {
		h.book(at(float64(10*i)), at(float64(10*i+1)))
	}
	if len(h.periods) > maxHeldPeriods {
		t.Errorf("%d periods kept, want at most %d", len(h.periods), maxHeldPeriods)
	}
	end := at(float64(10 * (maxHeldPeriods + 10)))
	if got, want := h.at(end, end)-h.at(t0, end), time.Duration(maxHeldPeriods+10)*time.Second; got != want {
		t.Errorf("held since the start, periods dropped = %s, want all of %s", got, want)
	}
}

// TestPacerRoom: a lane takes only the deliveries whose turns start
// within ahead; none during a pause until it nearly ends.
func TestPacerRoom(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	p := &pacer{interval: 100 * time.Millisecond, ahead: 250 * time.Millisecond, now: func() time.Time { return now }}
	if n, _ := p.room(10); n != 3 {
		t.Errorf("room at the start = %d, want 3 (turns at 0, 100, 200ms within 250ms)", n)
	}
	for range 3 {
		p.turn()
	}
	if n, later := p.room(10); n != 0 || later != 50*time.Millisecond {
		t.Errorf("room with three turns handed out = %d, %s; want 0 for 50ms", n, later)
	}
	p.pause(t0.Add(time.Second))
	if n, later := p.room(10); n != 0 || later != 750*time.Millisecond {
		t.Errorf("room during a pause = %d, %s; want 0 until 250ms before its end", n, later)
	}
	now = t0.Add(800 * time.Millisecond)
	if n, _ := p.room(10); n != 1 {
		t.Errorf("room 200ms before the pause's end = %d, want 1 (its first turn, 50ms within ahead)", n)
	}
	free := &pacer{ahead: 250 * time.Millisecond, now: func() time.Time { return now }}
	if n, _ := free.room(10); n != 10 {
		t.Errorf("room without a rate = %d, want all 10", n)
	}
}

// rateApp is an app that records when each request arrived, by route, and
// answers each as answer says.
type rateApp struct {
	*httptest.Server
	mu      sync.Mutex
	arrived map[string][]time.Time
}

func newRateApp(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *rateApp {
	a := &rateApp{arrived: map[string][]time.Time{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.arrived[r.URL.Path] = append(a.arrived[r.URL.Path], time.Now())
		a.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *rateApp) times(route string) []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.arrived[route]...)
}

// enqueueRoute queues n events of route, keys route-0 … route-(n-1).
func enqueueRoute(t *testing.T, q *diskQueue, route string, n int) {
	for i := range n {
		req := webhookRequest(fmt.Sprintf(`{"id":"%s-%d"}`, route, i))
		req.RequestURI, req.Route = route, route
		q.enqueue(t, fmt.Sprint(route, "-", i), req)
	}
}

// failFirst answers 500 to each event's first attempt, 200 to the next.
func failFirst(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(HeaderAttempt) == "1" {
		w.WriteHeader(http.StatusInternalServerError)
	}
}

// TestWorkersRate: a route's attempts, retries included, reach the app
// spaced by its rate, whatever the concurrency and the deliveries taken
// ahead; another route's are not.
func TestWorkersRate(t *testing.T) {
	const interval, events = 40 * time.Millisecond, 10
	app := newRateApp(t, failFirst)
	q := newQueue(t)
	enqueueRoute(t, q, "/slow", events)
	enqueueRoute(t, q, "/free", events)
	begun := time.Now()
	w := start(t, Config{Queue: q, Upstream: mustURL(t, app.URL), Routes: []string{"/slow", "/free"}, Concurrency: 8,
		Spacing:         map[string]time.Duration{"/slow": interval},
		InitialInterval: time.Millisecond, MaxInterval: time.Millisecond, PollInterval: 10 * time.Millisecond})
	for _, r := range []string{"/slow", "/free"} {
		await(t, r+"'s events delivered", func() bool {
			for i := range events {
				if q.record(t, fmt.Sprint(r, "-", i)).State != dedup.Completed {
					return false
				}
			}
			return true
		})
	}
	slow := app.times("/slow")
	if len(slow) != 2*events {
		t.Fatalf("/slow: %d attempts, want %d", len(slow), 2*events)
	}
	// Attempts start one interval apart, the first no sooner than the
	// workers: the k-th to reach the app no sooner than k intervals
	// after they started, however late a loaded machine makes each
	// arrive.
	slices.SortFunc(slow, func(x, y time.Time) int { return x.Compare(y) })
	for k, at := range slow {
		if early := begun.Add(time.Duration(k) * interval).Sub(at); early > 0 {
			t.Errorf("/slow: attempt %d reached the app %s before its turn, %d intervals after the start", k, early, k)
		}
	}
	// And every turn handed out was used (a turn wasted per attempt
	// would halve the rate): the next is one interval after the last
	// handed out, which the last attempt to arrive waited for. Load only
	// makes the arrival later, never this fail.
	w.lanes[0].pace.mu.Lock()
	next := w.lanes[0].pace.next
	w.lanes[0].pace.mu.Unlock()
	if ahead := next.Sub(slow[len(slow)-1]); ahead > interval {
		t.Errorf("/slow: the next turn is %s after the last attempt arrived, want at most one interval (%s): turns were handed out and not used", ahead, interval)
	}
	if free := app.times("/free"); len(free) != 2*events {
		t.Errorf("/free: %d attempts, want %d", len(free), 2*events)
	}
}

// TestWorkersPauseRoute: a 429 with Retry-After pauses every new attempt
// of its route until then, not only the event's; another route goes on;
// webhook_dedup_route_paused says which route is held back.
func TestWorkersPauseRoute(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		spaced bool
	}{{"429", http.StatusTooManyRequests, false}, {"503", http.StatusServiceUnavailable, false}, {"429 on a route with a rate", http.StatusTooManyRequests, true}} {
		t.Run(tc.name, func(t *testing.T) {
			const pause = time.Second
			var once sync.Once
			var answeredAt time.Time
			app := newRateApp(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/a" {
					return
				}
				once.Do(func() {
					w.Header().Set("Retry-After", strconv.Itoa(int(pause/time.Second)))
					w.WriteHeader(tc.status)
					answeredAt = time.Now()
				})
			})
			q := newQueue(t)
			enqueueRoute(t, q, "/a", 6)
			m := NewMetrics(prometheus.NewRegistry(), q, nil)
			cfg := Config{Queue: q, Upstream: mustURL(t, app.URL), Routes: []string{"/a", "/b"}, Concurrency: 1,
				InitialInterval: time.Millisecond, MaxInterval: time.Minute, PollInterval: 10 * time.Millisecond, Metrics: m}
			if tc.spaced {
				cfg.Spacing = map[string]time.Duration{"/a": time.Millisecond}
			}
			run(t, cfg)
			await(t, "the 429", func() bool { return len(app.times("/a")) > 0 })
			enqueueRoute(t, q, "/b", 6)
			await(t, "/b delivered during /a's pause", func() bool { return len(app.times("/b")) == 6 })
			if got := app.times("/b"); got[len(got)-1].After(answeredAt.Add(pause)) {
				t.Errorf("/b's last event came %s after /a's pause ended: /b was paused too", got[len(got)-1].Sub(answeredAt.Add(pause)))
			}
			if a, b := paused(t, m, "/a"), paused(t, m, "/b"); a != 1 || b != 0 {
				t.Errorf("route_paused during /a's pause: /a %v, /b %v; want 1, 0", a, b)
			}
			awaitWithin(t, "/a's events delivered after the pause", pause, func() bool { return len(app.times("/a")) == 7 })
			// With one slot, the 429 was the only attempt under way:
			// every other came after the pause.
			for i, ts := range app.times("/a")[1:] {
				if ts.Before(answeredAt.Add(pause)) {
					t.Errorf("/a's attempt %d came %s before the pause's end", i+2, answeredAt.Add(pause).Sub(ts))
				}
			}
			await(t, "route_paused back to 0", func() bool { return paused(t, m, "/a") == 0 })
		})
	}
}

// paused is route's webhook_dedup_route_paused as m reports it now.
func paused(t *testing.T, m *Metrics, route string) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	m.held.Collect(ch)
	close(ch)
	for metric := range ch {
		var pb dto.Metric
		if err := metric.Write(&pb); err != nil {
			t.Fatal(err)
		}
		for _, lp := range pb.GetLabel() {
			if lp.GetName() == "route" && lp.GetValue() == route {
				return pb.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no webhook_dedup_route_paused{route=%q}", route)
	return 0
}

// TestWorkersRateKeepsAge: events waiting for the rate's turn are not
// dead-lettered for their age: the wait does not count towards MaxAge.
// The last event waits about 2×events turns, several times maxAge; maxAge
// itself is what two attempts on loopback take, with room for a loaded
// machine (at 100 ms turns and 250 ms it failed at load 15).
func TestWorkersRateKeepsAge(t *testing.T) {
	const interval, maxAge, events = 300 * time.Millisecond, time.Second, 6
	app := newRateApp(t, failFirst)
	q := newQueue(t)
	enqueueRoute(t, q, "/r", events)
	run(t, Config{Queue: q, Upstream: mustURL(t, app.URL), Routes: []string{"/r"}, Concurrency: 4,
		Spacing: map[string]time.Duration{"/r": interval}, MaxAge: maxAge,
		InitialInterval: time.Millisecond, MaxInterval: time.Millisecond, PollInterval: 10 * time.Millisecond})
	for i := range events {
		key := fmt.Sprint("/r-", i)
		await(t, key+" settled", func() bool {
			s := q.record(t, key).State
			return s == dedup.Completed || s == dedup.Failed
		})
		if s := q.record(t, key).State; s != dedup.Completed {
			t.Errorf("%s: %v after waiting %d turns of %s with RETRY_MAX_AGE %s, want completed", key, s, i, interval, maxAge)
		}
	}
}

// TestWorkersPauseLeavesQueued: while a route is paused, its deliveries
// stay queued, none taken and none counted as an attempt, but for those
// whose turns come within a poll of the pause's end; then all are
// delivered.
func TestWorkersPauseLeavesQueued(t *testing.T) {
	const events, pause, poll = 10, 500 * time.Millisecond, 20 * time.Millisecond
	app := newRateApp(t, func(http.ResponseWriter, *http.Request) {})
	q := newQueue(t)
	enqueueRoute(t, q, "/p", events)
	until := time.Now().Add(pause)
	start(t, Config{Queue: q, Upstream: mustURL(t, app.URL), Routes: []string{"/p"}, Concurrency: 8, PollInterval: poll},
		func(w *Workers) { w.lanes[0].pace.pause(until) })
	for time.Until(until) > 2*poll {
		for i := range events {
			if rec := q.record(t, fmt.Sprint("/p-", i)); rec.State != dedup.Queued || rec.Delivery.Attempts != 0 {
				t.Fatalf("/p-%d %s with %d attempts %s before the pause's end, want queued with none", i, rec.State, rec.Delivery.Attempts, time.Until(until))
			}
		}
		time.Sleep(poll / 2)
	}
	awaitWithin(t, "/p's events delivered after the pause", pause, func() bool { return len(app.times("/p")) == events })
	if first := slices.MinFunc(app.times("/p"), func(x, y time.Time) int { return x.Compare(y) }); first.Before(until) {
		t.Errorf("an attempt reached the app %s before the pause's end", until.Sub(first))
	}
}

// TestRouteQueueDepth: webhook_dedup_route_queue_depth has a series for
// each async route and for the rest, from the store's depth by route,
// summing to the queue's depth.
func TestRouteQueueDepth(t *testing.T) {
	q := newQueue(t)
	enqueueRoute(t, q, "/a", 3)
	enqueueRoute(t, q, "/b", 2)
	enqueueRoute(t, q, "/gone", 1)
	enqueueRoute(t, q, "", 1)
	reg := prometheus.NewPedanticRegistry()
	New(Config{Queue: q, Upstream: mustURL(t, "http://127.0.0.1:1"), Routes: []string{"/a", "/b", "/empty"},
		Metrics: NewMetrics(reg, q, nil)})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "webhook_dedup_route_queue_depth" {
			continue
		}
		for _, m := range f.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{"/a": 3, "/b": 2, "/empty": 0, restLabel: 2}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("webhook_dedup_route_queue_depth = %v, want %v", got, want)
	}
}

// start runs the Workers of cfg, after each of before, until the test
// ends, and returns them.
func start(t *testing.T, cfg Config, before ...func(*Workers)) *Workers {
	t.Helper()
	w := New(cfg)
	for _, f := range before {
		f(w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		finish, cancelFinish := context.WithTimeout(context.Background(), time.Minute)
		defer cancelFinish()
		if n := w.Drain(finish, finish); n > 0 {
			t.Errorf("%d deliveries unsettled a minute after they were cancelled", n)
		}
	})
	return w
}
