package delivery

import (
	"context"
	"crypto/sha256"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/timing"
	"github.com/webhook-dedup/webhook-dedup/upstream"
)

// app is the upstream: it records what it received and answers as told.
type app struct {
	*httptest.Server
	mu       sync.Mutex
	received []received
	answer   func(attempt string) (status int, retryAfter string)
	hold     chan struct{} // nil: answer at once; set by holdAll
	inside   atomic.Int32
	most     atomic.Int32
}

type received struct {
	method, uri, host string
	header            http.Header
	body              []byte
}

func newApp(t *testing.T, answer func(attempt string) (int, string)) *app {
	a := &app{answer: answer}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := a.inside.Add(1)
		defer a.inside.Add(-1)
		for {
			m := a.most.Load()
			if n <= m || a.most.CompareAndSwap(m, n) {
				break
			}
		}
		body, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		a.received = append(a.received, received{r.Method, r.RequestURI, r.Host, r.Header.Clone(), body})
		hold := a.hold
		a.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
		status, ra := http.StatusOK, ""
		if a.answer != nil {
			status, ra = a.answer(r.Header.Get(HeaderAttempt))
		}
		if ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(a.Close)
	return a
}

// holdAll makes every request wait in the app until the returned release,
// which is safe to call twice and is called when the test ends: a test
// failing while the app holds attempts must not leave the workers' stop
// waiting on them for its drain (or UpstreamTimeout). Cleanups run
// last registered first, so a test that holds the app before run also
// registers release after run, for it to come before the workers' stop.
func (a *app) holdAll(t *testing.T) (release func()) {
	ch := make(chan struct{})
	a.mu.Lock()
	a.hold = ch
	a.mu.Unlock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			a.mu.Lock()
			a.hold = nil
			a.mu.Unlock()
			close(ch)
		})
	}
	t.Cleanup(release)
	return release
}

func (a *app) requests() []received {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]received(nil), a.received...)
}

// run starts the workers on q until the test ends (or stop is called):
// stop ends the taking and drains the attempts under way for up to a
// minute (see runDraining).
func run(t *testing.T, cfg Config) (stop func()) {
	t.Helper()
	return runDraining(t, cfg, time.Minute)
}

