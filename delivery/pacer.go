package delivery

import (
	"context"
	"sort"
	"sync"
	"time"
)

// pacer holds a lane's new attempts back, retries included: spaced to
// the route's rate (rate=N/s: one start every second/N), and none at all
// while the app asked for a pause (a 429 or 503 with Retry-After).
// Attempts under way are never stopped.
//
// Each delivery gets its turn as it is taken (turn), and its attempt
// waits for that turn (waitFor) however long ago it was taken, so none
// gets by; and it starts only a full interval after the attempt that
// started before it (last), checked as it starts: turns handed out in
// time can be run late (a worker the CPU reached late), and would then
// start together. The lane takes only what can start soon (room): a delivery
// taken is leased and its attempt counted by the store, so one taken
// long before its turn would hold its lease for nothing, and count an
// attempt the app never saw if the process stopped first; the rest stays
// queued. The pacer also keeps how long the lane held its attempts back,
// so that RETRY_MAX_AGE does not count it.
type pacer struct {
	// interval is the least time between two attempts' starts. If zero,
	// the attempts are not spaced (no rate=); a pause still holds them.
	interval time.Duration
	// ahead is how long before its turn a delivery may be taken: a poll
	// and a turn, so that a taker wakes in time for the next.
	ahead time.Duration
	// now is the clock (Config.Now).
	now func() time.Time

	mu sync.Mutex
	// next is when the turn after those handed out starts.
	next time.Time
	// last is when the latest attempt started (waitFor let it go); zero
	// before the first.
	last time.Time
	// pausedUntil is the end of the app's pause; zero or past: none.
	pausedUntil time.Time
	// held is when a new attempt would have had to wait.
	held heldTime
}

// turn hands out the next turn: when one more attempt may start.
func (p *pacer) turn() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	start := p.firstFree(now)
	if p.interval > 0 {
		p.next = start.Add(p.interval)
	}
	p.held.book(now, p.firstFree(now))
	return start
}

// firstFree is when the next turn would start; p.mu held.
func (p *pacer) firstFree(now time.Time) time.Time {
	start := now
	for _, t := range []time.Time{p.next, p.pausedUntil} {
		if t.After(start) {
			start = t
		}
	}
	return start
}

// room reports how many of want more deliveries the lane may take now:
// those whose turns would start within ahead. None, with how long until
// some may, while the next turn is further off.
func (p *pacer) room(want int) (int, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	first, limit := p.firstFree(now), now.Add(p.ahead)
	if first.After(limit) {
		return 0, first.Sub(limit)
	}
	if p.interval == 0 {
		return want, 0
	}
	return min(want, 1+int(limit.Sub(first)/p.interval)), 0
}

// waitFor returns once turn has come, and a full interval has passed
// since the attempt that started before, with the moment it lets this
// one start: the attempt's start, which the next one is spaced from. It
// returns with ctx's error when ctx ends first. A pause that began after
// the turn was handed out is waited for too, then a turn after it: a
// pause is never overtaken by turns handed out before it.
func (p *pacer) waitFor(ctx context.Context, turn time.Time) (time.Time, error) {
	for {
		if d := turn.Sub(p.now()); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		if err := ctx.Err(); err != nil {
			return p.now(), err
		}
		p.mu.Lock()
		now := p.now()
		switch {
		case p.pausedUntil.After(now):
			p.mu.Unlock()
			turn = p.turn()
		case p.interval > 0 && !p.last.IsZero() && now.Sub(p.last) < p.interval:
			// Its turn came, but late: another attempt started less
			// than an interval ago. It waits for the interval to be
			// over rather than start beside it.
			turn = p.last.Add(p.interval)
			p.mu.Unlock()
		default:
			p.last = now
			// The turns handed out from now on come after this start.
			if next := now.Add(p.interval); next.After(p.next) {
				p.next = next
			}
			p.mu.Unlock()
			return now, nil
		}
	}
}

// wait is waitFor the next turn.
func (p *pacer) wait(ctx context.Context) (time.Time, error) { return p.waitFor(ctx, p.turn()) }

// pause holds every new attempt back until until (a later pause already
// set stands).
func (p *pacer) pause(until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if until.After(p.pausedUntil) {
		p.pausedUntil = until
	}
	now := p.now()
	p.held.book(now, p.firstFree(now))
}

// holding reports whether the pacer holds the lane back now: a new
// attempt would have to wait for its turn, or for the app's pause to end.
func (p *pacer) holding() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	return p.firstFree(now).After(now)
}

// heldSince is how long, since t, the lane held its attempts back: the
// time that does not count towards an event's RETRY_MAX_AGE when it was
// accepted at t. It counts the lane's waits, not the event's own: an
// event waits in the queue behind the turns handed out, and the lane's
// waits are what this process knows.
func (p *pacer) heldSince(t time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	return p.held.at(now, now) - p.held.at(t, now)
}

// heldGap joins two periods of waiting into one when the second begins
// within it of the first's end: a lane at its rate ends and begins one
// at every turn, and the list stays short. The gap is counted as held,
// which only ever lets an event live a little longer.
const heldGap = time.Second

// maxHeldPeriods bounds the periods kept; past it the oldest half is
// dropped, and an event accepted before the oldest kept is held for all
// that was dropped too (it lives longer, never shorter).
const maxHeldPeriods = 1024

// heldTime is when a lane held its attempts back, as periods in order.
type heldTime struct {
	periods []heldPeriod
}

// heldPeriod is one period of waiting; to may be ahead of now. before is
// the time held before from, over the process's life.
type heldPeriod struct {
	from, to time.Time
	before   time.Duration
}

// book notes that from until until, a new attempt has to wait.
func (h *heldTime) book(from, until time.Time) {
	if !until.After(from) {
		return
	}
	n := len(h.periods)
	if n > 0 && from.Sub(h.periods[n-1].to) < heldGap {
		if until.After(h.periods[n-1].to) {
			h.periods[n-1].to = until
		}
		return
	}
	var before time.Duration
	if n > 0 {
		last := h.periods[n-1]
		before = last.before + last.to.Sub(last.from)
	}
	if n == maxHeldPeriods {
		h.periods = append(h.periods[:0], h.periods[n/2:]...)
	}
	h.periods = append(h.periods, heldPeriod{from: from, to: until, before: before})
}

// at is the time held back from the first period kept until t, and no
// later than now.
func (h *heldTime) at(t, now time.Time) time.Duration {
	i := sort.Search(len(h.periods), func(i int) bool { return h.periods[i].from.After(t) }) - 1
	if i < 0 {
		return 0
	}
	p := h.periods[i]
	for _, end := range []time.Time{t, now} {
		if end.Before(p.to) {
			p.to = end
		}
	}
	return p.before + max(p.to.Sub(p.from), 0)
}
