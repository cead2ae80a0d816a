package delivery

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// refusingQueue is a real queue whose Succeed the test makes fail, as a
// store that refuses writes (restarting, failing over, a full disk) does.
type refusingQueue struct {
	*diskQueue
	refuse   atomic.Bool
	refused  atomic.Int32
	succeeds atomic.Int32
}

var errRefused = errors.New("the store refuses writes")

func (q *refusingQueue) Succeed(ctx context.Context, d dedup.Delivery, res dedup.Result, ttl time.Duration) error {
	q.succeeds.Add(1)
	if q.refuse.Load() {
		q.refused.Add(1)
		return errRefused
	}
	return q.diskQueue.Succeed(ctx, d, res, ttl)
}

// Extend is refused with the other writes: the lease runs out.
func (q *refusingQueue) Extend(ctx context.Context, d dedup.Delivery, lease time.Duration) error {
	if q.refuse.Load() {
		return errRefused
	}
	return q.diskQueue.Extend(ctx, d, lease)
}

// TestRecordedThroughAnOutage: when the store refuses the write that
// records an attempt the app answered 2xx, the workers keep the outcome
// and write it again until the store takes it, and the event is not
// delivered again meanwhile, even once its lease has run out and Take
// hands it out anew: the delivery is adopted, and its record written with
// it.
func TestRecordedThroughAnOutage(t *testing.T) {
	a := newApp(t, nil)
	q := &refusingQueue{diskQueue: newQueue(t)}
	q.refuse.Store(true)
	q.enqueue(t, "k1", webhookRequest(`{"id":"evt_1"}`))
	// A lease far shorter than the outage: Take hands the event out again
	// while its record is still being written.
	const lease = 300 * time.Millisecond
	run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), UpstreamTimeout: 100 * time.Millisecond, Lease: lease, PollInterval: 20 * time.Millisecond})
	awaitWithin(t, "the store to refuse a few tries and the lease to run out", lease, func() bool {
		return q.refused.Load() >= 5 && q.record(t, "k1").Delivery.Attempts >= 2
	})
	q.refuse.Store(false)
	await(t, "the record to be written", func() bool { return q.record(t, "k1").State == dedup.Completed })
	if n := len(a.requests()); n != 1 {
		t.Errorf("the app got the event %d times, want once: its record was still being written", n)
	}
}

// lateRetry is a real queue whose Retry returns only once a Take has
// handed something out after it: the event, due again at once, is taken
// again by this process before its holder has let go of it.
type lateRetry struct {
	*diskQueue
	took chan struct{}
}

func (q *lateRetry) Take(ctx context.Context, lane dedup.Lane, n int, lease time.Duration) ([]dedup.Delivery, error) {
	ds, err := q.diskQueue.Take(ctx, lane, n, lease)
	if len(ds) > 0 {
		signal(q.took)
	}
	return ds, err
}

func (q *lateRetry) Retry(ctx context.Context, d dedup.Delivery, next time.Time, status int, reason string) error {
	select {
	case <-q.took: // the Take that handed d out
	default:
	}
	err := q.diskQueue.Retry(ctx, d, next, status, reason)
	select {
	case <-q.took:
	case <-time.After(loadMargin): // a bound, should no Take come: the next poll's would
	}
	return err
}

// TestRetriedBeforeLetGo: a failed attempt whose retry is due at once,
// handed out again before its holder let go of the event, is attempted
// again (the holder goes on with it), not left leased to nobody until
// its lease runs out.
func TestRetriedBeforeLetGo(t *testing.T) {
	a := newApp(t, func(attempt string) (int, string) {
		if attempt == "1" {
			return http.StatusInternalServerError, ""
		}
		return http.StatusOK, ""
	})
	q := &lateRetry{diskQueue: newQueue(t), took: make(chan struct{}, 1)}
	q.enqueue(t, "k1", webhookRequest(`{"id":"evt_1"}`))
	run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), Lease: time.Minute, PollInterval: 20 * time.Millisecond,
		Jitter: func(time.Duration) time.Duration { return 0 }})
	await(t, "the second attempt to complete the event", func() bool { return q.record(t, "k1").State == dedup.Completed })
	if n := len(a.requests()); n != 2 {
		t.Errorf("the app got %d attempts, want 2", n)
	}
}

// countingBudget is a BodyBudget of size bytes that counts what is charged.
type countingBudget struct{ size, held int64 }

func (b *countingBudget) Room() int64    { return max(b.size-b.held, 0) }
func (b *countingBudget) Charge(n int64) { b.held += n }
func delivered(key, tok string, body int) dedup.Delivery {
	return dedup.Delivery{Claim: dedup.Claim{Key: key, Token: tok}, Request: dedup.Request{Body: make([]byte, body)}}
}

// TestHoldingChargesBodies: a delivery held is charged its body from hold
// to release; one adopted (the event taken again while held) is charged
// its new body instead of the old; and a lane takes only what the room
// left holds at the largest body each, one when it holds none.
func TestHoldingChargesBodies(t *testing.T) {
	b := &countingBudget{size: 100}
	var h holding
	h.bodies = b
	a := h.hold(delivered("a", "1", 30))
	if h.hold(delivered("b", "1", 20)) == nil || b.held != 50 {
		t.Fatalf("two held: %d bytes charged, want 50", b.held)
	}
	if h.hold(delivered("a", "2", 40)) != nil || b.held != 60 {
		t.Fatalf("a adopted with a body of 40: %d bytes charged, want 60", b.held)
	}
	a.use()
	if h.release(a) != nil || b.held != 20 {
		t.Fatalf("a released: %d bytes charged, want 20", b.held)
	}

	w := &Workers{cfg: Config{HeldBodies: b, MaxBody: 30}}
	var held atomic.Int64
	tk := &taker{w: w, held: &held}
	for _, tc := range []struct {
		charged, laneHeld, reserved int64
		want                        int
	}{
		{charged: 0, reserved: 8, want: 3},
		{charged: 20, reserved: 8, want: 2},
		{charged: 80, reserved: 8, want: 1},              // the lane holds none: one
		{charged: 80, laneHeld: 2, reserved: 8, want: 0}, // it holds some: it waits
	} {
		b.held = tc.charged
		held.Store(tc.laneHeld + tc.reserved)
		if got := tk.bodiesFit(tc.reserved); got != tc.want {
			t.Errorf("%d of %d bytes charged, the lane holding %d: %d fit, want %d", tc.charged, b.size, tc.laneHeld, got, tc.want)
		}
	}
}
