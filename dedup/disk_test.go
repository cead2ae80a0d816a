package dedup

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var _ queueStore = (*Disk)(nil)

func openDiskAt(t *testing.T, dir string) *Disk {
	t.Helper()
	d, err := OpenDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func TestDisk(t *testing.T) {
	testStore(t, openDiskAt(t, t.TempDir()))
}

func TestDiskQueue(t *testing.T) {
	testQueue(t, func(t *testing.T) (queueStore, func() queueStore) {
		dir := t.TempDir()
		d := openDiskAt(t, dir)
		return d, func() queueStore {
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			return openDiskAt(t, dir)
		}
	})
}

// TestDiskReopen closes the store and opens its file again, as a restart
// does: the records of both modes and the queue are all still there.
func TestDiskReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	d := openDiskAt(t, dir)
	inFlight, _ := mustClaim(t, d, "sync/in-flight", lease)
	done, _ := mustClaim(t, d, "sync/completed", lease)
	if err := d.Complete(ctx, done, replayed, keep); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, d, "async/failed")
	if err := d.Fail(ctx, takeOne(t, d, lease), 500, "boom", keep); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, d, "async/queued")
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	d = openDiskAt(t, dir)
	for key, want := range map[string]State{
		"sync/in-flight": InFlight, "sync/completed": Completed, "async/queued": Queued, "async/failed": Failed,
	} {
		if rec := mustLookup(t, d, key); rec.State != want {
			t.Errorf("%s after reopening: %v, want %v", key, rec.State, want)
		}
	}
	if err := d.Complete(ctx, inFlight, replayed, keep); err != nil {
		t.Errorf("completing a claim taken before the restart: %v", err)
	}
	ds := take(t, d, 10, lease)
	if len(ds) != 1 || ds[0].Claim.Key != "async/queued" {
		t.Fatalf("Take after reopening = %+v, want the queued event", ds)
	}
	if dls, _, err := d.DeadLetters(ctx, "", 10); err != nil || len(dls) != 1 {
		t.Errorf("dead letters after reopening = %+v, %v", dls, err)
	}
}

// TestDiskLocked opens one directory twice: the second open fails, naming
// the lock, instead of sharing (and corrupting) the file.
func TestDiskLocked(t *testing.T) {
	dir := t.TempDir()
	openDiskAt(t, dir)
	d, err := OpenDisk(dir)
	if err == nil {
		_ = d.Close()
		t.Fatal("a second OpenDisk on one directory succeeded")
	}
	if !errors.Is(err, ErrDiskLocked) {
		t.Errorf("second OpenDisk = %v, want ErrDiskLocked", err)
	}
}

// TestDiskSweep checks the sweep deletes expired records from the file,
// with their requests and index entries, and leaves the live ones.
func TestDiskSweep(t *testing.T) {
	d, err := openDisk(t.TempDir(), 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	ctx := context.Background()
	const n = 50
	for i := range n {
		c, _ := mustClaim(t, d, "short/"+string(rune('a'+i)), lease)
		if err := d.Complete(ctx, c, replayed, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	mustEnqueue(t, d, "dead")
	if err := d.Fail(ctx, takeOne(t, d, lease), 500, "x", 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, d, "long", time.Hour)
	eventually(t, "the sweep to delete the expired records", func() bool {
		return d.count(bucketRecords) == 1 && d.count(bucketExpiry) == 1 && d.count(bucketRequests) == 0 && d.count(bucketDead) == 0
	})
	if _, err := d.Lookup(ctx, "long"); err != nil {
		t.Errorf("the sweep deleted a live record: %v", err)
	}
}

// FuzzDecodeAsync feeds arbitrary bytes to the decoder of the async
// records the disk store reads back from its file: it must never panic,
// and what it accepts must encode back to a value that decodes the same.
func FuzzDecodeAsync(f *testing.F) {
	f.Add(encodeAsync(asyncRecord{state: Queued, accepted: 1, at: 2}))
	f.Add(encodeAsync(asyncRecord{state: Delivering, token: newToken(), attempts: 3, lastStatus: 503, lastError: "x"}))
	f.Add(encodeAsync(asyncRecord{state: Completed, result: replayed, completed: 1_700_000_000, attempts: 1}))
	f.Add(encodeAsync(asyncRecord{state: Failed, at: 5, lastError: "gave up"}))
	f.Fuzz(func(t *testing.T, v []byte) {
		a, err := decodeAsync(v)
		if err != nil {
			if !errors.Is(err, errBadRecord) {
				t.Fatalf("error %v is not errBadRecord", err)
			}
			return
		}
		again, err := decodeAsync(encodeAsync(a))
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", a, err)
		}
		if !reflect.DeepEqual(again, a) {
			t.Fatalf("re-encoded %+v, decoded %+v", a, again)
		}
	})
}

// TestDiskUnreadableRequest damages a queued request in the file: Take
// dead-letters that event, saying why, and hands out the others.
func TestDiskUnreadableRequest(t *testing.T) {
	d := openDiskAt(t, t.TempDir())
	mustEnqueue(t, d, "damaged")
	mustEnqueue(t, d, "fine")
	err := d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRequests).Put([]byte("damaged"), []byte("\x7fnot a request"))
	})
	if err != nil {
		t.Fatal(err)
	}
	checkUnreadable(t, d)
}
