package dedup

import (
	"time"
	"unicode/utf8"
)

// HistoryLen is how many attempts an async event's history keeps: the
// newest ones, so that an event retried for days stays the same size.
const HistoryLen = 10

// AttemptErrorMax bounds the error text an attempt keeps in the history,
// in bytes (cut on a character boundary): the history is kept per event,
// ten times over.
const AttemptErrorMax = 256

// Attempt is one delivery attempt as an async event's history keeps it.
type Attempt struct {
	// Number is the attempt's number: 1 for the first.
	Number int
	// At is when it began; Duration how long it took.
	At       time.Time
	Duration time.Duration
	// Status is the app's answer; 0 if none came.
	Status int
	// Error says why the attempt failed; empty if it did not.
	Error string
}

// Tried is the attempt d settles with the app's status and the failure's
// reason (empty on success), cut to AttemptErrorMax, and false when d
// was settled without timing an attempt (Began zero): the store then
// records none.
func (d Delivery) Tried(status int, reason string) (Attempt, bool) {
	if d.Began.IsZero() {
		return Attempt{}, false
	}
	if len(reason) > AttemptErrorMax {
		cut := AttemptErrorMax
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		reason = reason[:cut]
	}
	return Attempt{Number: d.Attempt, At: d.Began, Duration: max(d.Took, 0), Status: status, Error: reason}, true
}

// EventQuery chooses the events Events lists.
type EventQuery struct {
	// State is Queued, Delivering, Failed or Completed. A delivery whose
	// lease ran out, not yet taken over, is Queued (as Lookup says).
	State State
	// KeyPrefix, if not empty, keeps the events whose key starts with it
	// (EventKey(prefix, namespace, "") for one namespace).
	KeyPrefix string
	// Since (inclusive) and Until (exclusive) bound the time the state
	// lists by: when the event was accepted (Queued, Delivering), failed
	// (Failed) or completed (Completed). Zero: unbounded.
	Since, Until time.Time
	// Cursor is the Next of the page before; empty for the first.
	Cursor string
	// Limit is the most events of one page; positive.
	Limit int
}

// EventScan bounds the index entries one Events call reads on the stores
// that read their indexes in order and filter as they go: with a page
// not yet full when it is reached, the page ends there, with its Next.
const EventScan = 5000

// Event is one async event as the listing shows it.
type Event struct {
	Key string
	// Record is the event's record, as Lookup returns it (its TTL
	// excepted, which the listing does not read): Since is when it
	// entered the time the state lists by (see EventQuery.Since).
	Record Record
	// AcceptedAt is when the event was accepted (or last requeued); zero
	// if the store kept no such time.
	AcceptedAt time.Time
}

// EventPage is one page of the listing. Next is the cursor of the next
// page: empty on the last. A page may hold fewer than the limit (none,
// even) with a Next: the store stopped at EventScan.
type EventPage struct {
	Events []Event
	Next   string
}
