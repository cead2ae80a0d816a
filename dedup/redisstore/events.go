package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
)

// The events listing and each event's history on Redis. The history is
// the field h of the event's record (codec's lines of JSON), appended to
// by queue_settle.lua in the script that settles the attempt, so it costs
// no round trip and goes with the record. The listing reads an index
// per state: {p}#open (queued and being delivered, by when accepted),
// {p}#dead (by when the dead letter expires: the order of their failures
// while DEAD_LETTER_TTL stays the same; since and until are matched
// against the failure time itself) and {p}#done, the completed async
// events by when completed, added to by queue_settle.lua and trimmed
// there of the oldest entries whose record expired: it holds about the
// completions of the last DEDUP_TTL (one sorted-set entry each, the key
// and a score).
var (
	//go:embed queue_events.lua
	queueEventsLua    string
	queueEventsScript = redis.NewScript(queueEventsLua)
)

// doneKey names the index of completed async events, as queue_settle.lua does.
func (q queueKeys) doneKey() string { return q.tag + "#done" }

// Events lists one page of the events q chooses, reading at most
// dedup.EventScan index entries in one script.
func (s *Store) Events(ctx context.Context, q dedup.EventQuery) (dedup.EventPage, error) {
	if err := ctx.Err(); err != nil {
		return dedup.EventPage{}, fmt.Errorf("dedup: events: %w", err)
	}
	if q.Limit <= 0 {
		return dedup.EventPage{}, fmt.Errorf("dedup: events: limit %d is not positive", q.Limit)
	}
	cur, resume, err := codec.ParseEventCursor(q.Cursor, q.State)
	if err != nil {
		return dedup.EventPage{}, fmt.Errorf("dedup: events: %w", err)
	}
	index, from, to, since, until := "", "-inf", "+inf", "", ""
	bound := func(from, to *string) {
		if !q.Since.IsZero() {
			*from = strconv.FormatInt(q.Since.UnixMilli(), 10)
		}
		if !q.Until.IsZero() {
			*to = "(" + strconv.FormatInt(q.Until.UnixMilli(), 10)
		}
	}
	switch q.State {
	case dedup.Queued, dedup.Delivering:
		index = s.queue.open
		bound(&from, &to)
	case dedup.Completed:
		index = s.queue.doneKey()
		bound(&from, &to)
	case dedup.Failed:
		index = s.queue.dead
		if !q.Since.IsZero() {
			since = strconv.FormatInt(q.Since.UnixMilli(), 10)
		}
		if !q.Until.IsZero() {
			until = strconv.FormatInt(q.Until.UnixMilli(), 10)
		}
	default:
		return dedup.EventPage{}, fmt.Errorf("dedup: events: state %s is not listed", q.State)
	}
	curScore, curKey := "", ""
	if resume {
		curScore, curKey = strconv.FormatInt(cur.At, 10), cur.Key
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	v, err := queueEventsScript.Run(ctx, s.scripts, []string{index}, s.queue.tag, q.State.String(), from, to,
		curScore, curKey, q.Limit, dedup.EventScan, q.KeyPrefix, since, until).Slice()
	if err != nil || len(v) < 3 {
		return dedup.EventPage{}, fmt.Errorf("dedup: events: %w", err)
	}
	n := len(v) - 3
	var page dedup.EventPage
	if next := str(v[n]); next != "" {
		at, err := strconv.ParseFloat(next, 64)
		if err != nil {
			return dedup.EventPage{}, fmt.Errorf("dedup: events: score %q: %w", next, err)
		}
		page.Next = codec.EventCursor{State: q.State, At: int64(at), Key: str(v[n+1])}.String()
	}
	now, _ := v[n+2].(int64)
	for _, e := range v[:n] {
		ev, ok := e.([]any)
		if !ok || len(ev) != 3 {
			return dedup.EventPage{}, fmt.Errorf("dedup: events: %w: script answered %T", codec.ErrBadRecord, e)
		}
		rec, accepted, err := asyncFields(ev[1], ev[2], now)
		if err != nil {
			return dedup.EventPage{}, fmt.Errorf("dedup: events %s: %w", str(ev[0]), err)
		}
		page.Events = append(page.Events, dedup.Event{Key: str(ev[0]), Record: rec, AcceptedAt: accepted})
	}
	return page, nil
}

// settleArgs is how many ARGV queue_settle.lua's outcomes take at most:
// the attempt to record follows them, at a place of its own.
const settleArgs = 9

// attemptLine is the history line of the attempt d settles, "" if none.
func attemptLine(d dedup.Delivery, status int, reason string) string {
	a, ok := d.Tried(status, reason)
	if !ok {
		return ""
	}
	return string(codec.EncodeAttempt(a))
}
