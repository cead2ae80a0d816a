package diskstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/storeop"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// File is the name of the embedded store's file under its directory.
const File = "webhook-dedup.db"

// Store is the embedded store on disk (DATA_DIR): the records of sync and
// async routes and the async queue in one bbolt file, for one replica that
// keeps them across restarts. Every write is committed to the file, and
// fsync'd, before the call returns; concurrent writes share one commit
// (and its fsyncs: commit.go), so the accept path stays fast under load.
// It is safe for concurrent use, and the file is locked against a second
// process.
//
// The file holds five buckets, all keyed by the store key or by an 8-byte
// big-endian unix millisecond time followed by the store key (so that a
// cursor walks them in time order):
//
//	records  key → expiry (8 bytes, unix ms, 0: none) + the record
//	requests key → a queued event's request (encodeRequest)
//	lanes    one bucket per route (lanes.go), each time + key: its queued
//	         events by when they are due, and its events being delivered
//	         by when their lease runs out
//	dead     failure time + key: the dead letters
//	expiry   time + key: the records that expire, by when
//
// and the events listing's two (events.go).
//
// Expired records are invisible at once, deleted when their key is written
// again, and swept out in small transactions every sweep interval.
type Store struct {
	db *bolt.DB
	// group gathers the writes that wait for a commit (commit.go).
	group group
	// unbatched commits every write on its own (one fsync each): only
	// for the benchmark that shows what batching saves.
	unbatched bool
	// onWrite and onCommit, set by tests before the store is used, are
	// called with the transaction of every run of a write's fn, and
	// after every shared commit with its writes and how long it took.
	onWrite  func(tx *bolt.Tx)
	onCommit func(writes int, took time.Duration)
	// refused is set while the volume refuses the file's writes (full,
	// over quota, read-only): Take may still fit, but no enqueue or
	// completion does, so Ping reports it until a write succeeds again.
	refused atomic.Bool
	// dir is the directory of the file: Ping looks at its volume's room.
	dir string
	// timeout bounds each operation (bounded); zero: none. stalled counts
	// the operations still waiting on the file after their time was up.
	timeout time.Duration
	stalled atomic.Int64

	// counts are what Stats reports, kept by the commits that change them.
	counts *queueCounts
	// writing holds each write transaction and its commit's handlers
	// together (update), so that the next one sees the counts of every
	// transaction before it: bbolt runs a commit's handlers only after it
	// lets the next writer in. cur is the tally of the write transaction
	// under way (txTally); both are only touched by writes.
	writing sync.Mutex
	cur     struct {
		tx    *bolt.Tx
		tally *tally
	}

	// stop ends the sweep of expired records; done waits for it.
	stop      context.CancelFunc
	done      sync.WaitGroup
	closeOnce sync.Once
}

// diskLockTimeout is how long OpenDisk waits for another process to let go
// of the file before saying it is in use.
const diskLockTimeout = time.Second

// diskSweepInterval is how often expired records are deleted from the file.
const diskSweepInterval = time.Minute

// ErrLocked means another process has the store's file open.
var ErrLocked = errors.New("dedup: the store's file is in use by another process")

// Config says where the store's file is and how long its operations may
// take.
type Config struct {
	// Dir is the directory of the file (DATA_DIR); it must exist.
	Dir string
	// Timeout bounds each operation (STORE_TIMEOUT): a volume that stalls
	// does not stall the caller past it. Zero: no bound.
	Timeout time.Duration
}

// Open opens (or creates) the store's file in cfg.Dir, and starts the
// sweep of expired records, which Close stops.
func Open(cfg Config) (*Store, error) { return openDisk(cfg, diskSweepInterval) }

func openDisk(cfg Config, sweepEvery time.Duration) (*Store, error) {
	dir := cfg.Dir
	path := filepath.Join(dir, File)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: diskLockTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s (still locked after %s)", ErrLocked, path, diskLockTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("dedup: open %s: %w", path, err)
	}
	var counts *queueCounts
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		if err := migrateDue(tx); err != nil {
			return err
		}
		if err := openEvents(tx); err != nil {
			return err
		}
		now := time.Now()
		b := buckets(tx)
		if err := b.releaseDeliveries(now.UnixMilli()); err != nil {
			return err
		}
		counts = b.countQueue(now)
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("dedup: open %s: %w", path, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	d := &Store{db: db, stop: stop, dir: dir, timeout: cfg.Timeout, counts: counts}
	d.done.Go(func() { storeop.Every(ctx, sweepEvery, func() bool { _ = d.sweep(); return false }) })
	return d, nil
}

// Close stops the sweep and closes the file, releasing its lock. On a
// stalled volume it gives up after the store's timeout (at least a
// second), so that a shutdown ends on time; the process's exit releases
// the lock then.
func (d *Store) Close() error {
	var err error
	d.closeOnce.Do(func() {
		d.stop()
		err = d.bounded(max(d.timeout, time.Second), func() error {
			d.done.Wait()
			return d.db.Close()
		})
		if errors.Is(err, ErrStalled) {
			err = fmt.Errorf("dedup: close %s: %w", d.dir, err)
		}
	})
	return err
}

// Features is what the on-disk store can do: keep records and the async
// queue across restarts, for the one process that holds the file.
func Features() dedup.Features { return dedup.Features{Queue: true, Durable: true} }

// Backend is d as the program uses it: its records and its queue.
func (d *Store) Backend() dedup.Backend {
	return dedup.Backend{Features: Features(), Store: d, Queue: d, Close: d.Close}
}
