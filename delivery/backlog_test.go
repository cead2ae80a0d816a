package delivery

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// statsSeq is a queue whose stats the test sets.
type statsSeq struct {
	mu    sync.Mutex
	st    dedup.QueueStats
	err   error
	reads int
}

func (s *statsSeq) Stats(context.Context) (dedup.QueueStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return s.st, s.err
}

func (s *statsSeq) set(st dedup.QueueStats, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st, s.err = st, err
}

// TestBacklog: the Backlog answers from its last read, whatever the number
// of callers; it is full from QUEUE_MAX_DEPTH on and not below; a store
// that stops answering leaves the gauges out (an error) but the last depth
// standing for the check.
func TestBacklog(t *testing.T) {
	src := &statsSeq{}
	b := NewBacklog(src, 100, nil)
	if _, err := b.Stats(context.Background()); err == nil {
		t.Error("Stats before the first read: no error, want one (not an empty queue)")
	}
	ctx := context.Background()
	src.set(dedup.QueueStats{Depth: 99, OldestAge: time.Minute}, nil)
	b.read(ctx)
	if b.Full() {
		t.Error("full at 99 of 100")
	}
	for range 1000 {
		if st, err := b.Stats(ctx); err != nil || st.Depth != 99 || st.OldestAge < time.Minute {
			t.Fatalf("Stats = %+v, %v; want the last read, its oldest age carried on", st, err)
		}
	}
	if src.reads != 1 {
		t.Errorf("the queue was read %d times for 1000 Stats, want once", src.reads)
	}
	src.set(dedup.QueueStats{Depth: 100}, nil)
	b.read(ctx)
	if !b.Full() {
		t.Error("not full at 100 of 100")
	}
	src.set(dedup.QueueStats{}, errors.New("store down"))
	b.read(ctx)
	if _, err := b.Stats(ctx); err == nil {
		t.Error("Stats after a failed read: no error, want the gauges left out")
	}
	if !b.Full() {
		t.Error("a failed read emptied the queue for QUEUE_MAX_DEPTH")
	}
	src.set(dedup.QueueStats{Depth: 3}, nil)
	b.read(ctx)
	if b.Full() {
		t.Error("still full once drained to 3")
	}
	if unbounded := NewBacklog(&statsSeq{st: dedup.QueueStats{Depth: 1 << 30}}, 0, nil); func() bool { unbounded.read(ctx); return unbounded.Full() }() {
		t.Error("QUEUE_MAX_DEPTH=0 (no bound) reported full")
	}
}
