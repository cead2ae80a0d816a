package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// depthView is this process's reckoning of how many events wait for
// delivery (QueueStats.Depth), which Enqueue checks its maxDepth
// (QUEUE_MAX_DEPTH) against without a round trip of its own. The exact
// count is a scan of the waiting rows (140–270 ms with 100,000 of them
// on the test server), too dear for every enqueue; a counter row that
// every enqueue, Take and retry updated would make them all wait for each
// other, and could not count a lease running out. So the depth is read
// now and then (Stats: the delivery Backlog's read every second, or
// Enqueue's own once it finds the queue full), and between two reads this
// process adds what it changes itself:
//
//	depth = last read + raised since it began + enqueues under way − taken since it ended
//
// where raised counts the events this process made wait (enqueues it
// won, or may have won, retries, requeues) and taken the deliveries its
// Takes leased. Each change is counted where the read may not have seen
// it, at the risk of counting it twice (an enqueue that committed while
// the read ran), and a Take only when it began after the read ended:
// the reckoning is never below what this process alone made of the
// depth, so this process alone never passes the bound, however its
// events arrive. What it may have counted twice (doubt) is kept too: a
// refusal that would not stand without it reads the depth again at
// once, rather than after the pause, so that this process alone never
// refuses below the bound either (the changes it made while a read ran
// are as many as it made then: under load, a read that waited long for
// the CPU overlapped as many enqueues, which refused as many too early). What it does not see before its next read is the other
// replicas' work: the events they made wait (their acceptances, retries
// and requeues) and the leases that ran out since the read (a replica
// that died) are the slack by which the queue may pass the bound; the
// deliveries they took make it refuse early. It is safe for concurrent
// use.
type depthView struct {
	mu sync.Mutex
	// read is the depth last read, known whether it was read at all.
	read  int
	known bool
	// readEnd is when that read ended, and readTook how long it took:
	// Enqueue reads again once the queue looks full and the read is
	// older than depthReadPause says.
	readEnd  time.Time
	readTook time.Duration
	// begun numbers the reads as they begin; applied is the number of
	// the one in read. An older read that ends after a newer one is
	// dropped.
	begun, applied uint64
	// raised counts, since the store opened, the events this process
	// made wait; base is what it was when the read in read began.
	raised, base uint64
	// pending counts the enqueues admitted and not yet answered.
	pending int
	// taken counts the deliveries leased by the Takes of epoch, which
	// changes with each read applied: a Take begun before then may be in
	// the read.
	taken int
	epoch uint64
	// doubt is how much of the reckoning the read in read may have
	// counted already, or counted as waiting when it was not: the
	// events raised from its beginning to its end, the enqueues under
	// way at its end, and the deliveries leased by Takes begun before it
	// was applied.
	doubt int
}

// depthRead marks a read of the depth as it begins.
type depthRead struct {
	n, base uint64
	start   time.Time
}

// depthReadEvery and depthReadIdle pace Enqueue's own reads, as the
// delivery Backlog paces its: at most one a second, and at least 20 times
// a read's length apart, so that a full queue whose count is a long scan
// takes at most a twentieth of one connection's time.
const (
	depthReadEvery = time.Second
	depthReadIdle  = 20
)

// admit counts an enqueue as under way and reports true if the depth
// reckoned is below maxDepth (any depth when maxDepth is not positive).
// Otherwise it reports false, and stale when a read would tell more: none
// yet, or the last one older than its pause.
func (v *depthView) admit(maxDepth int, now time.Time) (ok, stale bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if maxDepth > 0 {
		if !v.known {
			return false, true
		}
		if v.reckoned() >= maxDepth {
			return false, v.dueAt(maxDepth, now)
		}
	}
	v.pending++
	return true, false
}

// reckoned is the depth as this process reckons it. v.mu must be held.
func (v *depthView) reckoned() int {
	return v.read + int(v.raised-v.base) + v.pending - v.taken
}