// runDraining is run whose stop lets the attempts under way finish for
// finish, then cancels them and waits for them to give their events back.
func runDraining(t *testing.T, cfg Config, finish time.Duration) (stop func()) {
	t.Helper()
	w := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			finishCtx, cancelFinish := context.WithTimeout(context.Background(), finish)
			defer cancelFinish()
			exitCtx, cancelExit := context.WithTimeout(context.Background(), finish+time.Minute)
			defer cancelExit()
			if n := w.Drain(finishCtx, exitCtx); n > 0 {
				t.Errorf("%d deliveries unsettled a minute after they were cancelled", n)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// loadMargin is what every wait in these tests allows beyond the times
// the test itself configures: the time a loaded 2-core machine (the suite
// under the race detector, beside other work) may add to scheduling the
// workers, the disk queue, the app and the test: timing.LoadMargin, the
// one guess the module's tests make, stated once.
const loadMargin = timing.LoadMargin

// await polls cond until it holds, failing the test after loadMargin: for
// an event whose configured times in its way (polls, backoffs, spacings
// of milliseconds) are nothing beside it. An event that waits out a
// lease, a pause or a probe's pause uses awaitWithin.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	awaitWithin(t, what, 0, cond)
}

// awaitWithin is await for an event that may take configured, a time the
// test configured, before it can happen: it fails the test after
// configured + loadMargin.
func awaitWithin(t *testing.T, what string, configured time.Duration, cond func() bool) {
	t.Helper()
	deadline := configured + loadMargin
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("still waiting for %s after %s", what, deadline)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func webhookRequest(body string) dedup.Request {
	return dedup.Request{
		Method:     http.MethodPost,
		RequestURI: "/hooks/gh?x=1&y=%2F",
		Host:       "hooks.example.com",
		Header: http.Header{
			"Content-Type":      {"application/json"},
			"X-Github-Delivery": {"d-1"},
			"X-Forwarded-For":   {"203.0.113.7"},
			"X-Custom":          {"a", "b"},
		},
		RemoteAddr: "10.0.0.9:51234",
		TLS:        true,
		Body:       []byte(body),
	}
}

// TestForwardedAsReceived: the app gets the queued request as a sync route
// would have forwarded it, plus the attempt number, and a 2xx completes
// the event with the route's TTL and the body's fingerprint.
func TestForwardedAsReceived(t *testing.T) {
	a := newApp(t, nil)
	q := newQueue(t)
	body := `{"id":"evt_1","n":1}`
	req := webhookRequest(body)
	req.Route, req.Namespace, req.TTL = "/hooks", "github", 96*time.Hour
	q.enqueue(t, "k1", req)
	run(t, Config{Queue: q, Upstream: mustURL(t, a.URL)})
	await(t, "completion", func() bool { return q.record(t, "k1").State == dedup.Completed })

	reqs := a.requests()
	if len(reqs) != 1 {
		t.Fatalf("app received %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.method != "POST" || r.uri != "/hooks/gh?x=1&y=%2F" || r.host != "hooks.example.com" || string(r.body) != body {
		t.Errorf("app received %s %s Host %s body %q", r.method, r.uri, r.host, r.body)
	}
	for name, want := range map[string]string{
		"X-Forwarded-For":   "203.0.113.7, 10.0.0.9",
		"X-Forwarded-Host":  "hooks.example.com",
		"X-Forwarded-Proto": "https",
		"X-Github-Delivery": "d-1",
		"Content-Type":      "application/json",
		HeaderAttempt:       "1",
	} {
		if got := r.header.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if got := r.header.Values("X-Custom"); len(got) != 2 {
		t.Errorf("X-Custom: %q, want both values", got)
	}
	rec := q.record(t, "k1")
	if rec.TTL < 95*time.Hour || rec.TTL > 96*time.Hour || rec.Result.Status != 200 || !rec.Result.SameBody(sha256.Sum256([]byte(body))) {
		t.Errorf("completed with %+v, ttl %s; want status 200, the body's fingerprint, 96h", rec.Result, rec.TTL)
	}
}

// writeCounter is a transport whose connections count their writes.
type writeCounter struct {
	*http.Transport
	writes atomic.Int64
}

func newWriteCounter() *writeCounter {
	c := &writeCounter{Transport: upstream.NewTransport()}
	dial := c.Transport.DialContext
	c.Transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countedConn{Conn: conn, writes: &c.writes}, nil
	}
	return c
}

type countedConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestForwardedInOneWrite: an attempt sends its headers and a body of a
// typical webhook's size in one write, not the headers first and the
// body after (ReverseProxy's own wrapper of the body made net/http flush
// the headers on their own): half the syscalls, and one read at the app.
func TestForwardedInOneWrite(t *testing.T) {
	a := newApp(t, nil)
	q := newQueue(t)
	const n = 5
	for i := range n {
		q.enqueue(t, "k"+strconv.Itoa(i), webhookRequest(`{"id":"evt_`+strconv.Itoa(i)+`","pad":"`+strings.Repeat("x", 1000)+`"}`))
	}
	transport := newWriteCounter()
	run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), Transport: transport, Concurrency: 1})
	await(t, "every event completed", func() bool {
		for i := range n {
			if q.record(t, "k"+strconv.Itoa(i)).State != dedup.Completed {
				return false
			}
		}
		return true
	})
	if got := len(a.requests()); got != n {
		t.Fatalf("app received %d requests, want %d", got, n)
	}
	if got := transport.writes.Load(); got != n {
		t.Errorf("%d writes for %d attempts, want one each", got, n)
	}
}

