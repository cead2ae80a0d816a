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
// of callers; a store that stops answering leaves the gauges out (an
// error) until it answers again.
func TestBacklog(t *testing.T) {
	src := &statsSeq{}
	b := NewBacklog(src, nil)
	if _, err := b.Stats(context.Background()); err == nil {
		t.Error("Stats before the first read: no error, want one (not an empty queue)")
	}
	ctx := context.Background()
	src.set(dedup.QueueStats{Depth: 99, OldestAge: time.Minute}, nil)
	b.read(ctx)
	for range 1000 {
		if st, err := b.Stats(ctx); err != nil || st.Depth != 99 || st.OldestAge < time.Minute {
			t.Fatalf("Stats = %+v, %v; want the last read, its oldest age carried on", st, err)
		}
	}
	if src.reads != 1 {
		t.Errorf("the queue was read %d times for 1000 Stats, want once", src.reads)
	}
	src.set(dedup.QueueStats{}, errors.New("store down"))
	b.read(ctx)
	if _, err := b.Stats(ctx); err == nil {
		t.Error("Stats after a failed read: no error, want the gauges left out")
	}
	src.set(dedup.QueueStats{Depth: 3}, nil)
	b.read(ctx)
	if st, err := b.Stats(ctx); err != nil || st.Depth != 3 {
		t.Errorf("Stats once the store answers again = %+v, %v; want depth 3", st, err)
	}
}

// slowStats is a queue whose stats take took to read, as PostgreSQL's do
// when they count a deep queue's rows; it records when each read began.
type slowStats struct {
	took   time.Duration
	mu     sync.Mutex
	starts []time.Time
}

func (s *slowStats) Stats(ctx context.Context) (dedup.QueueStats, error) {
	s.mu.Lock()
	s.starts = append(s.starts, time.Now())
	s.mu.Unlock()
	select {
	case <-time.After(s.took):
	case <-ctx.Done():
	}
	return dedup.QueueStats{Depth: 1}, nil
}

func (s *slowStats) reads() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.starts...)
}

// TestBacklogSlowStats: stats that take 20 ms to read are read at most
// every 400 ms (a twentieth of the time), not at the Backlog's usual
// pace (here 1 ms).
func TestBacklogSlowStats(t *testing.T) {
	const took = 20 * time.Millisecond
	src := &slowStats{took: took}
	b := NewBacklog(src, nil)
	b.every = time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	// Three reads, each twenty times its length after the one before.
	within := 2*20*took + 3*took + loadMargin
	deadline := time.Now().Add(within)
	for len(src.reads()) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	starts := src.reads()
	if len(starts) < 3 {
		t.Fatalf("%d reads in %s, want 3", len(starts), within)
	}
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < 400*time.Millisecond {
			t.Errorf("read %d began %v after the one before, want at least 400 ms (20 × the 20 ms a read takes)", i+1, gap)
		}
	}
}

func TestBacklogPause(t *testing.T) {
	for _, c := range []struct{ every, took, want time.Duration }{
		{time.Second, 0, time.Second},
		{time.Second, 50 * time.Millisecond, time.Second},
		{time.Second, 100 * time.Millisecond, 2 * time.Second},
		{time.Second, 400 * time.Millisecond, 8 * time.Second},
	} {
		if got := backlogPause(c.every, c.took); got != c.want {
			t.Errorf("backlogPause(%v, %v) = %v, want %v", c.every, c.took, got, c.want)
		}
	}
}
