package delivery

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/upstream"
)

// deadApp is a transport to an app that refuses every connection until
// the test brings it up, counting the attempts.
type deadApp struct {
	up       atomic.Bool
	attempts atomic.Int64
	next     http.RoundTripper
}

func (d *deadApp) RoundTrip(r *http.Request) (*http.Response, error) {
	d.attempts.Add(1)
	if !d.up.Load() {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
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
	app := &deadApp{next: upstream.NewTransport()}
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
	await(t, "every event delivered once the app answers", func() bool {
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