// TestRetriedUntilSuccess: failures are retried with the attempt number
// rising, and the event completes on the first 2xx.
func TestRetriedUntilSuccess(t *testing.T) {
	a := newApp(t, func(attempt string) (int, string) {
		if attempt == "3" {
			return http.StatusNoContent, ""
		}
		return http.StatusInternalServerError, ""
	})
	q := newQueue(t)
	q.enqueue(t, "k", webhookRequest("{}"))
	run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond})
	await(t, "completion", func() bool { return q.record(t, "k").State == dedup.Completed })
	reqs := a.requests()
	if len(reqs) != 3 {
		t.Fatalf("app received %d attempts, want 3", len(reqs))
	}
	for i, r := range reqs {
		if got, want := r.header.Get(HeaderAttempt), string(rune('1'+i)); got != want {
			t.Errorf("attempt %d carried %s %q", i+1, HeaderAttempt, got)
		}
	}
	if d := q.record(t, "k").Delivery; d.Attempts != 3 {
		t.Errorf("completed after %d attempts, want 3", d.Attempts)
	}
}

// TestRedirectIsRetried: only a 2xx completes an event. A 3xx (a moved
// endpoint, a login page, a cache's 304) means the app did not take it:
// the attempt fails and is retried, as on a sync route, where the claim is
// released.
func TestRedirectIsRetried(t *testing.T) {
	for _, status := range []int{http.StatusFound, http.StatusNotModified, http.StatusTemporaryRedirect} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			a := newApp(t, func(string) (int, string) { return status, "" })
			q := newQueue(t)
			q.enqueue(t, "k", webhookRequest("{}"))
			// An hour's backoff: one attempt within the test.
			run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), InitialInterval: time.Hour, MaxInterval: time.Hour})
			await(t, "the attempt settled", func() bool {
				rec := q.record(t, "k")
				return rec.State == dedup.Completed || rec.Delivery.LastStatus != 0
			})
			rec := q.record(t, "k")
			want := "the app answered " + strconv.Itoa(status)
			if d := rec.Delivery; rec.State != dedup.Queued || d.Attempts != 1 || d.LastStatus != status || d.LastError != want || d.NextAttemptAt.IsZero() {
				t.Errorf("after the app answered %d: %s %+v; want queued for a retry, 1 attempt, last status %d, %q", status, rec.State, d, status, want)
			}
			if n := len(a.requests()); n != 1 {
				t.Errorf("the app received %d attempts, want 1", n)
			}
		})
	}
}

// TestDeadLetteredAfterMaxAttempts: the MaxAttempts-th failure, the first
// attempt included, dead-letters the event, kept for DeadLetterTTL.
func TestDeadLetteredAfterMaxAttempts(t *testing.T) {
	a := newApp(t, func(string) (int, string) { return http.StatusBadGateway, "" })
	q := newQueue(t)
	q.enqueue(t, "k", webhookRequest("{}"))
	run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), InitialInterval: time.Millisecond, MaxInterval: time.Millisecond,
		MaxAttempts: 4, DeadLetterTTL: 5 * time.Hour})
	await(t, "dead letter", func() bool { return q.record(t, "k").State == dedup.Failed })
	rec := q.record(t, "k")
	if d := rec.Delivery; d.Attempts != 4 || len(a.requests()) != 4 || rec.TTL < 4*time.Hour || rec.TTL > 5*time.Hour ||
		d.LastStatus != 502 || d.LastError != "the app answered 502" {
		t.Errorf("dead-lettered as %+v (%d at the app), kept %s; want 4 attempts, 502, 5h", d, len(a.requests()), rec.TTL)
	}
	dls, _, err := q.DeadLetters(context.Background(), "", 10)
	if err != nil || len(dls) != 1 || dls[0].Key != "k" {
		t.Errorf("dead letters %+v, %v; want k", dls, err)
	}
}

