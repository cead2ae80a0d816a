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

// held is a delivery this process holds, from its Take until its outcome
// is written: as the store knows it now. That changes when the store hands
// the event out again to this process (its lease ran out while the store
// was away), and the holding adopts the new delivery instead of sending
// the event to the app a second time.
type held struct {
	mu sync.Mutex
	d  dedup.Delivery
	// used is the token of the delivery the holder last attempted or
	// wrote an outcome with: a delivery adopted after it (the event due
	// again at once, and taken by this process before the holder let
	// go) is still to be attempted.
	used string
}

// current is the delivery that owns the event now.
func (h *held) current() dedup.Delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.d
}

// use returns the delivery that owns the event now, noting that the
// holder attempts or settles it.
func (h *held) use() dedup.Delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.used = h.d.Claim.Token
	return h.d
}

// holding is the deliveries this process holds, by event key: their
// attempts under way, and the outcomes the app gave that the store has not
// recorded yet (a Redis restarting, a database failing over, a full disk).
// While an event is held here it is never handed to the app again from
// this process, and its lease is kept.
//
// The body of each delivery held is charged to bodies (when set) from
// hold to release: the budget of the bodies in memory counts it.
type holding struct {
	mu     sync.Mutex
	byKey  map[string]*held
	bodies BodyBudget
}

// BodyBudget is the budget of the bodies held in memory
// (MAX_BUFFERED_BYTES): Room is what is left of it, and Charge counts n
// bytes already in memory against it, whatever the room (gives -n back,
// when negative).
type BodyBudget interface {
	Room() int64
	Charge(n int64)
}

// charge counts n more bytes held (fewer, when negative).
func (h *holding) charge(n int64) {
	if h.bodies != nil && n != 0 {
		h.bodies.Charge(n)
	}
}

// hold notes that this process holds d, unless it holds d's event
// already: then d is adopted (the holder goes on with it, as the owner
// the store knows now) and hold returns nil, for d not to be delivered.
func (h *holding) hold(d dedup.Delivery) *held {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byKey == nil {
		h.byKey = map[string]*held{}
	}
	if old, ok := h.byKey[d.Claim.Key]; ok {
		old.mu.Lock()
		h.charge(int64(len(d.Request.Body) - len(old.d.Request.Body)))
		old.d = d
		old.mu.Unlock()
		return nil
	}
	nh := &held{d: d}
	h.byKey[d.Claim.Key] = nh
	h.charge(int64(len(d.Request.Body)))
	return nh
}

// count is how many deliveries this process holds.
func (h *holding) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byKey)
}

// release lets go of h once its attempt is settled, unless this process
// took the event again after the holder last used its delivery (a retry
// due at once, handed out again before the holder let go): then h holds
// that delivery, still to be attempted, and is returned; else nil.
func (h *holding) release(hd *held) *held {
	h.mu.Lock()
	defer h.mu.Unlock()
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if hd.d.Claim.Token != hd.used {
		return hd
	}
	delete(h.byKey, hd.d.Claim.Key)
	h.charge(-int64(len(hd.d.Request.Body)))
	return nil
}

// adopted reports whether the delivery d, which the store says no longer
// owns its event, was adopted by another that this process took: the
// lease d held ran out, and the Take that handed the event out again may
// still be on its way back, so a short while is given for it to come (a
// poll, and then some).
func (w *Workers) adopted(ctx context.Context, h *held, d dedup.Delivery) bool {
	deadline := time.Now().Add(2*w.cfg.PollInterval + w.cfg.StoreTimeout)
	for h.current().Claim.Token == d.Claim.Token {
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

// write writes an attempt's outcome with the delivery that owns the event
// now, bounded by StoreTimeout; if the store says that delivery no longer
// owns it because this process took the event again meanwhile, it writes
// again with the one adopted.
func (w *Workers) write(ctx context.Context, h *held, op func(context.Context, dedup.Delivery) error) error {
	for {
		d := h.use()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.StoreTimeout)
		err := op(sctx, d)
		cancel()
		if !errors.Is(err, dedup.ErrNotOwner) || !w.adopted(ctx, h, d) {
			return err
		}
	}
}

// keep renews h's lease, a third of it before it would run out, until
// the returned stop is called: a delivery taken ahead that waits for a
// worker, an attempt that takes long, or an outcome the store is slow to
// take, is not taken over by another worker, which would deliver the
// event a second time. Only a process that dies (or
// loses the store for a whole lease) lets its deliveries be taken over.
// A failed renewal is tried again at the next turn; the outcome's own
// write says what matters. A timer, not a goroutine, waits for each turn:
// most deliveries settle long before their first, and a goroutine per
// delivery cost its scheduling on every event.
func (w *Workers) keep(ctx context.Context, h *held, route string) (stop func()) {
	k := &keeper{w: w, h: h, route: route, base: context.WithoutCancel(ctx)}
	k.mu.Lock()
	k.t = time.AfterFunc(w.cfg.Lease/3, k.renew)
	k.mu.Unlock()
	return k.stop
}

// keeper renews one delivery's lease (keep).
type keeper struct {
	w     *Workers
	h     *held
	route string
	base  context.Context

	mu      sync.Mutex
	t       *time.Timer
	stopped bool
	// cancel ends the renewal under way; nil when none is.
	cancel context.CancelFunc
	// renewing counts the renewals under way, for stop to wait for.
	renewing sync.WaitGroup
}

// renew renews the lease once, and sets the timer for the next turn.
func (k *keeper) renew() {
	w := k.w
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(k.base, w.cfg.StoreTimeout)
	k.cancel = cancel
	k.renewing.Add(1)
	k.mu.Unlock()
	defer k.renewing.Done()

	d := k.h.current()
	err := w.cfg.Queue.Extend(ctx, d, w.cfg.Lease)
	cancel()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cancel = nil
	if k.stopped {
		return
	}
	if err != nil {
		w.log.Debug("renewing a delivery's lease failed: trying again", zap.String("event", d.Claim.Key), zap.String("route", k.route), zap.Error(err))
	}
	k.t.Reset(w.cfg.Lease / 3)
}

// stop ends the renewals: the next does not come, and the one under way,
// if any, is cancelled and waited for.
func (k *keeper) stop() {
	k.mu.Lock()
	k.stopped = true
	k.t.Stop()
	if k.cancel != nil {
		k.cancel()
	}
	k.mu.Unlock()
	k.renewing.Wait()
}

// succeed records that the app took h's event with res, kept for ttl,
// and the attempt as timed says. A
// store that refuses the write is asked again, with growing pauses, until
// it takes it, the event is lost to another worker (dedup.ErrNotOwner:
// its lease ran out, and a process sharing the store took it over), or
// ctx ends (shutdown, past its grace period); each try is bounded by
// StoreTimeout.
func (w *Workers) succeed(ctx context.Context, h *held, timed func(dedup.Delivery) dedup.Delivery, res dedup.Result, ttl time.Duration, fields []zap.Field) error {
	pause := firstRecordPause
	for tries := 1; ; tries++ {
		err := w.write(ctx, h, func(ctx context.Context, d dedup.Delivery) error {
			return w.cfg.Queue.Succeed(ctx, timed(d), res, ttl)
		})
		switch {
		case err == nil:
			if tries > 1 {
				w.log.Info("the store took the record of a delivery the app took, at last: it is not delivered again", append(fields, zap.Int("tries", tries))...)
			}
			return nil
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
