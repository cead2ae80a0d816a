package diskstore

import (
	"encoding/binary"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	bolt "go.etcd.io/bbolt"
)

var (
	bucketRecords  = []byte("records")
	bucketRequests = []byte("requests")
	bucketLanes    = []byte("lanes")
	bucketDead     = []byte("dead")
	bucketExpiry   = []byte("expiry")
)

// allBuckets are the top-level buckets, made as the file is opened.
var allBuckets = [][]byte{bucketRecords, bucketRequests, bucketLanes, bucketDead, bucketExpiry, bucketOrders, bucketPlaces}

// diskBuckets are the buckets of one transaction.
type diskBuckets struct {
	records, requests, lanes, dead, expiry *bolt.Bucket
	// orders and places are the ordered events' places (order.go).
	orders, places *bolt.Bucket
	// tally collects what a write transaction changes in the queue's
	// counts; nil in the others.
	tally *tally
}

func buckets(tx *bolt.Tx) diskBuckets {
	return diskBuckets{
		records:  tx.Bucket(bucketRecords),
		requests: tx.Bucket(bucketRequests),
		lanes:    tx.Bucket(bucketLanes),
		dead:     tx.Bucket(bucketDead),
		expiry:   tx.Bucket(bucketExpiry),
		orders:   tx.Bucket(bucketOrders),
		places:   tx.Bucket(bucketPlaces),
	}
}

// timeKey is an index key: at (unix ms), then key.
func timeKey(at int64, key []byte) []byte {
	k := make([]byte, 8, 8+len(key))
	binary.BigEndian.PutUint64(k, uint64(at))
	return append(k, key...)
}

// stored is a record as the file holds it.
type stored struct {
	expires int64  // unix ms; 0: never
	value   []byte // a sync record (encoding.go) or an async one; valid in the transaction only
}

// get returns key's record if it has not expired.
func (b diskBuckets) get(key []byte, now int64) (stored, bool) {
	v := b.records.Get(key)
	if len(v) < 8 {
		return stored{}, false
	}
	s := stored{expires: int64(binary.BigEndian.Uint64(v)), value: v[8:]}
	if s.expires != 0 && s.expires <= now {
		return stored{}, false
	}
	return s, true
}

// put writes key's record, keeping the expiry index in step.
func (b diskBuckets) put(key []byte, expires int64, value []byte) error {
	if old := b.records.Get(key); len(old) >= 8 {
		if e := int64(binary.BigEndian.Uint64(old)); e != 0 && e != expires {
			if err := b.expiry.Delete(timeKey(e, key)); err != nil {
				return err
			}
		}
	}
	v := make([]byte, 8, 8+len(value))
	binary.BigEndian.PutUint64(v, uint64(expires))
	if err := b.records.Put(key, append(v, value...)); err != nil {
		return err
	}
	if expires != 0 {
		return b.expiry.Put(timeKey(expires, key), nil)
	}
	return nil
}

// deleteAll removes key's record, expired or not, with its request and
// its entries in every index.
func (b diskBuckets) deleteAll(key []byte) error {
	v := b.records.Get(key)
	if len(v) < 8 {
		return nil
	}
	expires := int64(binary.BigEndian.Uint64(v))
	if expires != 0 {
		if err := b.expiry.Delete(timeKey(expires, key)); err != nil {
			return err
		}
	}
	if a, err := codec.DecodeAsync(v[8:]); err == nil {
		route := ""
		if a.State == dedup.Queued || a.State == dedup.Delivering {
			route = b.routeOf(key) // the lane it is in; no other index needs it
		}
		if err := b.unindex(key, route, a, expires); err != nil {
			return err
		}
		if err := b.moveEvent(key, a, codec.Async{}); err != nil {
			return err
		}
	}
	if err := b.dropHistory(key); err != nil {
		return err
	}
	if err := b.requests.Delete(key); err != nil {
		return err
	}
	// An ordered event leaves its key: the next one is due.
	if err := b.leave(key, time.Now().UnixMilli(), true); err != nil {
		return err
	}
	return b.records.Delete(key)
}

// expiresAt is when key's record expires (unix ms, 0: never, or no
// record), expired or not.
func (b diskBuckets) expiresAt(key []byte) int64 {
	if v := b.records.Get(key); len(v) >= 8 {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

// record is what callers see of s at now.
func (s stored) record(now int64) (dedup.Record, error) {
	var rec dedup.Record
	if len(s.value) > 0 && s.value[0] == codec.TagAsync {
		a, err := codec.DecodeAsync(s.value)
		if err != nil {
			return dedup.Record{}, err
		}
		rec = a.Record(now)
	} else {
		var err error
		if rec, err = codec.DecodeRecord(string(s.value)); err != nil {
			return dedup.Record{}, err
		}
	}
	if s.expires != 0 {
		rec.TTL = time.Duration(s.expires-now) * time.Millisecond
	}
	return rec, nil
}
