package delivery

import (
	"context"
	"sort"
	"sync"
	"time"
)

// pacer holds a lane's new attempts back, retries included: spaced to
// the route's rate (rate=N/s: one start every second/N), and none at all
// while the app asked for a pause (a 429 or 503 with Retry-After). Every
// attempt of the lane passes it just before it starts, whether its
// delivery was just taken or taken ahead, so none gets by. Attempts under
// way are never stopped. It keeps how long the lane was held back, so
// that RETRY_MAX_AGE does not count it.
type pacer struct {
	// interval is the least time between two attempts' starts. If zero,
	// the attempts are not spaced (no rate=); a pause still holds them.
	interval time.Duration
	// now is the clock (Config.Now).
	now func() time.Time

	mu sync.Mutex
	// next is when the next attempt may start, the rate's turns already
	// handed out counted.
	next time.Time
	// pausedUntil is the end of the app's pause; zero or past: none.
	pausedUntil time.Time
	// waiting counts the attempts waiting for their turn.
	waiting int
	// held is how long attempts have waited, over time.
	held heldTime
}

// wait returns when an attempt of the lane may start, or with ctx's error
// when ctx ends first. An attempt waiting for its turn when a pause begins
// waits for the pause's end, then for a turn again: a pause is never
// overtaken by turns handed out before it.
func (p *pacer) wait(ctx context.Context) error {
	for {
		p.mu.Lock()
		now := p.now()
		start := now
		for _, t := range []time.Time{p.next, p.pausedUntil} {
			if t.After(start) {
				start = t
			}
		}
		if p.interval > 0 {
			p.next = start.Add(p.interval)
		}
		d := start.Sub(now)
		if d <= 0 {
			p.mu.Unlock()
			return nil
		}
		if p.waiting == 0 {
			p.held.begin(now)
		}
		p.waiting++
		p.mu.Unlock()

		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()

		p.mu.Lock()
		now = p.now()
		p.waiting--
		if p.waiting == 0 {
			p.held.end(now)
		}
		again := p.pausedUntil.After(now)
		p.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
		if !again {
			return nil
		}
	}
}

// pause holds every new attempt back until until (a later pause already
// set stands).
func (p *pacer) pause(until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if until.After(p.pausedUntil) {
		p.pausedUntil = until
	}
}

// holding reports whether the pacer holds the lane back now: an attempt
// waits for its turn, or the app's pause lasts.
func (p *pacer) holding() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting > 0 || p.pausedUntil.After(p.now())
}

// heldSince is how long, since t, the lane held its attempts back: the
// time that does not count towards an event's RETRY_MAX_AGE when it was
// accepted at t. It counts the whole lane's waits, not the event's own: an
// event waits in the queue behind those waiting for their turn, and the
// lane's waits are the ones this process knows.
func (p *pacer) heldSince(t time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	return p.held.at(now, now) - p.held.at(t, now)
}

// heldGap joins two periods of waiting into one when the second begins
// within it of the first's end: a lane at its rate ends and begins one
// between two attempts, and the list stays short. The gap is counted as
// held, which only ever lets an event live a little longer.
const heldGap = time.Second

// maxHeldPeriods bounds the periods kept; past it the oldest half is
// dropped, and an event accepted before the oldest kept is held for all
// that was dropped too (it lives longer, never shorter).
const maxHeldPeriods = 1024

// heldTime is when a lane held its attempts back, as periods in order.
type heldTime struct {
	periods []heldPeriod
	// open is whether the last period lasts still.
	open bool
}

// heldPeriod is one period of waiting. before is the time held before
// from, over the process's life.
type heldPeriod struct {
	from, to time.Time
	before   time.Duration
}

func (h *heldTime) begin(now time.Time) {
	h.open = true
	n := len(h.periods)
	if n > 0 && now.Sub(h.periods[n-1].to) < heldGap {
		return // the last goes on
	}
	var before time.Duration
	if n > 0 {
		last := h.periods[n-1]
		before = last.before + last.to.Sub(last.from)
	}
	if n == maxHeldPeriods {
		h.periods = append(h.periods[:0], h.periods[n/2:]...)
	}
	h.periods = append(h.periods, heldPeriod{from: now, to: now, before: before})
}

func (h *heldTime) end(now time.Time) {
	h.open = false
	if n := len(h.periods); n > 0 {
		h.periods[n-1].to = now
	}
}

// at is the time held back from the first period kept until t, the last
// period, when open, lasting until now.
func (h *heldTime) at(t, now time.Time) time.Duration {
	i := sort.Search(len(h.periods), func(i int) bool { return h.periods[i].from.After(t) }) - 1
	if i < 0 {
		return 0
	}
	p := h.periods[i]
	if h.open && i == len(h.periods)-1 {
		p.to = now
	}
	if t.Before(p.to) {
		p.to = t
	}
	return p.before + p.to.Sub(p.from)
}