// TestNoAttemptCapByDefault: with MaxAttempts unset, the number of
// attempts dead-letters nothing: an event failing for the 40th time,
// within MaxAge, is retried (a cap of 25 ran out after about 1.3 h of a
// dead app, where RETRY_MAX_AGE promised 72 h).
func TestNoAttemptCapByDefault(t *testing.T) {
	a := newApp(t, func(string) (int, string) { return http.StatusBadGateway, "" })
	q := newQueue(t)
	q.enqueue(t, "k", webhookRequest("{}"))
	run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), InitialInterval: time.Millisecond, MaxInterval: time.Millisecond, PollInterval: 5 * time.Millisecond})
	await(t, "40 attempts or a dead letter", func() bool {
		rec := q.record(t, "k")
		return rec.Delivery.Attempts >= 40 || rec.State == dedup.Failed
	})
	if rec := q.record(t, "k"); rec.State == dedup.Failed {
		t.Errorf("dead-lettered after %d attempts within MaxAge, want retried", rec.Delivery.Attempts)
	}
}

// TestDeadLetteredAfterMaxAge: an event still failing MaxAge after it was
// accepted is dead-lettered at that failure, whatever its attempt count;
// one failing just short of MaxAge is retried. The workers' clock stands
// still a second past or a second short of MaxAge after the event was
// accepted, so a threshold off by more than that (twice MaxAge, half of
// it) fails one side, while > for >= changes nothing.
func TestDeadLetteredAfterMaxAge(t *testing.T) {
	const maxAge = time.Hour
	for _, tc := range []struct {
		name string
		age  time.Duration
		want dedup.State
	}{
		{"just past MaxAge: dead-lettered", maxAge + time.Second, dedup.Failed},
		{"just short of MaxAge: retried", maxAge - time.Second, dedup.Queued},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApp(t, func(string) (int, string) { return http.StatusInternalServerError, "" })
			q := newQueue(t)
			// The store stamps the event accepted with its own clock, to
			// the millisecond, somewhere between these two.
			before := time.Now().Truncate(time.Millisecond)
			q.enqueue(t, "k", webhookRequest("{}"))
			after := time.Now()
			// Past MaxAge: at least age after the latest it can have been
			// accepted; short of it: at most age after the earliest.
			now := before.Add(tc.age)
			if tc.want == dedup.Failed {
				now = after.Add(tc.age)
			}
			// The retry is due an hour ahead of the store's clock: one
			// attempt within the test.
			run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), MaxAge: maxAge, Now: func() time.Time { return now }})
			await(t, "the attempt settled", func() bool { return q.record(t, "k").Delivery.LastStatus != 0 })
			if rec := q.record(t, "k"); rec.State != tc.want || rec.Delivery.Attempts != 1 {
				t.Errorf("an event failing %s after it was accepted (RETRY_MAX_AGE %s): %s after %d attempts, want %s after 1",
					tc.age, maxAge, rec.State, rec.Delivery.Attempts, tc.want)
			}
			if n := len(a.requests()); n != 1 {
				t.Errorf("the app received %d attempts, want 1", n)
			}
		})
	}
}

// TestUnreachableAppIsRetried: a connection error is a failed attempt.
func TestUnreachableAppIsRetried(t *testing.T) {
	a := newApp(t, nil)
	u := mustURL(t, a.URL)
	a.Close()
	q := newQueue(t)
	q.enqueue(t, "k", webhookRequest("{}"))
	run(t, Config{Queue: q, Upstream: u, InitialInterval: time.Hour})
	await(t, "retry", func() bool { return q.record(t, "k").Delivery.LastError != "" })
	if rec := q.record(t, "k"); rec.Delivery.LastStatus != 0 || rec.State != dedup.Queued || rec.Delivery.NextAttemptAt.IsZero() {
		t.Errorf("after a connection error: %s %+v; want queued, no status, a next attempt", rec.State, rec.Delivery)
	}
}

