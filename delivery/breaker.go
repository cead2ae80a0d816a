package delivery

import (
	"sync"
	"time"
)

// Pacing of the probes while the app does not answer: the first goes
// FirstProbePause after the breaker opened, and each pause after a probe
// that got no answer either is twice the last, up to MaxProbePause. The
// end-to-end tests derive the rate they allow a dead app from these.
const (
	FirstProbePause = 100 * time.Millisecond
	MaxProbePause   = 30 * time.Second
)

// Trip is how many attempts in a row that get no answer take the app for
// down, with concurrency attempts at once: as many as may run at once,
// and no fewer than 5, so that a lane of one or two slots does not take a
// couple of failures for an outage.
func Trip(concurrency int) int { return max(concurrency, 5) }

// breaker backs the deliveries off as a whole while the app does not
// answer at all (no HTTP status came back: its connection refused, reset
// or closed before an answer, its TLS handshake failing, or the attempt
// timing out): once as many attempts in a row as may run at once have
// gone unanswered, the app is taken for down, and one probe attempt at a
// time goes out, paced by a pause that doubles up to MaxProbePause, until
// one gets any answer from the app; then full concurrency again. Without
// it, a queue of thousands in front of a dead app made as many failed
// attempts a second as the workers could, for nothing. Queued events keep
// their place: the deliveries not let out stay queued, with no attempt
// counted.
type breaker struct {
	// trip is how many unanswered attempts in a row open the breaker
	// (Trip).
	trip int

	mu       sync.Mutex
	failures int  // unanswered attempts in a row
	open     bool // the app is taken for down: probes only
	probing  bool // a probe is out
	pause    time.Duration
	next     time.Time // when the next probe may go
}

// allow reports how many deliveries may be taken now, of free: all of
// them while the app answers; while it does not, one probe when one is
// due and none is out, else none, with how long until the next probe. A
// probe allowed that sends nothing is given back with unused.
func (b *breaker) allow(free int, now time.Time) (n int, probe bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.open:
		return free, false, 0
	case b.probing:
		return 0, false, b.pause
	case now.Before(b.next):
		return 0, false, b.next.Sub(now)
	}
	b.probing = true
	return 1, true, 0
}

// record notes an attempt's outcome, answered being whether the app
// answered it at all (any status), and probe whether allow let it out as
// the probe, and reports whether that opened the breaker or closed it.
// While the breaker is open, only the probe's failure paces the next
// probe: the deliveries taken ahead before it opened are attempted too,
// and fail alike, but they are not probes.
func (b *breaker) record(answered, probe bool, now time.Time) (opened, closed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if answered {
		closed = b.open
		b.failures, b.open, b.probing, b.pause = 0, false, false, 0
		return false, closed
	}
	b.failures++
	if b.open {
		if !probe {
			return false, false
		}
		b.probing = false
		b.pause = min(2*b.pause, MaxProbePause)
		b.next = now.Add(b.pause)
		return false, false
	}
	if b.failures >= b.trip {
		b.open, b.pause = true, FirstProbePause
		b.next = now.Add(b.pause)
		return true, false
	}
	return false, false
}

// unused gives back a probe allow handed out that sent nothing (nothing
// was due): the next may go at once.
func (b *breaker) unused() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
}

// isOpen reports whether the app is taken for down: only probes go out.
func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}
