package diskstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
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

var (
	bucketRecords  = []byte("records")
	bucketRequests = []byte("requests")
	bucketLanes    = []byte("lanes")
	bucketDead     = []byte("dead")
	bucketExpiry   = []byte("expiry")
)

// diskLockTimeout is how long OpenDisk waits for another process to let go
// of the file before saying it is in use.
const diskLockTimeout = time.Second

// diskSweepInterval is how often expired records are deleted from the file.
const diskSweepInterval = time.Minute

// diskSweepBatch bounds the records one sweep transaction deletes, so that
// the writes of requests are not held up for long.
const diskSweepBatch = 1000

// ErrLocked means another process has the store's file open.
var ErrLocked = errors.New("dedup: the store's file is in use by another process")

// ErrStalled means the store's file did not answer within the store's
// timeout: its volume is frozen or stalled (a write blocks in the kernel
// for as long as it is).
var ErrStalled = errors.New("dedup: the store's file did not answer in time (is its volume frozen or stalled?)")

// maxStalled bounds the operations left waiting on a stalled volume: past
// it, each call fails at once rather than leave one more goroutine behind.
const maxStalled = 256

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
		for _, b := range [][]byte{bucketRecords, bucketRequests, bucketLanes, bucketDead, bucketExpiry} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		if err := migrateDue(tx); err != nil {
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

// bounded runs fn, which calls the file, for at most timeout (zero: no
// bound). A volume that stalls blocks the file's system calls as long as
// it stalls, and no caller may wait that long: when the time is up
// bounded returns ErrStalled and leaves fn to finish in the background,
// its result dropped. What fn wrote, it wrote: a claim that lands that
// late sits out its lease, as one whose answer a network lost.
func (d *Store) bounded(timeout time.Duration, fn func() error) error {
	if timeout <= 0 {
		return fn()
	}
	if d.stalled.Load() >= maxStalled {
		return ErrStalled
	}
	done := make(chan error, 1)
	go func() { done <- fn() }()
	return d.await(timeout, done)
}

// await waits for the outcome of a call to the file on done, for at most
// timeout (zero: no bound). When the time is up it returns ErrStalled, and
// counts the call among the stalled ones until its outcome comes.
func (d *Store) await(timeout time.Duration, done chan error) error {
	if timeout <= 0 {
		return <-done
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		d.stalled.Add(1)
		go func() { <-done; d.stalled.Add(-1) }()
		return ErrStalled
	}
}

// view is a read transaction bounded by the store's timeout.
func (d *Store) view(fn func(tx *bolt.Tx) error) error {
	return d.bounded(d.timeout, func() error { return d.db.View(fn) })
}

// sweep deletes the expired records, diskSweepBatch per transaction.
func (d *Store) sweep() error {
	for {
		n := 0
		err := d.write(func(b diskBuckets) error {
			n = 0
			now := time.Now().UnixMilli()
			var keys [][]byte
			c := b.expiry.Cursor()
			for k, _ := c.First(); k != nil && len(keys) < diskSweepBatch; k, _ = c.Next() {
				if int64(binary.BigEndian.Uint64(k)) > now {
					break
				}
				keys = append(keys, bytes.Clone(k[8:]))
			}
			for _, key := range keys {
				if _, ok := b.get(key, now); !ok {
					if err := b.deleteAll(key); err != nil {
						return err
					}
					n++
				}
			}
			return nil
		})
		if err != nil || n < diskSweepBatch {
			return err
		}
	}
}

// write runs fn on the buckets of a write transaction that is committed
// before it returns. Concurrent writes share one commit (commit.go). fn
// may run more than once (the commit of writes whose fn fails is tried
// again without it, and it runs alone), so it sets its results afresh each
// time; the changes to the queue's counts of the run that commits are the
// ones counted.
func (d *Store) write(fn func(b diskBuckets) error) error {
	run := func(tx *bolt.Tx) error {
		if d.onWrite != nil {
			d.onWrite(tx)
		}
		b := buckets(tx)
		b.tally = d.txTally(tx)
		return fn(b)
	}
	if d.unbatched {
		return d.bounded(d.timeout, func() error { return d.update(run) })
	}
	return d.commit(run)
}

// txTally is the tally of the write transaction tx, shared by every write
// it runs, and counted once tx commits. Only writes call it, one
// transaction at a time (update).
func (d *Store) txTally(tx *bolt.Tx) *tally {
	if d.cur.tx != tx {
		t := &tally{}
		d.cur.tx, d.cur.tally = tx, t
		tx.OnCommit(func() { d.counts.apply(t, time.Now()) })
	}
	return d.cur.tally
}

// update runs fn in a write transaction of its own, committed (and its
// changes to the counts applied) before it returns.
func (d *Store) update(fn func(tx *bolt.Tx) error) error {
	d.writing.Lock()
	defer d.writing.Unlock()
	err := d.db.Update(fn)
	d.cur.tx, d.cur.tally = nil, nil
	d.noteRefusal(err)
	return err
}

// depth is the depth of the queue (Stats' Depth) as b's write sees it:
// what the transactions before it committed, and what the writes before
// it in its own transaction changed.
func (d *Store) depth(b diskBuckets, now int64) int {
	return d.counts.depth(now) + b.tally.waiting
}

// noteRefusal keeps refused in step with what the volume did with the
// last write.
func (d *Store) noteRefusal(err error) {
	switch {
	case err == nil:
		d.refused.Store(false)
	case volumeRefused(err):
		d.refused.Store(true)
	}
}

// volumeRefused reports whether err is the volume refusing a write, not
// the write's own logic.
func volumeRefused(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EROFS)
}