// TestBackoff: full jitter under a ceiling that doubles from
// InitialInterval up to MaxInterval; a Retry-After on 429 or 503 sets a
// floor, itself capped at MaxInterval; on other statuses it is ignored.
func TestBackoff(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	w := New(Config{InitialInterval: time.Second, MaxInterval: time.Minute, Now: func() time.Time { return now },
		Jitter: func(d time.Duration) time.Duration { return d }})
	for _, tc := range []struct {
		attempt int
		want    time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {6, 32 * time.Second}, {7, time.Minute}, {70, time.Minute}, {1000, time.Minute}} {
		if got := w.backoff(tc.attempt, &outcome{status: 500, header: http.Header{}}); got != tc.want {
			t.Errorf("ceiling after attempt %d: %s, want %s", tc.attempt, got, tc.want)
		}
	}
	zero := New(Config{InitialInterval: time.Second, MaxInterval: time.Minute, Now: func() time.Time { return now },
		Jitter: func(time.Duration) time.Duration { return 0 }})
	for _, tc := range []struct {
		status int
		ra     string
		want   time.Duration
	}{
		{429, "7", 7 * time.Second},
		{503, "7", 7 * time.Second},
		{503, now.Add(20 * time.Second).Format(http.TimeFormat), 20 * time.Second},
		{503, "3600", time.Minute},
		{500, "7", 0},
		{429, "soon", 0},
		{429, "-5", 0},
	} {
		o := &outcome{status: tc.status, header: http.Header{"Retry-After": {tc.ra}}}
		if got := zero.backoff(1, o); got != tc.want {
			t.Errorf("%d with Retry-After %q: %s, want %s", tc.status, tc.ra, got, tc.want)
		}
	}
	for i := 0; i < 100; i++ {
		if d := uniformJitter(time.Second); d < 0 || d > time.Second {
			t.Fatalf("jitter %s outside [0, 1s]", d)
		}
	}
}

// TestRetryAfterHonoured: a 429 with Retry-After schedules the next
// attempt no sooner than it says.
func TestRetryAfterHonoured(t *testing.T) {
	a := newApp(t, func(string) (int, string) { return http.StatusTooManyRequests, "30" })
	q := newQueue(t)
	q.enqueue(t, "k", webhookRequest("{}"))
	before := time.Now()
	run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), InitialInterval: time.Millisecond, MaxInterval: time.Hour})
	await(t, "retry", func() bool { return q.record(t, "k").Delivery.LastStatus == 429 })
	// The store keeps due times to the millisecond.
	if next := q.record(t, "k").Delivery.NextAttemptAt; next.Before(before.Add(30*time.Second - time.Millisecond)) {
		t.Errorf("next attempt at %s, less than Retry-After's 30s after %s", next, before)
	}
}

// TestConcurrencyBound: no more than Concurrency attempts at once, and
// that many when the queue has the work.
func TestConcurrencyBound(t *testing.T) {
	a := newApp(t, nil)
	release := a.holdAll(t)
	q := newQueue(t)
	for i := 0; i < 10; i++ {
		q.enqueue(t, "k"+string(rune('a'+i)), webhookRequest("{}"))
	}
	run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), Concurrency: 3, PollInterval: time.Millisecond})
	t.Cleanup(release) // before run's stop, should the test fail
	await(t, "three attempts at the app", func() bool { return a.inside.Load() == 3 })
	release()
	await(t, "all delivered", func() bool { return q.depth(t) == 0 && len(a.requests()) == 10 })
	if m := a.most.Load(); m != 3 {
		t.Errorf("at most %d attempts at once at the app, want 3", m)
	}
}

