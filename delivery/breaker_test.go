package delivery

import (
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/upstream"
)

// deadApp is a transport to an app that refuses every connection until
// the test brings it up (its requests go to a closed port meanwhile),
// counting the attempts.
type deadApp struct {
	up       atomic.Bool
	attempts atomic.Int64
	closed   string // a loopback address nothing listens on
	next     http.RoundTripper
}

func newDeadApp(t *testing.T) *deadApp {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	return &deadApp{closed: closed, next: upstream.NewTransport()}
}

func (d *deadApp) RoundTrip(r *http.Request) (*http.Response, error) {
	d.attempts.Add(1)
	if !d.up.Load() {
		r = r.Clone(r.Context())
		r.URL.Host = d.closed
	}
	return d.next.RoundTrip(r)
}

// TestDeadAppProbed: while the app refuses every connection, the workers
// back off as a whole, one probe at a time with growing pauses, instead
// of making as many failing attempts a second as they can (1,400 a
// second in the report), and no event is dead-lettered or loses its
// place; once the app answers, every event is delivered at full
// concurrency.
func TestDeadAppProbed(t *testing.T) {
	a := newApp(t, nil)
	app := newDeadApp(t)
	q := newQueue(t)
	const n = 100
	for i := range n {
		q.enqueue(t, fmt.Sprint("k", i), webhookRequest("{}"))
	}
	run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), Transport: app, Concurrency: 16,
		InitialInterval: time.Millisecond, MaxInterval: time.Millisecond, PollInterval: 5 * time.Millisecond})
	// The rate is the point: let 1.5 s of the outage pass.
	time.Sleep(1500 * time.Millisecond)
	if got := app.attempts.Load(); got > 60 {
		t.Errorf("%d attempts in 1.5 s against an app refusing every connection, want the 16 that open the breaker and a few probes", got)
	}
	app.up.Store(true)
	// The next probe is due within a pause, at most MaxProbePause.
	awaitWithin(t, "every event delivered once the app answers", MaxProbePause, func() bool {
		for i := range n {
			if q.record(t, fmt.Sprint("k", i)).State != dedup.Completed {
				return false
			}
		}
		return true
	})
	if got := len(a.requests()); got != n {
		t.Errorf("the app got %d requests, want each of the %d events once", got, n)
	}
}

// TestOurFailuresLeaveBreakerClosed: attempts that fail on the proxy's
// side before the app is asked (a queued request that cannot be rebuilt,
// one the transport refuses as it stands) say nothing about the app:
// however many in a row, they do not take it for down, and an event
// queued behind them is delivered at once.
func TestOurFailuresLeaveBreakerClosed(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*dedup.Request)
	}{
		{"queued request cannot be rebuilt", func(r *dedup.Request) { r.RequestURI = "::not a URI" }},
		{"transport refuses the request", func(r *dedup.Request) { r.Header.Set("X-Bad", "a\x00b") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApp(t, nil)
			q := newQueue(t)
			const concurrency, bad = 4, 20 // the breaker trips after 5 unanswered
			for i := range bad {
				req := webhookRequest("{}")
				req.Header = req.Header.Clone()
				tc.edit(&req)
				q.enqueue(t, fmt.Sprint("bad", i), req)
			}
			core, logs := observer.New(zap.InfoLevel)
			run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), Concurrency: concurrency, Logger: zap.New(core),
				InitialInterval: time.Millisecond, MaxInterval: time.Millisecond, PollInterval: 5 * time.Millisecond})
			await(t, "every bad event tried", func() bool {
				for i := range bad {
					if q.record(t, fmt.Sprint("bad", i)).Delivery.LastError == "" {
						return false
					}
				}
				return true
			})
			q.enqueue(t, "good", webhookRequest("{}"))
			await(t, "the good event delivered", func() bool { return q.record(t, "good").State == dedup.Completed })
			if n := logs.FilterMessageSnippet("the app does not answer").Len(); n > 0 {
				t.Errorf("%d failures of our own took the app for down", bad)
			}
			if got := len(a.requests()); got != 1 {
				t.Errorf("the app got %d requests, want the good event's one", got)
			}
		})
	}
}

// TestBreakerStragglers: attempts that are not the probe (under way when
// the breaker opened, or taken ahead before it did) and go unanswered
// after it opened neither end the probe out nor lengthen the pause: the
// probes stay one at a time, paced from FirstProbePause.
func TestBreakerStragglers(t *testing.T) {
	b := breaker{trip: 2}
	t0 := time.Now()
	b.record(false, false, t0)
	if opened, _ := b.record(false, false, t0.Add(time.Millisecond)); !opened {
		t.Fatal("two unanswered attempts in a row did not open the breaker (trip 2)")
	}
	opened := t0.Add(time.Millisecond)
	b.record(false, false, opened.Add(10*time.Millisecond)) // a straggler
	if n, _, wait := b.allow(4, opened.Add(10*time.Millisecond)); n != 0 || wait != FirstProbePause-10*time.Millisecond {
		t.Fatalf("after a straggler: allow %d, wait %s; want none until the first probe, %s after opening", n, wait, FirstProbePause)
	}
	probeAt := opened.Add(FirstProbePause)
	if n, probe, _ := b.allow(4, probeAt); n != 1 || !probe {
		t.Fatalf("at the first probe's time: allow %d, probe %v; want one probe", n, probe)
	}
	b.record(false, false, probeAt.Add(time.Millisecond)) // another straggler, the probe out
	if n, _, _ := b.allow(4, probeAt.Add(time.Second)); n != 0 {
		t.Fatalf("a straggler let a second probe out beside the first")
	}
	b.record(false, true, probeAt.Add(time.Millisecond)) // the probe, unanswered
	if n, _, wait := b.allow(4, probeAt.Add(time.Millisecond)); n != 0 || wait != 2*FirstProbePause {
		t.Fatalf("after the first probe went unanswered: allow %d, wait %s; want none for %s", n, wait, 2*FirstProbePause)
	}
	if _, closed := b.record(true, true, probeAt.Add(2*time.Millisecond)); !closed {
		t.Fatal("an answer did not close the breaker")
	}
}
