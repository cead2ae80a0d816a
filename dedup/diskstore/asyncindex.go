package diskstore

import (
	"bytes"
	"encoding/binary"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
)

// unindex removes a, key's async record on route, which expires at
// expires, from its lane or from the dead letters, and from the counts.
func (b diskBuckets) unindex(key []byte, route string, a codec.Async, expires int64) error {
	switch a.State {
	case dedup.Queued, dedup.Delivering:
		if lane := b.lanes.Bucket(laneName(route)); lane != nil {
			if err := lane.Delete(timeKey(a.At, key)); err != nil {
				return err
			}
		}
	case dedup.Failed:
		if err := b.dead.Delete(timeKey(a.At, key)); err != nil {
			return err
		}
	default:
		return nil
	}
	b.tally.note(a, route, expires, -1)
	return nil
}

// index adds a, key's async record on route, which expires at expires,
// to its lane or to the dead letters, and to the counts.
func (b diskBuckets) index(key []byte, route string, a codec.Async, expires int64) error {
	switch a.State {
	case dedup.Queued, dedup.Delivering:
		lane, err := b.lane(route)
		if err != nil {
			return err
		}
		if err := lane.Put(timeKey(a.At, key), nil); err != nil {
			return err
		}
	case dedup.Failed:
		if err := b.dead.Put(timeKey(a.At, key), nil); err != nil {
			return err
		}
	default:
		return nil
	}
	b.tally.note(a, route, expires, 1)
	return nil
}

// releaseDeliveries makes every delivery whose lease has not run out due
// at now: called as the file is opened, when the lock proves that no
// process holds them any more (the one that took them stopped, or was
// killed), so waiting out their leases would only delay them.
func (b diskBuckets) releaseDeliveries(now int64) error {
	for _, name := range b.laneNames() {
		var held []dueEntry
		c := b.lanes.Bucket(name).Cursor()
		for k, _ := c.Seek(timeKey(now+1, nil)); k != nil; k, _ = c.Next() {
			held = append(held, dueEntry{route: routeOfLane(name), idx: bytes.Clone(k)})
		}
		for _, e := range held {
			a, ok := b.entryRecord(e, now)
			if !ok || a.State != dedup.Delivering {
				continue // queued for a later retry, or Take's to drop
			}
			released := a
			released.At = now
			if err := b.putAsync(e.key(), e.route, a, released, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// entryRecord is the record of e's key if e is its entry: a queued or
// delivering event, due (or its lease running out) at e's time. An entry
// can outlive its record's move (a record damaged, or deleted by a
// version from before the lanes, which knew only its own index).
func (b diskBuckets) entryRecord(e dueEntry, now int64) (codec.Async, bool) {
	s, ok := b.get(e.key(), now)
	if !ok {
		return codec.Async{}, false
	}
	a, err := codec.DecodeAsync(s.value)
	if err != nil || (a.State != dedup.Queued && a.State != dedup.Delivering) || a.At != e.at() {
		return codec.Async{}, false
	}
	return a, true
}

// putAsync replaces key's async record old (the zero Async if it has
// none) with a, which expires at expires, moving its entries in the
// indexes; route is the route the event was accepted on.
func (b diskBuckets) putAsync(key []byte, route string, old, a codec.Async, expires int64) error {
	if err := b.unindex(key, route, old, b.expiresAt(key)); err != nil {
		return err
	}
	if err := b.index(key, route, a, expires); err != nil {
		return err
	}
	if err := b.moveEvent(key, old, a); err != nil {
		return err
	}
	return b.put(key, expires, codec.EncodeAsync(a))
}

// countQueue counts what Stats reports, from the lanes and the dead
// letters: once, as the file is opened.
func (b diskBuckets) countQueue(now time.Time) *queueCounts {
	c := &queueCounts{}
	ms := now.UnixMilli()
	for _, name := range b.laneNames() {
		_ = b.lanes.Bucket(name).ForEach(func(idx, _ []byte) error {
			if a, ok := b.entryRecord(dueEntry{idx: idx}, ms); ok {
				c.count(changeOf(a, routeOfLane(name), 0, 1))
			}
			return nil
		})
	}
	_ = b.dead.ForEach(func(idx, _ []byte) error {
		// Expired or not: an expired one is dropped from the counts as
		// soon as they are read, and its deletion by the sweep then
		// changes nothing.
		a, expires, ok := b.anyAsync(idx[8:])
		if ok && a.State == dedup.Failed && a.At == int64(binary.BigEndian.Uint64(idx)) {
			c.count(changeOf(a, "", expires, 1))
		}
		return nil
	})
	return c
}

// anyAsync is key's async record and when it expires (unix ms, 0: never),
// expired or not.
func (b diskBuckets) anyAsync(key []byte) (codec.Async, int64, bool) {
	v := b.records.Get(key)
	if len(v) < 8 {
		return codec.Async{}, 0, false
	}
	a, err := codec.DecodeAsync(v[8:])
	return a, int64(binary.BigEndian.Uint64(v)), err == nil
}