// diskBuckets are the buckets of one transaction.
type diskBuckets struct {
	records, requests, lanes, dead, expiry *bolt.Bucket
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
	}
	if err := b.requests.Delete(key); err != nil {
		return err
	}
	return b.records.Delete(key)
}

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
	return b.put(key, expires, codec.EncodeAsync(a))
}

// expiresAt is when key's record expires (unix ms, 0: never, or no
// record), expired or not.
func (b diskBuckets) expiresAt(key []byte) int64 {
	if v := b.records.Get(key); len(v) >= 8 {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
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

// Claim takes key for lease if no record holds it (sync delivery). If the
// key is free it returns the new Claim and a Record in state Absent;
// otherwise a zero Claim and the record that holds the key, of either
// delivery mode.
func (d *Store) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error) {
	if err := storeop.CheckClaim(ctx, key, lease); err != nil {
		return dedup.Claim{}, dedup.Record{}, err
	}
	tok := codec.NewToken()
	k := []byte(key)
	var (
		won bool
		rec dedup.Record
	)
	err := d.write(func(b diskBuckets) error {
		now := time.Now()
		if s, ok := b.get(k, now.UnixMilli()); ok {
			won = false
			var err error
			rec, err = s.record(now.UnixMilli())
			return err
		}
		won = true
		if err := b.deleteAll(k); err != nil { // an expired record
			return err
		}
		return b.put(k, now.Add(lease).UnixMilli(), codec.EncodeInFlight(tok, now.UnixMilli()))
	})
	if err != nil {
		return dedup.Claim{}, dedup.Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	if !won {
		return dedup.Claim{}, rec, nil
	}
	return dedup.Claim{Key: key, Token: hex.EncodeToString(tok[:])}, dedup.Record{State: dedup.Absent}, nil
}

// ownsSync reports whether tok holds key's sync in-flight record.
func (b diskBuckets) ownsSync(key []byte, tok [codec.TokenLen]byte, now int64) bool {
	s, ok := b.get(key, now)
	return ok && bytes.HasPrefix(s.value, codec.OwnerPrefix(tok)) && len(s.value) == codec.InFlightLen
}

// Complete replaces c's in-flight record with a completed one holding res,
// kept for ttl. If c no longer owns its key it returns ErrNotOwner and
// changes nothing.
func (d *Store) Complete(ctx context.Context, c dedup.Claim, res dedup.Result, ttl time.Duration) error {
	tok, err := storeop.CheckComplete(ctx, c, res, ttl)
	if err != nil {
		return err
	}
	owned := false
	err = d.write(func(b diskBuckets) error {
		now := time.Now()
		owned = b.ownsSync([]byte(c.Key), tok, now.UnixMilli())
		if !owned {
			return nil
		}
		return b.put([]byte(c.Key), now.Add(ttl).UnixMilli(), codec.EncodeCompleted(res, now.Unix()))
	})
	if err == nil && !owned {
		err = dedup.ErrNotOwner
	}
	if err != nil {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, err)
	}
	return nil
}

// Release deletes c's in-flight record so the event can be claimed again.
// If c no longer owns its key it returns ErrNotOwner and changes nothing.
func (d *Store) Release(ctx context.Context, c dedup.Claim) error {
	tok, err := storeop.CheckOwned(ctx, "release", c.Key, c.Token)
	if err != nil {
		return err
	}
	owned := false
	err = d.write(func(b diskBuckets) error {
		owned = b.ownsSync([]byte(c.Key), tok, time.Now().UnixMilli())
		if !owned {
			return nil
		}
		return b.deleteAll([]byte(c.Key))
	})
	if err == nil && !owned {
		err = dedup.ErrNotOwner
	}
	if err != nil {
		return fmt.Errorf("dedup: release %s: %w", c.Key, err)
	}
	return nil
}

// Lookup returns the record for key, or ErrNotFound.
func (d *Store) Lookup(ctx context.Context, key string) (dedup.Record, error) {
	if err := ctx.Err(); err != nil {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	var rec dedup.Record
	err := d.view(func(tx *bolt.Tx) error {
		now := time.Now().UnixMilli()
		s, ok := buckets(tx).get([]byte(key), now)
		if !ok {
			return dedup.ErrNotFound
		}
		var err error
		rec, err = s.record(now)
		return err
	})
	if err != nil {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	return rec, nil
}

// Forget deletes the record for key, whatever its state, with its queued
// request if it has one, and reports whether there was one.
func (d *Store) Forget(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	had := false
	err := d.write(func(b diskBuckets) error {
		_, had = b.get([]byte(key), time.Now().UnixMilli())
		return b.deleteAll([]byte(key))
	})
	if err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	return had, nil
}

// Ping checks that the file answers within the store's timeout, that its
// volume has room, and, after the volume refused a write, that it takes
// one again.
func (d *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	if err := d.view(func(*bolt.Tx) error { return nil }); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	if n := d.stalled.Load(); n > 0 {
		// Reads of the pages in memory still answer; the writes do not.
		return fmt.Errorf("dedup: ping: %w: %d operations still waiting on the file", ErrStalled, n)
	}
	var vol syscall.Statfs_t
	if err := syscall.Statfs(d.dir, &vol); err == nil && vol.Bavail*uint64(vol.Bsize) < minFree {
		return fmt.Errorf("dedup: ping: %w: the volume of %s has %d bytes free", dedup.ErrReadOnly, d.dir, vol.Bavail*uint64(vol.Bsize))
	}
	if d.refused.Load() {
		// Try a write of its own: the volume may have room again.
		err := d.bounded(d.timeout, func() error {
			return d.db.Update(func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketRecords)
				if err := b.Put(probeKey, nil); err != nil {
					return err
				}
				return b.Delete(probeKey)
			})
		})
		d.noteRefusal(err)
		if err != nil {
			return fmt.Errorf("dedup: ping: %w: %w", dedup.ErrReadOnly, err)
		}
	}
	return nil
}

// minFree is the room the file's volume must have for the store to be
// ready: a nearly full volume refuses the writes that need the file to
// grow (a first-seen event, a completion) while the small ones still fit
// in its free pages, so it is taken as full before it is.
const minFree = 1 << 20

// probeKey is the record Ping writes, and deletes, to see whether a volume
// that refused writes takes them again. No store key is empty-prefixed
// like it.
var probeKey = []byte("\x00webhook-dedup:probe")

// Enqueue claims key and stores req for delivery in one transaction,
// committed to the file before it returns. If the key was free it returns
// true; otherwise false and the record that holds the key. With maxDepth,
// the depth is checked in the same transaction: exact, as one process
// holds the file.
func (d *Store) Enqueue(ctx context.Context, key string, req dedup.Request, maxDepth int) (bool, dedup.Record, error) {
	if err := ctx.Err(); err != nil {
		return false, dedup.Record{}, fmt.Errorf("dedup: enqueue %s: %w", key, err)
	}
	payload := codec.EncodeRequest(req)
	var (
		won, full bool
		rec       dedup.Record
	)
	err := d.write(func(b diskBuckets) error {
		now := time.Now().UnixMilli()
		k := []byte(key)
		won, full = false, false
		if s, ok := b.get(k, now); ok {
			var err error
			rec, err = s.record(now)
			return err
		}
		if maxDepth > 0 && d.depth(b, now) >= maxDepth {
			full = true
			return nil
		}
		won = true
		if err := b.deleteAll(k); err != nil { // an expired record
			return err
		}
		a := codec.Async{State: dedup.Queued, Accepted: now, At: now}
		if err := b.requests.Put(k, payload); err != nil {
			return err
		}
		return b.putAsync(k, req.Route, codec.Async{}, a, 0)
	})
	if err == nil && full {
		err = dedup.ErrQueueFull
	}
	if err != nil {
		return false, dedup.Record{}, fmt.Errorf("dedup: enqueue %s: %w", key, err)
	}
	return won, rec, nil
}

// Take hands out at most n due deliveries of lane, each leased for lease.
func (d *Store) Take(ctx context.Context, lane dedup.Lane, n int, lease time.Duration) ([]dedup.Delivery, error) {
	if take, err := storeop.CheckTake(ctx, n, lease); !take {
		return nil, err
	}
	// Workers poll: an empty poll reads, and commits nothing.
	var due bool
	err := d.view(func(tx *bolt.Tx) error {
		due = len(buckets(tx).dueIn(lane, time.Now().UnixMilli(), 1)) > 0
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dedup: take: %w", err)
	}
	if !due {
		return nil, nil
	}
	var out []dedup.Delivery
	err = d.write(func(b diskBuckets) error {
		out = out[:0]
		now := time.Now()
		for _, e := range b.dueIn(lane, now.UnixMilli(), n) {
			dl, ok, err := b.take(e, now, lease)
			if err != nil {
				return err
			}
			if ok {
				out = append(out, dl)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dedup: take: %w", err)
	}
	return out, nil
}

// take leases e's event to its taker for lease from now, and reports
// whether it did: not when e is no longer its record's entry (it is
// dropped, rather than stall the lane on it), nor when the event's
// request cannot be read (it is dead-lettered, rather than stall every
// Take on it).
func (b diskBuckets) take(e dueEntry, now time.Time, lease time.Duration) (dedup.Delivery, bool, error) {
	ms := now.UnixMilli()
	a, ok := b.entryRecord(e, ms)
	if !ok {
		return dedup.Delivery{}, false, b.lanes.Bucket(laneName(e.route)).Delete(e.idx)
	}
	key := e.key()
	req, err := codec.DecodeRequest(b.requests.Get(key))
	if err != nil {
		failed := a
		failed.State, failed.At, failed.LastStatus = dedup.Failed, ms, 0
		failed.LastError = "the stored request cannot be read: " + err.Error()
		return dedup.Delivery{}, false, b.putAsync(key, e.route, a, failed, now.Add(storeop.UnreadableKeep).UnixMilli())
	}
	next := a
	next.State = dedup.Delivering
	next.Token = codec.NewToken()
	next.Attempts++
	next.At = now.Add(lease).UnixMilli()
	if err := b.putAsync(key, e.route, a, next, 0); err != nil {
		return dedup.Delivery{}, false, err
	}
	return dedup.Delivery{
		Claim:      dedup.Claim{Key: string(key), Token: hex.EncodeToString(next.Token[:])},
		Request:    req,
		Attempt:    next.Attempts,
		AcceptedAt: time.UnixMilli(a.Accepted),
	}, true, nil
}

// Extend renews dl's lease for lease from now, if dl still holds its
// event.
func (d *Store) Extend(ctx context.Context, dl dedup.Delivery, lease time.Duration) error {
	tok, err := storeop.CheckExtend(ctx, dl, lease)
	if err != nil {
		return err
	}
	err = d.write(func(b diskBuckets) error {
		now := time.Now()
		key := []byte(dl.Claim.Key)
		a, ok := b.heldBy(key, tok, now.UnixMilli())
		if !ok {
			return dedup.ErrNotOwner
		}
		next := a
		next.At = now.Add(lease).UnixMilli()
		return b.putAsync(key, b.routeOf(key), a, next, 0)
	})
	if err != nil {
		return fmt.Errorf("dedup: extend %s: %w", dl.Claim.Key, err)
	}
	return nil
}

// heldBy is key's record if tok holds its delivery: taken with tok, and
// neither taken over, settled nor forgotten since (its lease may have run
// out, but while no one took it over the delivery is still tok's).
func (b diskBuckets) heldBy(key []byte, tok [codec.TokenLen]byte, now int64) (codec.Async, bool) {
	s, ok := b.get(key, now)
	if !ok {
		return codec.Async{}, false
	}
	a, err := codec.DecodeAsync(s.value)
	if err != nil || a.State != dedup.Delivering || a.Token != tok {
		return codec.Async{}, false
	}
	return a, true
}

// settle ends dl's attempt, if dl still holds its event: the record drops
// dl's token and keeps the attempt's status and reason, and change sets
// the rest of its next state and returns its expiry.
func (d *Store) settle(ctx context.Context, op string, dl dedup.Delivery, status int, reason string, change func(next *codec.Async, now time.Time) (expires int64)) error {
	if err := codec.CheckResult(dedup.Result{Status: status}); err != nil {
		return fmt.Errorf("dedup: %s %s: %w", op, dl.Claim.Key, err)
	}
	tok, err := storeop.CheckOwned(ctx, op, dl.Claim.Key, dl.Claim.Token)
	if err != nil {
		return err
	}
	err = d.write(func(b diskBuckets) error {
		now := time.Now()
		key := []byte(dl.Claim.Key)
		s, ok := b.get(key, now.UnixMilli())
		if !ok {
			return dedup.ErrNotOwner
		}
		a, err := codec.DecodeAsync(s.value)
		if err == nil && op == "succeed" && a.State == dedup.Completed && a.Token == tok {
			return nil // done already: a repeat whose first answer was lost
		}
		if err != nil || a.State != dedup.Delivering || a.Token != tok {
			return dedup.ErrNotOwner
		}
		next := a
		if op != "succeed" {
			// A completed record keeps the token that completed it, so
			// that its holder's repeat is recognised.
			next.Token = [codec.TokenLen]byte{}
		}
		next.LastStatus, next.LastError = status, reason
		expires := change(&next, now)
		route := b.routeOf(key) // before a completion drops the request
		if next.State == dedup.Completed {
			if err := b.requests.Delete(key); err != nil {
				return err
			}
		}
		return b.putAsync(key, route, a, next, expires)
	})
	if err != nil {
		return fmt.Errorf("dedup: %s %s: %w", op, dl.Claim.Key, err)
	}
	return nil
}

// Succeed completes dl's event with res, kept for ttl, and drops its request.
func (d *Store) Succeed(ctx context.Context, dl dedup.Delivery, res dedup.Result, ttl time.Duration) error {
	if err := storeop.CheckDuration("ttl", ttl); err != nil {
		return fmt.Errorf("dedup: succeed %s: %w", dl.Claim.Key, err)
	}
	return d.settle(ctx, "succeed", dl, res.Status, "", func(a *codec.Async, now time.Time) int64 {
		a.State, a.At = dedup.Completed, 0
		a.Result, a.Completed = res, now.Unix()
		return now.Add(ttl).UnixMilli()
	})
}

// Retry gives dl back to the queue, due again at next.
func (d *Store) Retry(ctx context.Context, dl dedup.Delivery, next time.Time, status int, reason string) error {
	return d.settle(ctx, "retry", dl, status, reason, func(a *codec.Async, _ time.Time) int64 {
		a.State, a.At = dedup.Queued, next.UnixMilli()
		return 0
	})
}

// Fail dead-letters dl's event, kept with its request for keep.
func (d *Store) Fail(ctx context.Context, dl dedup.Delivery, status int, reason string, keep time.Duration) error {
	if err := storeop.CheckDuration("keep", keep); err != nil {
		return fmt.Errorf("dedup: fail %s: %w", dl.Claim.Key, err)
	}
	return d.settle(ctx, "fail", dl, status, reason, func(a *codec.Async, now time.Time) int64 {
		a.State, a.At = dedup.Failed, now.UnixMilli()
		return now.Add(keep).UnixMilli()
	})
}

// Requeue puts a dead-lettered event back in the queue as a new first
// attempt, accepted now (so RETRY_MAX_AGE counts afresh).
func (d *Store) Requeue(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: requeue %s: %w", key, err)
	}
	err := d.write(func(b diskBuckets) error {
		now := time.Now().UnixMilli()
		k := []byte(key)
		s, ok := b.get(k, now)
		if !ok {
			return dedup.ErrNotFound
		}
		a, err := codec.DecodeAsync(s.value)
		if err != nil || a.State != dedup.Failed {
			return dedup.ErrNotFailed
		}
		next := codec.Async{State: dedup.Queued, Accepted: now, At: now}
		return b.putAsync(k, b.routeOf(k), a, next, 0)
	})
	if err != nil {
		return fmt.Errorf("dedup: requeue %s: %w", key, err)
	}
	return nil
}

// DeadLetters lists up to limit failed events, oldest failure first, from
// cursor (empty: the first page), and the cursor of the next page.
func (d *Store) DeadLetters(ctx context.Context, cursor string, limit int) ([]dedup.DeadLetter, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", fmt.Errorf("dedup: dead letters: %w", err)
	}
	if limit <= 0 {
		return nil, "", fmt.Errorf("dedup: dead letters: limit %d is not positive", limit)
	}
	after, err := hex.DecodeString(cursor)
	if err != nil || (cursor != "" && len(after) < 8) {
		return nil, "", fmt.Errorf("%w %q", dedup.ErrBadCursor, cursor)
	}
	var (
		out  []dedup.DeadLetter
		next string
	)
	err = d.view(func(tx *bolt.Tx) error {
		b := buckets(tx)
		now := time.Now().UnixMilli()
		c := b.dead.Cursor()
		k, _ := c.First()
		if len(after) > 0 {
			k, _ = c.Seek(after)
			if bytes.Equal(k, after) {
				k, _ = c.Next()
			}
		}
		for ; k != nil; k, _ = c.Next() {
			s, ok := b.get(k[8:], now)
			if !ok {
				continue // expired; the sweep deletes it
			}
			if len(out) == limit {
				next = hex.EncodeToString(after)
				return nil
			}
			a, err := codec.DecodeAsync(s.value)
			if err != nil {
				return err
			}
			out = append(out, dedup.DeadLetter{
				Key:        string(k[8:]),
				Attempts:   a.Attempts,
				LastStatus: a.LastStatus,
				LastError:  a.LastError,
				FailedAt:   time.UnixMilli(a.At),
			})
			after = bytes.Clone(k)
		}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("dedup: dead letters: %w", err)
	}
	return out, next, nil
}

// Stats reports the queue's depth, its oldest event's age and the number
// of dead letters, from the counts kept in memory (queueCounts): it costs
// the same whatever the backlog, and does not touch the file.
func (d *Store) Stats(ctx context.Context) (dedup.QueueStats, error) {
	if err := ctx.Err(); err != nil {
		return dedup.QueueStats{}, fmt.Errorf("dedup: stats: %w", err)
	}
	return d.counts.stats(time.Now()), nil
}

// count is the number of keys in bucket, for tests.
func (d *Store) count(bucket []byte) int {
	n := 0
	_ = d.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucket).Stats().KeyN
		return nil
	})
	return n
}

// Features is what the on-disk store can do: keep records and the async
// queue across restarts, for the one process that holds the file.
func Features() dedup.Features { return dedup.Features{Queue: true, Durable: true} }

// Backend is d as the program uses it: its records and its queue.
func (d *Store) Backend() dedup.Backend {
	return dedup.Backend{Features: Features(), Store: d, Queue: d, Close: d.Close}
}
