package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
)

// The events listing and each event's history on PostgreSQL. The history
// is the records table's history column, a jsonb array of codec's
// attempt objects, appended to by the statement that settles the attempt
// (historyAppend): no round trip of its own, and it goes with its row.
// The listing is one statement per state, each an index range in its own
// order (the _accepted, _failed_at and _completed indexes, keys in "C"
// collation, so that the cursor's key compares as Go compares it).

// historyAppend is the SQL of a history with the attempt object $attempt
// (NULL: none) after its others, keeping the newest $keep.
func historyAppend(attempt, keep string) string {
	return `CASE WHEN ` + attempt + `::jsonb IS NULL THEN r.history ELSE (
		SELECT jsonb_agg(h.e ORDER BY h.i) FROM jsonb_array_elements(coalesce(r.history, '[]'::jsonb) || jsonb_build_array(` + attempt + `::jsonb)) WITH ORDINALITY AS h(e, i)
		WHERE h.i > jsonb_array_length(coalesce(r.history, '[]'::jsonb)) + 1 - ` + keep + `::integer) END`
}

// attemptJSON is the attempt d settles as the history keeps it; nil
// (NULL) if none.
func attemptJSON(d dedup.Delivery, status int, reason string) *string {
	a, ok := d.Tried(status, reason)
	if !ok {
		return nil
	}
	s := string(codec.EncodeAttempt(a))
	return &s
}

// eventsSQL lists one state's events: %[2]s chooses the rows, %[3]s is
// the time the state lists by, %[4]s when the event was accepted. $1 and
// $2 the cursor's time and key (NULL: the first page), $3 and $4 since
// and until (NULL: unbounded), $5 the key prefix, $6 the rows to read.
const eventsSQL = `SELECT r.key, ` + recordColumns + `, r.history, %[4]s, %[3]s
FROM %[1]srecords r LEFT JOIN %[1]squeue q ON q.key = r.key
WHERE %[2]s AND r.expires_at > now()
	AND ($1::timestamptz IS NULL OR (%[3]s, r.key COLLATE "C") > ($1::timestamptz, $2::text COLLATE "C"))
	AND ($3::timestamptz IS NULL OR %[3]s >= $3) AND ($4::timestamptz IS NULL OR %[3]s < $4)
	AND starts_with(r.key, $5)
ORDER BY %[3]s, r.key COLLATE "C" LIMIT $6`

// eventStatements are eventsSQL for each state, by dedup.State - Completed
// (Completed, Queued, Delivering, Failed), with f filling in the tables.
func eventStatements(f func(string) string) [4]string {
	open := `q.key IS NOT NULL AND q.failed_at IS NULL AND `
	of := func(where, at, accepted string) string {
		return f(fmt.Sprintf(eventsSQL, "%[1]s", where, at, accepted))
	}
	return [4]string{
		of(`r.state = 2 AND r.attempts IS NOT NULL AND q.key IS NULL`, "r.since", "r.accepted_at"),
		of(open+`(q.lease_token IS NULL OR q.due_at <= now())`, "q.accepted_at", "q.accepted_at"),
		of(open+`q.lease_token IS NOT NULL AND q.due_at > now()`, "q.accepted_at", "q.accepted_at"),
		of(`q.failed_at IS NOT NULL`, "q.failed_at", "q.accepted_at"),
	}
}

// Events lists one page of the events q chooses, in one statement.
func (s *Store) Events(ctx context.Context, q dedup.EventQuery) (dedup.EventPage, error) {
	if err := ctx.Err(); err != nil {
		return dedup.EventPage{}, fmt.Errorf("dedup: events: %w", err)
	}
	if q.Limit <= 0 {
		return dedup.EventPage{}, fmt.Errorf("dedup: events: limit %d is not positive", q.Limit)
	}
	if q.State < dedup.Completed || q.State > dedup.Failed {
		return dedup.EventPage{}, fmt.Errorf("dedup: events: state %s is not listed", q.State)
	}
	cur, resume, err := codec.ParseEventCursor(q.Cursor, q.State)
	if err != nil {
		return dedup.EventPage{}, fmt.Errorf("dedup: events: %w", err)
	}
	var curAt, since, until *time.Time
	if resume {
		t := time.UnixMicro(cur.At)
		curAt = &t
	}
	if !q.Since.IsZero() {
		since = &q.Since
	}
	if !q.Until.IsZero() {
		until = &q.Until
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	// One more than asked says whether there is a next page.
	rows, err := s.pool.Query(ctx, s.sql.events[q.State-dedup.Completed], curAt, cur.Key, since, until, q.KeyPrefix, q.Limit+1)
	if err != nil {
		return dedup.EventPage{}, fmt.Errorf("dedup: events: %w", err)
	}
	type listed struct {
		ev dedup.Event
		at time.Time
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (listed, error) {
		var l listed
		var rec pgRecord
		var history []byte
		var accepted *time.Time
		err := row.Scan(append(append([]any{&l.ev.Key}, rec.targets()...), &history, &accepted, &l.at)...)
		l.ev.Record = rec.record()
		l.ev.Record.TTL = 0
		l.ev.Record.Delivery.History = codec.DecodeHistoryArray(history)
		if accepted != nil {
			l.ev.AcceptedAt = *accepted
		}
		return l, err
	})
	if err != nil {
		return dedup.EventPage{}, fmt.Errorf("dedup: events: %w", err)
	}
	var page dedup.EventPage
	if len(list) > q.Limit {
		list = list[:q.Limit]
		last := list[q.Limit-1]
		page.Next = codec.EventCursor{State: q.State, At: last.at.UnixMicro(), Key: last.ev.Key}.String()
	}
	for _, l := range list {
		page.Events = append(page.Events, l.ev)
	}
	return page, nil
}
