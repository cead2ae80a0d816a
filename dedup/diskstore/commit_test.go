package diskstore

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	bolt "go.etcd.io/bbolt"
)

// holdWriter takes the file's writer lock until the returned func is
// called, so that the writes of a test queue up behind it.
func holdWriter(t *testing.T, d *Store) (release func()) {
	t.Helper()
	tx, err := d.db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := tx.Rollback(); err != nil {
			t.Error(err)
		}
	}
}

// taken waits until the committer has taken every queued write into its
// transaction (which then waits for the writer lock).
func taken(t *testing.T, d *Store) {
	t.Helper()
	for deadline := time.Now().Add(storetest.LoadMargin); ; {
		d.group.mu.Lock()
		ok := d.group.running && len(d.group.queue) == 0
		d.group.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the committer did not take the queued writes")
		}
		time.Sleep(time.Millisecond)
	}
}

// queued waits until n writes wait in d's queue, not yet taken into a
// transaction.
func queued(t *testing.T, d *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(storetest.LoadMargin); ; {
		d.group.mu.Lock()
		got := len(d.group.queue)
		d.group.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// putKey is a write of key into the records bucket.
func putKey(key string) func(b diskBuckets) error {
	return func(b diskBuckets) error { return b.records.Put([]byte(key), []byte("12345678v")) }
}

// TestGroupCommit: the writes that arrive while a transaction commits are
// committed together in the next one, each told only once it is.
func TestGroupCommit(t *testing.T) {
	d := openDiskAt(t, t.TempDir())
	var (
		mu  sync.Mutex
		txs = map[int]int{}
	)
	d.onWrite = func(tx *bolt.Tx) {
		mu.Lock()
		txs[tx.ID()]++
		mu.Unlock()
	}
	release := holdWriter(t, d)
	// The first write is taken at once, and waits for the lock; the
	// others queue behind it.
	const n = 20
	errs := make(chan error, n)
	go func() { errs <- d.write(putKey("first")) }()
	taken(t, d)
	for i := range n - 1 {
		go func() { errs <- d.write(putKey(fmt.Sprint("k", i))) }()
	}
	queued(t, d, n-1)
	select {
	case err := <-errs:
		t.Fatalf("a write returned before its commit: %v", err)
	default:
	}
	release()
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := d.count(bucketRecords); got != n {
		t.Fatalf("%d records, want %d", got, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(txs) != 2 {
		t.Fatalf("%d write transactions (%v), want 2: the first write's, and one for the %d queued behind it", len(txs), txs, n-1)
	}
}

// TestGroupCommitFailure: a write whose fn fails gets its own error, and
// the writes it shared a transaction with are committed without it.
func TestGroupCommitFailure(t *testing.T) {
	d := openDiskAt(t, t.TempDir())
	release := holdWriter(t, d)
	errBoom := errors.New("boom")
	block := make(chan error, 1)
	go func() { block <- d.write(putKey("first")) }()
	taken(t, d)
	var (
		wg     sync.WaitGroup
		okErrs [4]error
		failed error
		runs   int
	)
	for i := range okErrs {
		wg.Go(func() { okErrs[i] = d.write(putKey(fmt.Sprint("ok", i))) })
	}
	wg.Go(func() {
		failed = d.write(func(b diskBuckets) error {
			runs++ // the shared run, then its own
			if err := b.records.Put([]byte("failed"), []byte("12345678v")); err != nil {
				return err
			}
			return errBoom
		})
	})
	queued(t, d, len(okErrs)+1)
	release()
	wg.Wait()
	if err := <-block; err != nil {
		t.Fatal(err)
	}
	for i, err := range okErrs {
		if err != nil {
			t.Errorf("write ok%d: %v", i, err)
		}
	}
	if !errors.Is(failed, errBoom) {
		t.Errorf("the failing write returned %v, want %v", failed, errBoom)
	}
	if runs != 2 {
		t.Errorf("the failing write's fn ran %d times, want 2 (shared, then alone)", runs)
	}
	if got := d.count(bucketRecords); got != len(okErrs)+1 {
		t.Errorf("%d records, want %d: those of the writes that succeeded, not the failed one's", got, len(okErrs)+1)
	}
}

// TestGroupCommitPanic: a write whose fn panics panics in its caller, and
// the others it shared a transaction with are committed.
func TestGroupCommitPanic(t *testing.T) {
	d := openDiskAt(t, t.TempDir())
	release := holdWriter(t, d)
	block := make(chan error, 1)
	go func() { block <- d.write(putKey("first")) }()
	taken(t, d)
	var (
		wg       sync.WaitGroup
		ok       error
		panicked any
	)
	wg.Go(func() { ok = d.write(putKey("ok")) })
	wg.Go(func() {
		defer func() { panicked = recover() }()
		_ = d.write(func(diskBuckets) error { panic("kaboom") })
	})
	queued(t, d, 2)
	release()
	wg.Wait()
	if err := <-block; err != nil {
		t.Fatal(err)
	}
	if ok != nil {
		t.Errorf("the other write: %v", ok)
	}
	if panicked != "kaboom" {
		t.Errorf("the panicking write's caller recovered %v, want kaboom", panicked)
	}
}

// TestGroupCommitStalled: a write whose commit does not come within the
// store's timeout returns ErrStalled, and is committed all the same once
// the file answers.
func TestGroupCommitStalled(t *testing.T) {
	d := openDiskAt(t, t.TempDir())
	d.timeout = 50 * time.Millisecond
	release := holdWriter(t, d)
	if err := d.write(putKey("late")); !errors.Is(err, ErrStalled) {
		t.Fatalf("write behind a held lock: %v, want ErrStalled", err)
	}
	if d.stalled.Load() != 1 {
		t.Fatalf("%d stalled, want 1", d.stalled.Load())
	}
	release()
	for deadline := time.Now().Add(storetest.LoadMargin); d.stalled.Load() != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the stalled write never finished")
		}
		time.Sleep(time.Millisecond)
	}
	if got := d.count(bucketRecords); got != 1 {
		t.Fatalf("%d records, want the late write's", got)
	}
}

// TestCommitsGrowOnOneSlot: with one scheduler slot (GOMAXPROCS=1, as on
// one CPU), where each flush can hold the only slot for its whole length,
// the handlers that became ready during a commit queue their writes
// before the next commit starts, so that a commit holds the writes of
// every writer waiting, not of the one that ran first. Here the flush is
// a busy wait in the commit's hook, which holds the slot as an fdatasync
// does when the runtime does not take the slot back: bbolt's own are off.
func TestCommitsGrowOnOneSlot(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	d := openDiskAt(t, t.TempDir())
	d.db.NoSync = true
	var commits, writes atomic.Int64
	d.onCommit = func(n int, _ time.Duration) {
		commits.Add(1)
		writes.Add(int64(n))
		for start := time.Now(); time.Since(start) < 200*time.Microsecond; {
		}
	}
	const writers, each = 16, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := d.write(putKey(fmt.Sprintf("w%d-%d", w, i))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// Each writer has one write at a time: a commit holds at most 16.
	mean := float64(writes.Load()) / float64(commits.Load())
	t.Logf("%d writes in %d commits: %.1f a commit", writes.Load(), commits.Load(), mean)
	if mean < 12 {
		t.Errorf("%d writes of %d writers in %d commits, %.1f a commit; want at least 12 (16 wait for each)", writes.Load(), writers, commits.Load(), mean)
	}
}
