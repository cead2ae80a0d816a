package diskstore

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	bolt "go.etcd.io/bbolt"
)

// v1Event is an event as a version from before the lanes kept it.
type v1Event struct {
	key     string
	route   string
	a       codec.Async
	expires int64 // unix ms, 0: never
}

// writeV1File writes a store's file in dir as a version from before the
// lanes did: one due index (bucket "due", time + key) for every route.
// An event with a zero Async is left out of the records: only its due
// entry is written, as one its record no longer points to.
func writeV1File(t *testing.T, dir string, events []v1Event) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, File), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		bs := map[string]*bolt.Bucket{}
		for _, name := range []string{"records", "requests", "due", "dead", "expiry"} {
			b, err := tx.CreateBucket([]byte(name))
			if err != nil {
				return err
			}
			bs[name] = b
		}
		for _, e := range events {
			if err := putV1(bs, e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// putV1 writes e as a version from before the lanes did.
func putV1(bs map[string]*bolt.Bucket, e v1Event) error {
	key := []byte(e.key)
	index := "due"
	if e.a.State == dedup.Failed {
		index = "dead"
	}
	if err := bs[index].Put(timeKey(e.a.At, key), nil); err != nil || e.a.State == dedup.Absent {
		return err
	}
	req := storetest.Request
	req.Route = e.route
	if err := bs["requests"].Put(key, codec.EncodeRequest(req)); err != nil {
		return err
	}
	v := binary.BigEndian.AppendUint64(nil, uint64(e.expires))
	if err := bs["records"].Put(key, append(v, codec.EncodeAsync(e.a)...)); err != nil {
		return err
	}
	if e.expires != 0 {
		return bs["expiry"].Put(timeKey(e.expires, key), nil)
	}
	return nil
}

// TestDiskMigratesDueIndex opens a file written before the lanes: each of
// its queued events is then in its route's lane (those without a route
// in the rest lane), the deliveries its process held are due at once, a
// retry scheduled for later stays where it is, a dead letter requeued
// returns to its route's lane, an entry without its record is dropped,
// and Stats counts what the file holds.
func TestDiskMigratesDueIndex(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ms := now.UnixMilli()
	hour := time.Hour.Milliseconds()
	writeV1File(t, dir, []v1Event{
		{key: "a/queued", route: "a", a: codec.Async{State: dedup.Queued, Accepted: ms - 3000, At: ms - 3000}},
		{key: "a/held", route: "a", a: codec.Async{State: dedup.Delivering, Token: codec.NewToken(), Accepted: ms - 2000, At: ms + hour, Attempts: 1}},
		{key: "none", route: "", a: codec.Async{State: dedup.Queued, Accepted: ms - 1000, At: ms - 1000}},
		{key: "b/later", route: "b", a: codec.Async{State: dedup.Queued, Accepted: ms - 1000, At: ms + hour, Attempts: 1}},
		{key: "b/dead", route: "b", a: codec.Async{State: dedup.Failed, Accepted: ms - 5000, At: ms - 500, Attempts: 3}, expires: ms + hour},
		{key: "gone", a: codec.Async{At: ms - 4000}},
	})

	d := openDiskAt(t, dir)
	if err := d.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketDueV1) != nil {
			t.Error("the due index from before the lanes is still there")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st := storetest.Stats(t, d)
	if st.Depth != 4 || st.DeadLetters != 1 || st.OldestAge < 3*time.Second {
		t.Errorf("Stats = %+v, want 4 queued (the held delivery among them), 1 dead letter, the oldest 3s old", st)
	}
	a := storetest.TakeFrom(t, d, dedup.RouteLane("a"), 10, storetest.Lease)
	if got := attempts(a); !reflect.DeepEqual(got, map[string]int{"a/queued": 1, "a/held": 2}) {
		t.Errorf("Take from a's lane = %v, want a/queued and a/held, taken over", got)
	}
	if got := attempts(storetest.TakeFrom(t, d, dedup.RestLane("a", "b"), 10, storetest.Lease)); !reflect.DeepEqual(got, map[string]int{"none": 1}) {
		t.Errorf("Take from the rest lane = %v, want the event without a route", got)
	}
	if got := storetest.TakeFrom(t, d, dedup.RouteLane("b"), 10, storetest.Lease); len(got) != 0 {
		t.Errorf("Take from b's lane = %v, want nothing due yet", attempts(got))
	}
	if rec := storetest.MustLookup(t, d, "b/later"); rec.State != dedup.Queued || rec.Delivery.NextAttemptAt.Before(now.Add(50*time.Minute)) {
		t.Errorf("the retry scheduled for later: %v due %s, want queued, due in about an hour", rec.State, rec.Delivery.NextAttemptAt)
	}
	if err := d.Requeue(context.Background(), "b/dead"); err != nil {
		t.Fatal(err)
	}
	if got := attempts(storetest.TakeFrom(t, d, dedup.RouteLane("b"), 10, storetest.Lease)); !reflect.DeepEqual(got, map[string]int{"b/dead": 1}) {
		t.Errorf("Take from b's lane after the requeue = %v, want b/dead", got)
	}
	if got := storetest.Take(t, d, 10, storetest.Lease); len(got) != 0 {
		t.Errorf("then Take from every lane = %v, want nothing (the entry without its record dropped)", attempts(got))
	}
}

// attempts is the attempt of each of ds, by key.
func attempts(ds []dedup.Delivery) map[string]int {
	got := map[string]int{}
	for _, d := range ds {
		got[d.Claim.Key] = d.Attempt
	}
	return got
}