// TestNudge: with a poll interval far beyond the test, a nudge makes the
// workers take an event queued after they found the queue empty, whichever
// of the lane's two takers it wakes: one with no room, while the other
// holds it in a Take begun before the event was queued, passes it on
// (before that, this failed about once in 1,500 runs beside four
// CPU-bound processes; run 6,000 times since, never).
func TestNudge(t *testing.T) {
	a := newApp(t, nil)
	q := newQueue(t)
	w := New(Config{Queue: q, Upstream: mustURL(t, a.URL), PollInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-q.takes // the first look, at an empty queue
	q.enqueue(t, "k", webhookRequest("{}"))
	w.Nudge()
	await(t, "delivery after a nudge", func() bool { return q.record(t, "k").State == dedup.Completed })
}

// TestShutdown: once Run's context is done nothing more is taken; an
// attempt that finishes before Drain's finish deadline settles; one that
// does not is cancelled and its event queued again, due at once.
func TestShutdown(t *testing.T) {
	t.Run("attempt finishes", func(t *testing.T) {
		a := newApp(t, nil)
		release := a.holdAll(t)
		q := newQueue(t)
		q.enqueue(t, "k1", webhookRequest("{}"))
		// An hour's poll: k2, queued without a nudge, is never looked for.
		stop := runDraining(t, Config{Queue: q, Upstream: mustURL(t, a.URL), PollInterval: time.Hour}, time.Minute)
		t.Cleanup(release) // before run's stop, should the test fail
		await(t, "the attempt at the app", func() bool { return a.inside.Load() == 1 })
		q.enqueue(t, "k2", webhookRequest("{}"))
		stopped := make(chan struct{})
		go func() { stop(); close(stopped) }()
		release() // the app answers while the workers are stopping
		<-stopped
		if rec := q.record(t, "k1"); rec.State != dedup.Completed {
			t.Errorf("running attempt: state %s after shutdown, want completed", rec.State)
		}
		if rec := q.record(t, "k2"); rec.State != dedup.Queued || rec.Delivery.Attempts != 0 {
			t.Errorf("event queued during shutdown: state %s, %d attempts; want queued, untouched", rec.State, rec.Delivery.Attempts)
		}
	})
	t.Run("the store does not take the outcome", func(t *testing.T) {
		a := newApp(t, nil)
		a.holdAll(t) // until the test ends: the attempt must outlast the drain
		deaf := make(chan struct{})
		t.Cleanup(func() { close(deaf) })
		q := &deafQueue{diskQueue: newQueue(t), deaf: deaf}
		q.enqueue(t, "k", webhookRequest("{}"))
		w := New(Config{Queue: q, Upstream: mustURL(t, a.URL)})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = w.Run(ctx); close(done) }()
		await(t, "the attempt at the app", func() bool { return a.inside.Load() == 1 })
		cancel()
		<-done
		finish, cancelFinish := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancelFinish()
		const exitAfter = 200 * time.Millisecond
		exit, cancelExit := context.WithTimeout(context.Background(), exitAfter)
		defer cancelExit()
		start := time.Now()
		drained := make(chan int, 1)
		go func() { drained <- w.Drain(finish, exit) }()
		select {
		case n := <-drained:
			if n != 1 {
				t.Errorf("Drain = %d unsettled, want 1: the store never took the cancelled attempt's event back", n)
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("Drain returned after %s, want at its exit deadline (200ms)", took)
			}
		case <-time.After(exitAfter + loadMargin):
			t.Errorf("Drain still waiting %s after it began, on a store that does not answer; want it back at its exit deadline (%s)", exitAfter+loadMargin, exitAfter)
		}
	})
	t.Run("taken ahead, delivered within the timeout", func(t *testing.T) {
		a := newApp(t, nil)
		release := a.holdAll(t)
		q := newQueue(t)
		q.enqueue(t, "k1", webhookRequest("{}"))
		q.enqueue(t, "k2", webhookRequest("{}"))
		stop := runDraining(t, Config{Queue: q, Upstream: mustURL(t, a.URL), Concurrency: 1}, time.Minute)
		t.Cleanup(release) // before run's stop, should the test fail
		await(t, "k1 at the app, k2 taken ahead", func() bool {
			return a.inside.Load() == 1 && q.record(t, "k2").State == dedup.Delivering
		})
		stopped := make(chan struct{})
		go func() { stop(); close(stopped) }()
		release()
		<-stopped
		for _, k := range []string{"k1", "k2"} {
			if rec := q.record(t, k); rec.State != dedup.Completed {
				t.Errorf("%s: state %s after shutdown, want completed", k, rec.State)
			}
		}
	})
	t.Run("taken ahead, given back at the timeout", func(t *testing.T) {
		a := newApp(t, nil)
		a.holdAll(t) // until the test ends: the attempt must outlast the drain
		q := newQueue(t)
		q.enqueue(t, "k1", webhookRequest("{}"))
		q.enqueue(t, "k2", webhookRequest("{}"))
		stop := runDraining(t, Config{Queue: q, Upstream: mustURL(t, a.URL), Concurrency: 1}, 20*time.Millisecond)
		await(t, "k1 at the app, k2 taken ahead", func() bool {
			return a.inside.Load() == 1 && q.record(t, "k2").State == dedup.Delivering
		})
		stop()
		for _, k := range []string{"k1", "k2"} {
			if rec := q.record(t, k); rec.State != dedup.Queued || rec.Delivery.NextAttemptAt.After(time.Now()) {
				t.Errorf("%s: %s %+v after shutdown; want queued again, due now", k, rec.State, rec.Delivery)
			}
		}
		if n := len(a.requests()); n != 1 {
			t.Errorf("the app got %d requests, want k1's only: k2 was never attempted", n)
		}
	})
	t.Run("attempt outlasts the timeout", func(t *testing.T) {
		a := newApp(t, nil)
		a.holdAll(t) // until the test ends: the attempt must outlast the drain
		q := newQueue(t)
		q.enqueue(t, "k", webhookRequest("{}"))
		stop := runDraining(t, Config{Queue: q, Upstream: mustURL(t, a.URL)}, 20*time.Millisecond)
		await(t, "the attempt at the app", func() bool { return a.inside.Load() == 1 })
		stop()
		rec := q.record(t, "k")
		if d := rec.Delivery; rec.State != dedup.Queued || d.LastError != errAbandoned.Error() || d.NextAttemptAt.After(time.Now()) {
			t.Errorf("abandoned attempt: %s %+v; want queued again, due now", rec.State, d)
		}
	})
}

// FuzzRetryAfter: any Retry-After value parses to a delay that is never
// negative, or to none.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "7", "-1", "3600", "99999999999999999999", "Wed, 21 Oct 2015 07:28:00 GMT", "soon", " 5"} {
		f.Add(s)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := retryAfter(v, now)
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("retryAfter(%q) = %s, %v", v, d, ok)
		}
	})
}

