package delivery

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/diskstore"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// diskQueue is the embedded store on disk (a real queue, in a fresh
// directory) that tells the test of every Take.
type diskQueue struct {
	*diskstore.Store
	takes chan int // receives n of every Take, if there is room
}

func newQueue(t *testing.T) *diskQueue {
	t.Helper()
	d, err := diskstore.Open(diskstore.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return &diskQueue{Store: d, takes: make(chan int, 1024)}
}

func (q *diskQueue) Take(ctx context.Context, lane dedup.Lane, n int, lease time.Duration) ([]dedup.Delivery, error) {
	select {
	case q.takes <- n:
	default:
	}
	return q.Store.Take(ctx, lane, n, lease)
}

func (q *diskQueue) enqueue(t *testing.T, key string, req dedup.Request) {
	t.Helper()
	if ok, rec, err := q.Enqueue(context.Background(), key, req, 0); err != nil || !ok {
		t.Fatalf("enqueue %s: %v, %+v, %v", key, ok, rec, err)
	}
}

// record is key's record; the zero Record (Absent) if there is none.
func (q *diskQueue) record(t *testing.T, key string) dedup.Record {
	t.Helper()
	rec, err := q.Lookup(context.Background(), key)
	if err != nil && !errors.Is(err, dedup.ErrNotFound) {
		t.Fatal(err)
	}
	return rec
}

func (q *diskQueue) depth(t *testing.T) int {
	t.Helper()
	st, err := q.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Depth
}

// deafQueue is a queue whose store takes no outcome until deaf is closed,
// whatever the caller's context says: a store that stopped answering.
type deafQueue struct {
	*diskQueue
	deaf chan struct{}
}

func (q *deafQueue) Succeed(ctx context.Context, d dedup.Delivery, res dedup.Result, ttl time.Duration) error {
	<-q.deaf
	return q.diskQueue.Succeed(ctx, d, res, ttl)
}

func (q *deafQueue) Retry(ctx context.Context, d dedup.Delivery, next time.Time, status int, reason string) error {
	<-q.deaf
	return q.diskQueue.Retry(ctx, d, next, status, reason)
}
