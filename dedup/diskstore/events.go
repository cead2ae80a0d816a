package diskstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	bolt "go.etcd.io/bbolt"
)

// The events listing (Events) and each event's history of attempts keep
// two buckets of their own:
//
//	events   group + time + key: 'o' the open events (queued or being
//	         delivered) by when accepted, 'c' the completed async events
//	         by when completed (to the second, as their records keep it).
//	         The dead letters are listed from the dead bucket.
//	history  key → the event's last attempts (codec.AppendAttempt)
//
// Both are written in the transaction that changes the record, and go
// with it (deleteAll).
var (
	bucketEvents  = []byte("events")
	bucketHistory = []byte("history")
)

const (
	groupOpen      = 'o'
	groupCompleted = 'c'
)

// openEvents creates the buckets, and fills the events index from the
// records when it is new (a file of an earlier version): once, as the
// file is opened.
func openEvents(tx *bolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketHistory); err != nil {
		return err
	}
	if tx.Bucket(bucketEvents) != nil {
		return nil
	}
	events, err := tx.CreateBucket(bucketEvents)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketRecords).ForEach(func(k, v []byte) error {
		if len(v) < 8 {
			return nil
		}
		if a, err := codec.DecodeAsync(v[8:]); err == nil {
			if e := eventEntry(k, a); e != nil {
				return events.Put(e, nil)
			}
		}
		return nil
	})
}

// eventEntry is a's entry in the events bucket, for key; nil if it has
// none (a dead letter, listed from the dead bucket, or no async record).
func eventEntry(key []byte, a codec.Async) []byte {
	var at int64
	switch a.State {
	case dedup.Queued, dedup.Delivering:
		at = a.Accepted
	case dedup.Completed:
		at = a.Completed * 1000
	default:
		return nil
	}
	group := byte(groupOpen)
	if a.State == dedup.Completed {
		group = groupCompleted
	}
	return append([]byte{group}, timeKey(at, key)...)
}

// moveEvent moves key's entry in the events bucket from old's to a's
// (either the zero Async: none); a delivery taken or given back keeps its
// entry, unwritten.
func (b diskBuckets) moveEvent(key []byte, old, a codec.Async) error {
	from, to := eventEntry(key, old), eventEntry(key, a)
	if bytes.Equal(from, to) {
		return nil
	}
	events := b.records.Tx().Bucket(bucketEvents)
	if from != nil {
		if err := events.Delete(from); err != nil {
			return err
		}
	}
	if to != nil {
		return events.Put(to, nil)
	}
	return nil
}

// dropHistory deletes key's history, with its record.
func (b diskBuckets) dropHistory(key []byte) error {
	return b.records.Tx().Bucket(bucketHistory).Delete(key)
}

// addAttempt appends the attempt dl settles to key's history, if dl timed one.
func (b diskBuckets) addAttempt(key []byte, dl dedup.Delivery, status int, reason string) error {
	a, ok := dl.Tried(status, reason)
	if !ok {
		return nil
	}
	h := b.records.Tx().Bucket(bucketHistory)
	return h.Put(key, codec.AppendAttempt(h.Get(key), a))
}

// history is key's history of attempts.
func (b diskBuckets) history(key []byte) []dedup.Attempt {
	return codec.DecodeHistory(b.records.Tx().Bucket(bucketHistory).Get(key))
}

// Events lists one page of the events q chooses: the open ones and the
// completed ones from the events bucket, the dead letters from the dead
// bucket, each in its index's order, reading at most dedup.EventScan
// entries.
func (d *Store) Events(ctx context.Context, q dedup.EventQuery) (dedup.EventPage, error) {
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
	var page dedup.EventPage
	err = d.view(func(tx *bolt.Tx) error {
		page = dedup.EventPage{}
		b := buckets(tx)
		now := time.Now().UnixMilli()
		var group []byte // the index's entries start with it
		index := tx.Bucket(bucketEvents)
		switch q.State {
		case dedup.Queued, dedup.Delivering:
			group = []byte{groupOpen}
		case dedup.Completed:
			group = []byte{groupCompleted}
		case dedup.Failed:
			index = b.dead
		default:
			return fmt.Errorf("state %s is not listed", q.State)
		}
		start := int64(0)
		if !q.Since.IsZero() {
			start = max(q.Since.UnixMilli(), 0)
		}
		from := append(bytes.Clone(group), timeKey(start, nil)...)
		if resume {
			from = append(bytes.Clone(group), timeKey(cur.At, []byte(cur.Key))...)
		}
		c := index.Cursor()
		scanned := 0
		for k, _ := c.Seek(from); k != nil && bytes.HasPrefix(k, group); k, _ = c.Next() {
			idx := k[len(group):]
			at, key := int64(binary.BigEndian.Uint64(idx)), string(idx[8:])
			if resume && !cur.After(at, key) {
				continue
			}
			if !q.Until.IsZero() && at >= q.Until.UnixMilli() {
				return nil
			}
			if scanned == dedup.EventScan {
				page.Next = cur.String()
				return nil
			}
			scanned++
			ev, ok := b.listed(idx[8:], at, q, now)
			if !ok {
				cur, resume = codec.EventCursor{State: q.State, At: at, Key: key}, true
				continue
			}
			if len(page.Events) == q.Limit {
				// There is one more: the page ends at the entry before
				// it (the last event, or entries not chosen after it).
				page.Next = cur.String()
				return nil
			}
			page.Events = append(page.Events, ev)
			cur, resume = codec.EventCursor{State: q.State, At: at, Key: key}, true
		}
		return nil
	})
	if err != nil {
		return dedup.EventPage{}, fmt.Errorf("dedup: events: %w", err)
	}
	return page, nil
}

// listed is the event of key, found at time at of the index q.State
// lists from, if it is still that entry's and q chooses it.
func (b diskBuckets) listed(key []byte, at int64, q dedup.EventQuery, now int64) (dedup.Event, bool) {
	if !strings.HasPrefix(string(key), q.KeyPrefix) {
		return dedup.Event{}, false
	}
	s, ok := b.get(key, now)
	if !ok {
		return dedup.Event{}, false // expired: the sweep deletes it
	}
	a, err := codec.DecodeAsync(s.value)
	if err != nil {
		return dedup.Event{}, false
	}
	rec := a.Record(now)
	if rec.State != q.State {
		return dedup.Event{}, false
	}
	if q.State == dedup.Failed && a.At != at {
		return dedup.Event{}, false // an entry its record left
	}
	rec.Delivery.History = b.history(key)
	return dedup.Event{Key: string(key), Record: rec, AcceptedAt: time.UnixMilli(a.Accepted)}, true
}