// TestDeadLetterLogNamesTheEvent: the dead-letter line names the event as
// the webhook lines do (namespace, event_id) and says how to retry it,
// with the CLI and the API filled in for this event.
func TestDeadLetterLogNamesTheEvent(t *testing.T) {
	a := newApp(t, func(string) (int, string) { return http.StatusBadGateway, "" })
	q := newQueue(t)
	req := webhookRequest("{}")
	req.Namespace = "/hooks/a:b" // a ':' in the namespace: the ID is what follows it
	q.enqueue(t, "wd:/hooks/a:b:it's 1", req)
	core, logs := observer.New(zap.InfoLevel)
	run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), MaxAttempts: 1, KeyPrefix: "wd:", Logger: zap.New(core)})
	await(t, "the dead-letter line", func() bool { return logs.FilterMessage("delivery failed for the last time: dead-lettered").Len() == 1 })
	line := logs.FilterMessage("delivery failed for the last time: dead-lettered").All()[0].ContextMap()
	want := map[string]any{
		"namespace":  "/hooks/a:b",
		"event_id":   "it's 1",
		"kept":       "168h0m0s", // the default DEAD_LETTER_TTL, as it is configured
		"retry_with": `webhook-dedup retry /hooks/a:b 'it'\''s 1', or POST /v1/events/%2Fhooks%2Fa:b/it%27s%201/retry on the admin port`,
	}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("dead-letter line: %s = %v, want %v", k, line[k], v)
		}
	}
}

