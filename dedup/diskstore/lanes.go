package diskstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	bolt "go.etcd.io/bbolt"
)

// The due deliveries are indexed by route, so that a Take of one lane
// finds its events without walking those of other routes queued ahead of
// them (a route whose app hangs piles up thousands). The lanes bucket
// holds one bucket per route that has had events, each keyed by time +
// key as the single due index was: nested buckets rather than a route
// prefix on one index's keys, because a lane is then one bucket to open
// and walk from its first key, the routes with events are the lanes
// bucket's own keys (the rest lane walks them, not the events), and the
// time + key entries keep the layout that every cursor here already
// reads. The buckets of routes without events are kept: there are as
// many as routes, and a route's next event would make its bucket again.
//
// A lane's bucket is named lanePrefix + its route, because bbolt refuses
// an empty bucket name and the empty route is one (events queued without
// a route).
var lanePrefix = []byte("r")

// laneName is the name of route's bucket in the lanes bucket.
func laneName(route string) []byte {
	return append(slices.Clip(lanePrefix), route...)
}

// routeOfLane is the route whose bucket is named name.
func routeOfLane(name []byte) string { return string(name[len(lanePrefix):]) }

// routeOf is the route key's event was accepted on, read from its stored
// request; the empty route if that cannot be read (Take dead-letters such
// an event, from whichever lane it is in).
func (b diskBuckets) routeOf(key []byte) string {
	req, err := codec.DecodeRequest(b.requests.Get(key))
	if err != nil {
		return ""
	}
	return req.Route
}

// laneNames is the names of the lanes' buckets, copied, so that the
// caller may write to the buckets as it goes through them.
func (b diskBuckets) laneNames() [][]byte {
	var names [][]byte
	_ = b.lanes.ForEachBucket(func(name []byte) error {
		names = append(names, bytes.Clone(name))
		return nil
	})
	return names
}

// dueEntry is an entry of a lane's index: the route whose bucket holds
// it, and its key there (time + store key, copied).
type dueEntry struct {
	route string
	idx   []byte
}

func (e dueEntry) at() int64   { return int64(binary.BigEndian.Uint64(e.idx)) }
func (e dueEntry) key() []byte { return e.idx[8:] }

// dueIn is at most n entries of lane due at now, the earliest due first.
func (b diskBuckets) dueIn(lane dedup.Lane, now int64, n int) []dueEntry {
	if !lane.Rest {
		return dueOf(b.lanes.Bucket(laneName(lane.Route)), lane.Route, now, n)
	}
	var due []dueEntry
	for _, name := range b.laneNames() {
		if route := routeOfLane(name); lane.Holds(route) {
			due = append(due, dueOf(b.lanes.Bucket(name), route, now, n)...)
		}
	}
	// Across the routes as in one of them: the earliest due first.
	slices.SortFunc(due, func(x, y dueEntry) int { return bytes.Compare(x.idx, y.idx) })
	return due[:min(n, len(due))]
}

// dueOf is at most n entries of one route's bucket (nil: none) due at
// now, the earliest due first.
func dueOf(bucket *bolt.Bucket, route string, now int64, n int) []dueEntry {
	if bucket == nil {
		return nil
	}
	var due []dueEntry
	c := bucket.Cursor()
	for k, _ := c.First(); k != nil && len(due) < n; k, _ = c.Next() {
		if int64(binary.BigEndian.Uint64(k)) > now {
			break
		}
		due = append(due, dueEntry{route: route, idx: bytes.Clone(k)})
	}
	return due
}

// bucketDueV1 is the due index of the files written before the lanes: one
// bucket of time + key for every route.
var bucketDueV1 = []byte("due")

// migrateDue moves the entries of a file's due index from before the
// lanes (bucketDueV1) into the lane of each one's route, as the file is
// opened, in the transaction that opens it: one pass over what was
// queued, once. It also takes in what a version from before the lanes
// queued after a roll back to it (that version cannot see the lanes, and
// starts an index of its own). Entries that no longer match their record
// are moved too: Take drops them, as it drops any.
func migrateDue(tx *bolt.Tx) error {
	old := tx.Bucket(bucketDueV1)
	if old == nil {
		return nil
	}
	b := buckets(tx)
	err := old.ForEach(func(idx, _ []byte) error {
		if len(idx) <= 8 {
			return nil // not an entry
		}
		lane, err := b.lane(b.routeOf(idx[8:]))
		if err != nil {
			return err
		}
		return lane.Put(idx, nil)
	})
	if err != nil {
		return fmt.Errorf("move the due index into the lanes: %w", err)
	}
	return tx.DeleteBucket(bucketDueV1)
}

// lane is route's bucket in the lanes bucket, made if there is none.
func (b diskBuckets) lane(route string) (*bolt.Bucket, error) {
	lane, err := b.lanes.CreateBucketIfNotExists(laneName(route))
	if err != nil {
		return nil, fmt.Errorf("the lane of route %q: %w", route, err)
	}
	return lane, nil
}
