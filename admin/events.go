package admin

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// EventLister is what the events listing needs of the store's queue
// (dedup.Operator).
type EventLister interface {
	Events(ctx context.Context, q dedup.EventQuery) (dedup.EventPage, error)
}

// listedStates are the states GET /v1/events lists, by their names.
var listedStates = map[string]dedup.State{
	"queued": dedup.Queued, "delivering": dedup.Delivering, "failed": dedup.Failed, "completed": dedup.Completed,
}

// Attempt is one entry of an event's attempts_history.
type Attempt struct {
	// Attempt is its number: 1 for the first.
	Attempt int `json:"attempt"`
	// At is when it began (RFC 3339, to the millisecond).
	At         string `json:"at"`
	DurationMS int64  `json:"duration_ms"`
	// Status is the app's answer; omitted when none came.
	Status int `json:"status,omitempty"`
	// Error says why it failed; omitted when it did not.
	Error string `json:"error,omitempty"`
}

// EventPage is one page of GET /v1/events; NextCursor is empty on the last.
type EventPage struct {
	Events     []Event `json:"events"`
	NextCursor string  `json:"next_cursor"`
}

// rfc3339ms is how the events API writes the times it keeps to the
// millisecond.
const rfc3339ms = "2006-01-02T15:04:05.000Z07:00"

// history is h as attempts_history shows it: never nil, so that an async
// event not yet attempted shows [].
func history(h []dedup.Attempt) []Attempt {
	out := make([]Attempt, 0, len(h))
	for _, a := range h {
		out = append(out, Attempt{Attempt: a.Number, At: a.At.UTC().Format(rfc3339ms), DurationMS: a.Duration.Milliseconds(), Status: a.Status, Error: a.Error})
	}
	return out
}

// listEvents serves GET /v1/events.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Events == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "this store keeps no event list: events are listed only on a store that supports async delivery (DATA_DIR, Redis, PostgreSQL)"})
		return
	}
	q, problem := eventQuery(r, s.cfg.KeyPrefix)
	if problem != "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": problem})
		return
	}
	page, err := s.cfg.Events.Events(r.Context(), q)
	switch {
	case errors.Is(err, dedup.ErrBadCursor):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "cursor: not one a previous page of this state returned as next_cursor"})
		return
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	now := time.Now()
	out := EventPage{Events: make([]Event, 0, len(page.Events)), NextCursor: page.Next}
	// Split against the namespace asked for, if any: a route's path (a
	// generic route's namespace) may hold ':'.
	asked := r.URL.Query().Get("namespace")
	for _, ev := range page.Events {
		ns, id := dedup.SplitEventKey(s.cfg.KeyPrefix, asked, ev.Key)
		e := NewEvent(ns, id, ev.Record, now)
		if !ev.AcceptedAt.IsZero() {
			e.AcceptedAt = ev.AcceptedAt.UTC().Format(rfc3339ms)
		}
		out.Events = append(out.Events, e)
	}
	writeJSON(w, http.StatusOK, out)
}

// eventQuery reads GET /v1/events' parameters, or says which one is wrong.
func eventQuery(r *http.Request, prefix string) (dedup.EventQuery, string) {
	query := r.URL.Query()
	q := dedup.EventQuery{Cursor: query.Get("cursor"), Limit: defaultPage}
	state, ok := listedStates[query.Get("state")]
	if !ok {
		return q, "state: must be one of queued, delivering, failed, completed"
	}
	q.State = state
	if ns := query.Get("namespace"); ns != "" {
		q.KeyPrefix = dedup.EventKey(prefix, ns, "")
	}
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		if v := query.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return q, p.name + ": not an RFC 3339 time (2026-12-01T08:00:00Z)"
			}
			*p.t = t
		}
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && q.Since.After(q.Until) {
		return q, "since: after until"
	}
	if v := query.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPage {
			return q, "limit: must be a number from 1 to " + strconv.Itoa(maxPage)
		}
		q.Limit = n
	}
	return q, ""
}
