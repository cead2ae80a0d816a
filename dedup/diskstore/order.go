package diskstore

import (
	"bytes"
	"encoding/binary"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
)

// Ordered events (dedup.Request.OrderKey). Each holds a place in its key,
// from Enqueue until it completes, is forgotten, or is dead-lettered
// without OrderBlock:
//
//	orders  keyPrefix(order key) + seq (8 bytes) -> the event's key: the
//	        places of each key in the order they were given (seq from
//	        the bucket's sequence, in the transaction that enqueues)
//	places  the event's key -> flags (1: OrderBlock), seq (8 bytes, 0
//	        once it left its key), the order key: what a settle, a
//	        requeue or a forget needs to find its place
//
// Only the head of a key (its first place) is in its lane as due; an
// event behind it is in its lane at codec.Waiting, never due, until the
// head's leaving makes it due (promote) in the same transaction. One
// process holds the file, so the transactions are the whole story.
var (
	bucketOrders = []byte("orders")
	bucketPlaces = []byte("places")
)

// place is an ordered event's entry in places.
type place struct {
	block    bool
	seq      uint64 // 0: it holds no place (it left its key)
	orderKey string
}

func (p place) encode() []byte {
	b := make([]byte, 9, 9+len(p.orderKey))
	if p.block {
		b[0] = 1
	}
	binary.BigEndian.PutUint64(b[1:], p.seq)
	return append(b, p.orderKey...)
}

func decodePlace(v []byte) (place, bool) {
	if len(v) < 9 {
		return place{}, false
	}
	return place{block: v[0] == 1, seq: binary.BigEndian.Uint64(v[1:9]), orderKey: string(v[9:])}, true
}

// keyPrefix is where orderKey's places start in orders: its length, so
// that no key's prefix is another's, then the key.
func keyPrefix(orderKey string) []byte {
	b := binary.AppendUvarint(nil, uint64(len(orderKey)))
	return append(b, orderKey...)
}

func (p place) slot() []byte {
	return binary.BigEndian.AppendUint64(keyPrefix(p.orderKey), p.seq)
}

// placeOf is key's place, if it is an ordered event.
func (b diskBuckets) placeOf(key []byte) (place, bool) {
	return decodePlace(b.places.Get(key))
}

// head is the key of orderKey's first place; nil if it has none.
func (b diskBuckets) head(orderKey string) []byte {
	prefix := keyPrefix(orderKey)
	k, v := b.orders.Cursor().Seek(prefix)
	if k == nil || !bytes.HasPrefix(k, prefix) {
		return nil
	}
	return v
}

// join gives key a place at the end of orderKey and reports whether it is
// the head.
func (b diskBuckets) join(key []byte, orderKey string, block bool) (bool, error) {
	seq, err := b.orders.NextSequence()
	if err != nil {
		return false, err
	}
	p := place{block: block, seq: seq, orderKey: orderKey}
	if err := b.orders.Put(p.slot(), key); err != nil {
		return false, err
	}
	if err := b.places.Put(key, p.encode()); err != nil {
		return false, err
	}
	return bytes.Equal(b.head(orderKey), key), nil
}

// leave takes key out of its place, if it holds one, and makes the next
// event of its key due when key was the head. drop also forgets that key
// was ordered (the event is gone); otherwise a requeue finds its key.
func (b diskBuckets) leave(key []byte, now int64, drop bool) error {
	p, ok := b.placeOf(key)
	if !ok {
		return nil
	}
	if drop {
		if err := b.places.Delete(key); err != nil {
			return err
		}
	}
	if p.seq == 0 {
		return nil
	}
	wasHead := bytes.Equal(b.head(p.orderKey), key)
	if err := b.orders.Delete(p.slot()); err != nil {
		return err
	}
	if !drop {
		left := p
		left.seq = 0
		if err := b.places.Put(key, left.encode()); err != nil {
			return err
		}
	}
	if !wasHead {
		return nil
	}
	return b.promote(p.orderKey, now)
}

// promote makes orderKey's head due at now if it is waiting.
func (b diskBuckets) promote(orderKey string, now int64) error {
	next := bytes.Clone(b.head(orderKey))
	if next == nil {
		return nil
	}
	s, ok := b.get(next, now)
	if !ok {
		return nil
	}
	a, err := codec.DecodeAsync(s.value)
	if err != nil || a.State != dedup.Queued || a.At != codec.Waiting {
		return nil
	}
	due := a
	due.At = now
	return b.putAsync(next, b.routeOf(next), a, due, 0)
}

// settled updates key's place for its next state: a completed event
// leaves its key; a dead letter leaves it too unless it blocks, and then
// never expires (keeping it is what holds the key). It returns the
// expiry to write.
func (b diskBuckets) settled(key []byte, next dedup.State, expires, now int64) (int64, error) {
	p, ok := b.placeOf(key)
	if !ok || p.seq == 0 {
		return expires, nil
	}
	switch {
	case next == dedup.Completed:
		return expires, b.leave(key, now, true)
	case next == dedup.Failed && p.block:
		return 0, nil
	case next == dedup.Failed:
		return expires, b.leave(key, now, false)
	}
	return expires, nil
}

// requeued is when a requeued key is due: now if it leads its key (or is
// not ordered), else codec.Waiting. A dead letter that left its key takes
// a place at the end of it; one that holds its place keeps it.
func (b diskBuckets) requeued(key []byte, now int64) (int64, error) {
	p, ok := b.placeOf(key)
	if !ok {
		return now, nil
	}
	head := p.seq != 0 && bytes.Equal(b.head(p.orderKey), key)
	if p.seq == 0 {
		var err error
		if head, err = b.join(key, p.orderKey, p.block); err != nil {
			return 0, err
		}
	}
	if head {
		return now, nil
	}
	return codec.Waiting, nil
}

// blockedBy is the head of key's order key when key waits behind it.
func (b diskBuckets) blockedBy(key []byte) string {
	p, ok := b.placeOf(key)
	if !ok || p.seq == 0 {
		return ""
	}
	if h := b.head(p.orderKey); !bytes.Equal(h, key) {
		return string(h)
	}
	return ""
}
