package delivery

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// backlogEvery is how often the Backlog reads the queue's stats: how
// late /metrics may see the queue grow.
const backlogEvery = time.Second

// backlogIdle bounds the share of the time the Backlog spends reading the
// stats: after a read that took d, it waits at least backlogIdle × d
// before the next. A store whose stats scan the queue (PostgreSQL counts
// its rows) then spends at most a twentieth of one connection's time on
// them, however deep the backlog grows, rather than a scan a second.
const backlogIdle = 20

// errNotRead is the Backlog's answer before its first read of the stats.
var errNotRead = errors.New("delivery: the queue's stats are not read yet")

// Backlog keeps the queue's stats as last read, once a second in the
// background: what /metrics reports, at a cost that grows neither with
// the backlog nor with the rate of scrapes (a store whose Stats is not
// O(1), on a scrape every few seconds, would pay it each time).
// (QUEUE_MAX_DEPTH is the store's to check, as it enqueues: see
// dedup.Producer. PostgreSQL's reckoning of the depth starts again from
// each of these reads.)
type Backlog struct {
	stats StatsSource
	every time.Duration
	log   *zap.Logger

	mu   sync.Mutex
	last dedup.QueueStats
	at   time.Time // when last was read; zero before the first read
	err  error     // the last read's error, if it failed
}

// NewBacklog returns a Backlog of stats. Run reads.
func NewBacklog(stats StatsSource, log *zap.Logger) *Backlog {
	if log == nil {
		log = zap.NewNop()
	}
	return &Backlog{stats: stats, every: backlogEvery, log: log, err: errNotRead}
}

// Run reads the stats at once and then every second, or less often when a
// read takes longer than a twentieth of that (backlogPause), until ctx
// ends.
func (b *Backlog) Run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		b.read(ctx)
		t.Reset(backlogPause(b.every, time.Since(start)))
	}
}

// backlogPause is the wait after a read of the stats that lasted took:
// every, or backlogIdle times took if that is longer.
func backlogPause(every, took time.Duration) time.Duration {
	return max(every, backlogIdle*took)
}

func (b *Backlog) read(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, statsTimeout)
	st, err := b.stats.Stats(rctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		if b.err == nil {
			b.log.Warn("reading the queue's stats failed: /metrics leaves the queue gauges out until the store answers", zap.Error(err))
		}
		b.err = err
		return
	}
	if b.err != nil && b.err != errNotRead {
		b.log.Info("reading the queue's stats works again")
	}
	b.last, b.at, b.err = st, time.Now(), nil
}

// Stats returns the stats as last read, the oldest event's age carried on
// to now; an error when the last read failed, or before the first.
func (b *Backlog) Stats(context.Context) (dedup.QueueStats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return dedup.QueueStats{}, b.err
	}
	st := b.last
	if st.OldestAge > 0 {
		st.OldestAge += time.Since(b.at)
	}
	return st, nil
}
