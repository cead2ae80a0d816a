package diskstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	bolt "go.etcd.io/bbolt"
)

func openDiskAt(t *testing.T, dir string) *Store {
	t.Helper()
	d, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func TestDisk(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (dedup.Backend, func() dedup.Backend) {
		dir := t.TempDir()
		d := openDiskAt(t, dir)
		return d.Backend(), func() dedup.Backend {
			// One process holds the file: the restarted one opens it once
			// the first has closed it.
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			return openDiskAt(t, dir).Backend()
		}
	})
}

func BenchmarkDisk(b *testing.B) {
	for _, unbatched := range []bool{false, true} {
		name := "batched"
		if unbatched {
			// Each call committed on its own: what sharing one commit
			// among concurrent calls saves.
			name = "unbatched"
		}
		b.Run(name, func(b *testing.B) {
			d, err := Open(Config{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			d.unbatched = unbatched
			b.Cleanup(func() { _ = d.Close() })
			storetest.Bench(b, d.Backend())
		})
	}
}

// TestDiskReopen closes the store and opens its file again, as a restart
// does: the records of both modes and the queue are all still there.
func TestDiskReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	d := openDiskAt(t, dir)
	inFlight, _ := storetest.MustClaim(t, d, "sync/in-flight", storetest.Lease)
	done, _ := storetest.MustClaim(t, d, "sync/completed", storetest.Lease)
	if err := d.Complete(ctx, done, storetest.Replayed, storetest.Keep); err != nil {
		t.Fatal(err)
	}
	storetest.MustEnqueue(t, d, "async/failed")
	if err := d.Fail(ctx, storetest.TakeOne(t, d, storetest.Lease), 500, "boom", storetest.Keep); err != nil {
		t.Fatal(err)
	}
	storetest.MustEnqueue(t, d, "async/queued")
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	d = openDiskAt(t, dir)
	for key, want := range map[string]dedup.State{
		"sync/in-flight": dedup.InFlight, "sync/completed": dedup.Completed, "async/queued": dedup.Queued, "async/failed": dedup.Failed,
	} {
		if rec := storetest.MustLookup(t, d, key); rec.State != want {
			t.Errorf("%s after reopening: %v, want %v", key, rec.State, want)
		}
	}
	if err := d.Complete(ctx, inFlight, storetest.Replayed, storetest.Keep); err != nil {
		t.Errorf("completing a claim taken before the restart: %v", err)
	}
	ds := storetest.Take(t, d, 10, storetest.Lease)
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
	d, err := Open(Config{Dir: dir})
	if err == nil {
		_ = d.Close()
		t.Fatal("a second OpenDisk on one directory succeeded")
	}
	if !errors.Is(err, ErrLocked) {
		t.Errorf("second OpenDisk = %v, want ErrDiskLocked", err)
	}
}

// TestDiskSweep checks the sweep deletes expired records from the file,
// with their requests and index entries, and leaves the live ones.
func TestDiskSweep(t *testing.T) {
	d, err := openDisk(Config{Dir: t.TempDir()}, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	ctx := context.Background()
	const n = 50
	for i := range n {
		c, _ := storetest.MustClaim(t, d, "short/"+string(rune('a'+i)), storetest.Lease)
		if err := d.Complete(ctx, c, storetest.Replayed, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	storetest.MustEnqueue(t, d, "dead")
	if err := d.Fail(ctx, storetest.TakeOne(t, d, storetest.Lease), 500, "x", 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	storetest.MustClaim(t, d, "long", time.Hour)
	storetest.Eventually(t, "the sweep to delete the expired records", func() bool {
		return d.count(bucketRecords) == 1 && d.count(bucketExpiry) == 1 && d.count(bucketRequests) == 0 && d.count(bucketDead) == 0
	})
	if _, err := d.Lookup(ctx, "long"); err != nil {
		t.Errorf("the sweep deleted a live record: %v", err)
	}
}

// TestDiskUnreadableRequest damages a queued request in the file: Take
// dead-letters that event, saying why, and hands out the others.
func TestDiskUnreadableRequest(t *testing.T) {
	d := openDiskAt(t, t.TempDir())
	storetest.MustEnqueue(t, d, "damaged")
	storetest.MustEnqueue(t, d, "fine")
	err := d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRequests).Put([]byte("damaged"), []byte("\x7fnot a request"))
	})
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckUnreadable(t, d.Backend())
}

// TestDiskReopenReleasesDeliveries: the deliveries a process held when it
// stopped are due again as soon as the file is reopened, not after their
// lease (the lock proves no process holds them); a retry scheduled for
// later stays where it is.
func TestDiskReopenReleasesDeliveries(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	d := openDiskAt(t, dir)
	storetest.MustEnqueue(t, d, "held")
	held := storetest.TakeOne(t, d, time.Hour)
	storetest.MustEnqueue(t, d, "later")
	if err := d.Retry(ctx, storetest.TakeOne(t, d, time.Hour), time.Now().Add(time.Hour), 503, "app down"); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil { // as a killed process leaves it: nothing settled
		t.Fatal(err)
	}

	d = openDiskAt(t, dir)
	ds := storetest.Take(t, d, 10, storetest.Lease)
	if len(ds) != 1 || ds[0].Claim.Key != "held" || ds[0].Attempt != 2 {
		t.Fatalf("Take after reopening = %+v, want the held delivery at once, attempt 2", ds)
	}
	if err := d.Succeed(ctx, held, storetest.Replayed, storetest.Keep); !errors.Is(err, dedup.ErrNotOwner) {
		t.Errorf("the stopped holder's Succeed = %v, want ErrNotOwner", err)
	}
	if rec := storetest.MustLookup(t, d, "later"); rec.State != dedup.Queued || rec.Delivery.NextAttemptAt.Before(time.Now().Add(50*time.Minute)) {
		t.Errorf("the retry scheduled for later: %v due %s, want queued, still due in about an hour", rec.State, rec.Delivery.NextAttemptAt)
	}
}

// TestDiskBounded: an operation on a file that does not answer (a frozen
// volume blocks the write's system calls) returns ErrStalled once the
// store's timeout is up, leaving the call to finish in the background;
// past maxStalled such calls, the next fails at once.
func TestDiskBounded(t *testing.T) {
	d := openDiskAt(t, t.TempDir())
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	start := time.Now()
	err := d.bounded(50*time.Millisecond, func() error { <-release; return nil })
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("a call that never returns: %v, want ErrStalled", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("answered after %s, want about the timeout", took)
	}
	for range maxStalled - 1 {
		_ = d.bounded(time.Millisecond, func() error { <-release; return nil })
	}
	called := false
	if err := d.bounded(time.Hour, func() error { called = true; return nil }); !errors.Is(err, ErrStalled) || called {
		t.Errorf("with %d calls stalled: %v (called: %v), want ErrStalled at once", maxStalled, err, called)
	}
}