// dueAt reports whether a read is due at now for an enqueue bounded by
// maxDepth: none yet, the last one older than its pause, or a refusal
// that stands only by what the reckoning may have counted twice. v.mu
// must be held.
func (v *depthView) dueAt(maxDepth int, now time.Time) bool {
	depth := v.reckoned()
	return v.staleAt(now) || depth >= maxDepth && depth-v.doubt < maxDepth
}

// staleAt reports whether a read is due at now by its age. v.mu must be
// held.
func (v *depthView) staleAt(now time.Time) bool {
	return !v.known || now.Sub(v.readEnd) >= max(depthReadEvery, depthReadIdle*v.readTook)
}

// answered ends an enqueue admit let through: raised if it queued the
// event, or may have (its answer lost).
func (v *depthView) answered(raised bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pending--
	if raised {
		v.raised++
	}
}

// raise counts an event this process made wait other than by an enqueue:
// a retry or a requeue (or one that may have been).
func (v *depthView) raise() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.raised++
}

// takeBegins is the epoch a Take begins in, for took.
func (v *depthView) takeBegins() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.epoch
}

// took counts n deliveries leased by a Take begun in epoch, unless a read
// was applied since it began (that read may have counted them).
func (v *depthView) took(epoch uint64, n int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if epoch == v.epoch {
		v.taken += n
	} else {
		v.doubt += n
	}
}

// beginRead marks a read of the depth beginning now.
func (v *depthView) beginRead(now time.Time) depthRead {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.begun++
	return depthRead{n: v.begun, base: v.raised, start: now}
}

// endRead takes depth, read by r, as the reckoning's new start, unless a
// read that began later was applied already.
func (v *depthView) endRead(r depthRead, depth int, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if r.n <= v.applied {
		return
	}
	v.read, v.known, v.applied, v.base = depth, true, r.n, r.base
	v.readEnd, v.readTook = now, now.Sub(r.start)
	v.taken = 0
	v.doubt = int(v.raised-r.base) + v.pending
	v.epoch++
}

// isKnown reports whether the depth was read at all.
func (v *depthView) isKnown() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.known
}

// due is dueAt, v.mu taken.
func (v *depthView) due(maxDepth int, now time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.dueAt(maxDepth, now)
}

// admit lets an enqueue through if the queue has room for it as the
// depth view reckons (see depthView), reading the depth first when the
// view has none yet, or when it finds the queue full on a read that is
// due again or on what it may have counted twice. An admitted enqueue is
// answered to the view (answered).
func (s *Store) admit(ctx context.Context, maxDepth int) (bool, error) {
	ok, stale := s.depth.admit(maxDepth, time.Now())
	if ok || !stale {
		return ok, nil
	}
	if err := s.readDepth(ctx, maxDepth); err != nil {
		return false, err
	}
	ok, _ = s.depth.admit(maxDepth, time.Now())
	return ok, nil
}

// readDepth reads the depth for the view (Stats), one read at a time:
// while one is under way, a caller that has a reckoning goes by it rather
// than wait, and one that waited finds it read.
func (s *Store) readDepth(ctx context.Context, maxDepth int) error {
	if !s.reading.TryLock() {
		if s.depth.isKnown() {
			return nil
		}
		s.reading.Lock()
	}
	defer s.reading.Unlock()
	if !s.depth.due(maxDepth, time.Now()) {
		return nil
	}
	_, err := s.Stats(ctx)
	return err
}

// refused answers an enqueue the depth turned away: the record that holds
// key, a duplicate being answered as one however full the queue is, or
// ErrQueueFull.
func (s *Store) refused(ctx context.Context, key string) (bool, dedup.Record, error) {
	rec, err := s.Lookup(ctx, key)
	switch {
	case errors.Is(err, dedup.ErrNotFound):
		return false, dedup.Record{}, fmt.Errorf("dedup: enqueue %s: %w", key, dedup.ErrQueueFull)
	case err != nil:
		return false, dedup.Record{}, fmt.Errorf("dedup: enqueue %s: %w", key, err)
	}
	return false, rec, nil
}
