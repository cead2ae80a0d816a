package delivery

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// Pauses between the tries of writing down a delivery the app took.
const (
	firstRecordPause = 50 * time.Millisecond
	maxRecordPause   = time.Second
)

// recording is the outcomes of the deliveries the app took (answered 2xx)
// that the store has not recorded yet, by event key: each is kept here and
// its write tried again until the store takes it (a Redis restarting, a
// database failing over, a full disk), and meanwhile the event is never
// handed to the app again from this process.
type recording struct {
	mu      sync.Mutex
	pending map[string]*dedup.Delivery
}

// start notes that d's outcome is being recorded, and returns the
// delivery to record it with: d, or the one adopt gave it since.
func (r *recording) start(d dedup.Delivery) func() dedup.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = map[string]*dedup.Delivery{}
	}
	held := &d
	r.pending[d.Claim.Key] = held
	return func() dedup.Delivery {
		r.mu.Lock()
		defer r.mu.Unlock()
		return *held
	}
}

// done forgets key's pending outcome.
func (r *recording) done(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, key)
}

// adopt reports whether d is the event of an outcome still being recorded,
// handed out again because its lease ran out meanwhile; the recording
// then goes on with d, which now owns the event, and d is not delivered.
func (r *recording) adopt(d dedup.Delivery) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	held, ok := r.pending[d.Claim.Key]
	if ok {
		*held = d
	}
	return ok
}

// adopted reports whether the delivery being recorded as d was adopted by
// another that this process took: the lease d held ran out, and the Take
// that handed the event out again may still be on its way back, so a
// short while is given for it to come (a poll, and then some).
func (w *Workers) adopted(ctx context.Context, current func() dedup.Delivery, d dedup.Delivery) bool {
	deadline := time.Now().Add(2*w.cfg.PollInterval + w.cfg.StoreTimeout)
	for current().Claim.Token == d.Claim.Token {
		if time.Now().After(deadline) {
			return false
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
	return true
}

// succeed records that the app took d's event with res, kept for ttl. A
// store that refuses the write is asked again, with growing pauses, until
// it takes it, the event is lost to another worker (dedup.ErrNotOwner:
// its lease ran out, and a process sharing the store took it over), or
// ctx ends (shutdown, past its grace period); each try is bounded by
// StoreTimeout.
func (w *Workers) succeed(ctx context.Context, d dedup.Delivery, res dedup.Result, ttl time.Duration, fields []zap.Field) error {
	current := w.recording.start(d)
	defer w.recording.done(d.Claim.Key)
	pause := firstRecordPause
	for tries := 1; ; tries++ {
		d := current()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.StoreTimeout)
		err := w.cfg.Queue.Succeed(sctx, d, res, ttl)
		cancel()
		switch {
		case err == nil:
			if tries > 1 {
				w.log.Info("the store took the record of a delivery the app took, at last: it is not delivered again", append(fields, zap.Int("tries", tries))...)
			}
			return nil
		case errors.Is(err, dedup.ErrNotOwner) && w.adopted(ctx, current, d):
			// The event's lease ran out while the store was away, and this
			// process took it again: write the record with that delivery.
			continue
		case errors.Is(err, dedup.ErrNotOwner), ctx.Err() != nil:
			return err
		case tries == 1:
			w.log.Warn("recording a delivery the app took failed: keeping its outcome, and trying again until the store takes it", append(fields, zap.Error(err))...)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, maxRecordPause)
	}
}