// TestNudgeRoute: an event queued on a route wakes the lane that holds it
// and no other, whose Take would find nothing: its route's own lane, or
// the rest lane for a route without one (no longer async, or none).
func TestNudgeRoute(t *testing.T) {
	w := New(Config{Queue: newQueue(t), Upstream: mustURL(t, "http://app.test"), Routes: []string{"/a", "/b"}})
	for _, tc := range []struct {
		route string
		want  string // the label of the one lane nudged
	}{
		{"/a", "/a"},
		{"/b", "/b"},
		{"/gone", restLabel},
		{"", restLabel},
	} {
		t.Run(tc.want+" for "+strconv.Quote(tc.route), func(t *testing.T) {
			for _, l := range w.lanes {
				select {
				case <-l.nudge:
				default:
				}
			}
			w.NudgeRoute(tc.route)
			for _, l := range w.lanes {
				if got, want := len(l.nudge), map[bool]int{true: 1}[l.label == tc.want]; got != want {
					t.Errorf("lane %s: %d nudges pending, want %d", l.label, got, want)
				}
			}
		})
	}
}

// TestTakerReserve: a lane's Take asks for what is free of the
// deliveries it may hold (twice Concurrency), once at least half of
// Concurrency is free (at least one), so that a saturated lane's Takes
// each bring a batch rather than one delivery per settle.
func TestTakerReserve(t *testing.T) {
	for _, tc := range []struct {
		concurrency, held int
		want              int64
	}{
		{16, 0, 32},
		{16, 16, 16},
		{16, 24, 8},
		{16, 25, 0},
		{16, 31, 0},
		{16, 32, 0},
		{1, 0, 2},
		{1, 1, 1},
		{1, 2, 0},
		{3, 4, 2},
		{3, 5, 1},
	} {
		w := New(Config{Queue: newQueue(t), Upstream: mustURL(t, "http://app.test"), Concurrency: tc.concurrency})
		var held atomic.Int64
		held.Store(int64(tc.held))
		tk := w.newTaker(w.lanes[0], context.Background(), nil, &held)
		if got := tk.reserve(); got != tc.want {
			t.Errorf("Concurrency %d, %d held: reserved %d, want %d", tc.concurrency, tc.held, got, tc.want)
		}
		if got, want := held.Load(), int64(tc.held)+tc.want; got != want {
			t.Errorf("Concurrency %d, %d held: held %d after, want %d", tc.concurrency, tc.held, got, want)
		}
	}
}

// answerOK is a RoundTripper that answers every request 200 "ok" at once,
// without a network.
type answerOK struct{}

func (answerOK) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), ContentLength: 2, Request: r}, nil
}

// TestForwardPooledBuffers: relaying the app's answer into the attempt's
// outcome takes a pooled buffer, not the 32 KiB a ReverseProxy allocates
// per answer without one.
func TestForwardPooledBuffers(t *testing.T) {
	f := newForwarder(mustURL(t, "http://app.test"), answerOK{}, upstream.Completion{}, zap.NewNop())
	send := func() {
		req, err := inbound(webhookRequest(`{"id":"evt_1"}`), 1)
		if err != nil {
			t.Fatal(err)
		}
		if o := f.send(context.Background(), req); o.status != http.StatusOK {
			t.Fatalf("answered %d (%v), want 200", o.status, o.err)
		}
	}
	send() // the pool's first buffer
	const n = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		send()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per >= 16<<10 {
		t.Errorf("%d bytes allocated per attempt, want under 16 KiB", per)
	}
}
