package delivery

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// memQueue is a small in-process dedup.Queue for these tests: the workers'
// side of the contract (take, lease, settle). The stores' own queues are
// held to the whole contract by dedup's conformance suite.
type memQueue struct {
	mu     sync.Mutex
	now    func() time.Time
	events map[string]*memEvent
	order  []string
	tokens int
	takes  chan int // receives n of every Take, if there is room
}

type memEvent struct {
	req        dedup.Request
	state      dedup.State
	token      string
	attempts   int
	due        time.Time
	leased     time.Time
	accepted   time.Time
	status     int
	reason     string
	ttl        time.Duration
	result     dedup.Result
	retries    []time.Time
	failedKeep time.Duration
}

func newMemQueue() *memQueue {
	return &memQueue{now: time.Now, events: map[string]*memEvent{}, takes: make(chan int, 1024)}
}

func (q *memQueue) Enqueue(_ context.Context, key string, req dedup.Request) (bool, dedup.Record, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if ev, ok := q.events[key]; ok {
		return false, dedup.Record{State: ev.state}, nil
	}
	q.events[key] = &memEvent{req: req, state: dedup.Queued, accepted: q.now(), due: q.now()}
	q.order = append(q.order, key)
	return true, dedup.Record{}, nil
}

func (q *memQueue) Take(_ context.Context, n int, lease time.Duration) ([]dedup.Delivery, error) {
	select {
	case q.takes <- n:
	default:
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	var out []dedup.Delivery
	for _, key := range q.order {
		if len(out) == n {
			break
		}
		ev := q.events[key]
		due := ev.state == dedup.Queued && !ev.due.After(now)
		expired := ev.state == dedup.Delivering && now.After(ev.leased.Add(lease))
		if !due && !expired {
			continue
		}
		q.tokens++
		ev.token, ev.state, ev.leased = strconv.Itoa(q.tokens), dedup.Delivering, now
		ev.attempts++
		out = append(out, dedup.Delivery{Claim: dedup.Claim{Key: key, Token: ev.token}, Request: ev.req, Attempt: ev.attempts, AcceptedAt: ev.accepted})
	}
	return out, nil
}

func (q *memQueue) owned(d dedup.Delivery) (*memEvent, error) {
	ev, ok := q.events[d.Claim.Key]
	if !ok || ev.token != d.Claim.Token || ev.state != dedup.Delivering {
		return nil, dedup.ErrNotOwner
	}
	return ev, nil
}

func (q *memQueue) Succeed(_ context.Context, d dedup.Delivery, res dedup.Result, ttl time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	ev, err := q.owned(d)
	if err != nil {
		return err
	}
	ev.state, ev.result, ev.ttl, ev.token = dedup.Completed, res, ttl, ""
	return nil
}

func (q *memQueue) Retry(_ context.Context, d dedup.Delivery, next time.Time, status int, reason string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	ev, err := q.owned(d)
	if err != nil {
		return err
	}
	ev.state, ev.due, ev.status, ev.reason, ev.token = dedup.Queued, next, status, reason, ""
	ev.retries = append(ev.retries, next)
	return nil
}

func (q *memQueue) Fail(_ context.Context, d dedup.Delivery, status int, reason string, keep time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	ev, err := q.owned(d)
	if err != nil {
		return err
	}
	ev.state, ev.status, ev.reason, ev.failedKeep, ev.token = dedup.Failed, status, reason, keep, ""
	return nil
}

func (q *memQueue) Stats(context.Context) (dedup.QueueStats, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var st dedup.QueueStats
	for _, ev := range q.events {
		switch ev.state {
		case dedup.Queued:
			st.Depth++
		case dedup.Failed:
			st.DeadLetters++
		}
	}
	return st, nil
}

// event returns a copy of key's event.
func (q *memQueue) event(key string) memEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	if ev, ok := q.events[key]; ok {
		return *ev
	}
	return memEvent{}
}

// makeDue makes every queued event due now (a retry's time has come).
func (q *memQueue) makeDue() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, ev := range q.events {
		ev.due = time.Time{}
	}
}
