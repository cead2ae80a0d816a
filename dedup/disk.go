package dedup

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// DiskFile is the name of the embedded store's file under its directory.
const DiskFile = "webhook-dedup.db"

// Disk is the embedded store on disk (DATA_DIR): the records of sync and
// async routes and the async queue in one bbolt file, for one replica that
// keeps them across restarts. Every write is committed to the file, and
// fsync'd, before the call returns; concurrent writes share one commit (and
// one fsync), so the accept path stays fast under load. It is safe for
// concurrent use, and the file is locked against a second process.
//
// The file holds five buckets, all keyed by the store key or by an 8-byte
// big-endian unix millisecond time followed by the store key (so that a
// cursor walks them in time order):
//
//	records  key → expiry (8 bytes, unix ms, 0: none) + the record
//	requests key → a queued event's request (encodeRequest)
//	due      time + key: queued events by when they are due, and events
//	         being delivered by when their lease runs out
//	dead     failure time + key: the dead letters
//	expiry   time + key: the records that expire, by when
//
// Expired records are invisible at once, deleted when their key is written
// again, and swept out in small transactions every sweep interval.
type Disk struct {
	db *bolt.DB
	// writes counts the write transactions under way: a write alone is
	// committed at once, one that arrives while others run joins a batch.
	writes atomic.Int64
	// unbatched commits every write on its own (one fsync each): only
	// for the benchmark that shows what batching saves.
	unbatched bool

	// stop ends the sweep of expired records; done waits for it.
	stop      context.CancelFunc
	done      sync.WaitGroup
	closeOnce sync.Once
}

var (
	bucketRecords  = []byte("records")
	bucketRequests = []byte("requests")
	bucketDue      = []byte("due")
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

// ErrDiskLocked means another process has the store's file open.
var ErrDiskLocked = errors.New("dedup: the store's file is in use by another process")

// OpenDisk opens (or creates) the store's file in dir, which must exist,
// and starts the sweep of expired records, which Close stops.
func OpenDisk(dir string) (*Disk, error) { return openDisk(dir, diskSweepInterval) }

func openDisk(dir string, sweepEvery time.Duration) (*Disk, error) {
	path := filepath.Join(dir, DiskFile)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: diskLockTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s (still locked after %s)", ErrDiskLocked, path, diskLockTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("dedup: open %s: %w", path, err)
	}
	// A batch runs as soon as the first write before it commits, or after
	// this delay: long enough to gather the writes of requests that arrive
	// together, short against an fsync.
	db.MaxBatchDelay = time.Millisecond
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketRecords, bucketRequests, bucketDue, bucketDead, bucketExpiry} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("dedup: open %s: %w", path, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	d := &Disk{db: db, stop: stop}
	d.done.Go(func() { every(ctx, sweepEvery, func() bool { _ = d.sweep(); return false }) })
	return d, nil
}

// Close stops the sweep and closes the file, releasing its lock.
func (d *Disk) Close() error {
	var err error
	d.closeOnce.Do(func() {
		d.stop()
		d.done.Wait()
		err = d.db.Close()
	})
	return err
}

// sweep deletes the expired records, diskSweepBatch per transaction.
func (d *Disk) sweep() error {
	for {
		n := 0
		err := d.write(func(tx *bolt.Tx) error {
			n = 0
			now := time.Now().UnixMilli()
			b := buckets(tx)
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
					b.deleteAll(key)
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

// write runs fn in a write transaction that is committed before it
// returns. fn may run more than once (a batch that fails is retried one by
// one), so it sets its results afresh each time.
func (d *Disk) write(fn func(tx *bolt.Tx) error) error {
	defer d.writes.Add(-1)
	if d.writes.Add(1) == 1 || d.unbatched {
		return d.db.Update(fn)
	}
	return d.db.Batch(fn)
}

// diskBuckets are the buckets of one transaction.
type diskBuckets struct {
	records, requests, due, dead, expiry *bolt.Bucket
}

func buckets(tx *bolt.Tx) diskBuckets {
	return diskBuckets{
		records:  tx.Bucket(bucketRecords),
		requests: tx.Bucket(bucketRequests),
		due:      tx.Bucket(bucketDue),
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
func (b diskBuckets) deleteAll(key []byte) {
	v := b.records.Get(key)
	if len(v) < 8 {
		return
	}
	if e := int64(binary.BigEndian.Uint64(v)); e != 0 {
		_ = b.expiry.Delete(timeKey(e, key))
	}
	if a, err := decodeAsync(v[8:]); err == nil {
		b.unindex(key, a)
	}
	_ = b.requests.Delete(key)
	_ = b.records.Delete(key)
}

// unindex removes a's entry from the due or dead index.
func (b diskBuckets) unindex(key []byte, a asyncRecord) {
	switch a.state {
	case Queued, Delivering:
		_ = b.due.Delete(timeKey(a.at, key))
	case Failed:
		_ = b.dead.Delete(timeKey(a.at, key))
	}
}

// index adds a's entry to the due or dead index.
func (b diskBuckets) index(key []byte, a asyncRecord) error {
	switch a.state {
	case Queued, Delivering:
		return b.due.Put(timeKey(a.at, key), nil)
	case Failed:
		return b.dead.Put(timeKey(a.at, key), nil)
	}
	return nil
}

// putAsync replaces key's async record old with a, moving its index entry.
func (b diskBuckets) putAsync(key []byte, old, a asyncRecord, expires int64) error {
	b.unindex(key, old)
	if err := b.index(key, a); err != nil {
		return err
	}
	return b.put(key, expires, encodeAsync(a))
}

// record is what callers see of s at now.
func (s stored) record(now int64) (Record, error) {
	var rec Record
	if len(s.value) > 0 && s.value[0] == tagAsync {
		a, err := decodeAsync(s.value)
		if err != nil {
			return Record{}, err
		}
		rec = a.record(now)
	} else {
		var err error
		if rec, err = decodeRecord(string(s.value)); err != nil {
			return Record{}, err
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
func (d *Disk) Claim(ctx context.Context, key string, lease time.Duration) (Claim, Record, error) {
	if err := checkClaim(ctx, key, lease); err != nil {
		return Claim{}, Record{}, err
	}
	tok := newToken()
	k := []byte(key)
	var (
		won bool
		rec Record
	)
	err := d.write(func(tx *bolt.Tx) error {
		b := buckets(tx)
		now := time.Now()
		if s, ok := b.get(k, now.UnixMilli()); ok {
			won = false
			var err error
			rec, err = s.record(now.UnixMilli())
			return err
		}
		won = true
		b.deleteAll(k) // an expired record
		return b.put(k, now.Add(lease).UnixMilli(), encodeInFlight(tok, now.UnixMilli()))
	})
	if err != nil {
		return Claim{}, Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	if !won {
		return Claim{}, rec, nil
	}
	return Claim{Key: key, Token: hex.EncodeToString(tok[:])}, Record{State: Absent}, nil
}

// ownsSync reports whether tok holds key's sync in-flight record.
func (b diskBuckets) ownsSync(key []byte, tok [tokenLen]byte, now int64) bool {
	s, ok := b.get(key, now)
	return ok && bytes.HasPrefix(s.value, ownerPrefix(tok)) && len(s.value) == inFlightLen
}

// Complete replaces c's in-flight record with a completed one holding res,
// kept for ttl. If c no longer owns its key it returns ErrNotOwner and
// changes nothing.
func (d *Disk) Complete(ctx context.Context, c Claim, res Result, ttl time.Duration) error {
	tok, err := checkComplete(ctx, c, res, ttl)
	if err != nil {
		return err
	}
	owned := false
	err = d.write(func(tx *bolt.Tx) error {
		b := buckets(tx)
		now := time.Now()
		owned = b.ownsSync([]byte(c.Key), tok, now.UnixMilli())
		if !owned {
			return nil
		}
		return b.put([]byte(c.Key), now.Add(ttl).UnixMilli(), encodeCompleted(res, now.Unix()))
	})
	if err == nil && !owned {
		err = ErrNotOwner
	}
	if err != nil {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, err)
	}
	return nil
}

// Release deletes c's in-flight record so the event can be claimed again.
// If c no longer owns its key it returns ErrNotOwner and changes nothing.
func (d *Disk) Release(ctx context.Context, c Claim) error {
	tok, err := checkOwned(ctx, "release", c.Key, c.Token)
	if err != nil {
		return err
	}
	owned := false
	err = d.write(func(tx *bolt.Tx) error {
		b := buckets(tx)
		owned = b.ownsSync([]byte(c.Key), tok, time.Now().UnixMilli())
		if owned {
			b.deleteAll([]byte(c.Key))
		}
		return nil
	})
	if err == nil && !owned {
		err = ErrNotOwner
	}
	if err != nil {
		return fmt.Errorf("dedup: release %s: %w", c.Key, err)
	}
	return nil
}

// Lookup returns the record for key, or ErrNotFound.
func (d *Disk) Lookup(ctx context.Context, key string) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	var rec Record
	err := d.db.View(func(tx *bolt.Tx) error {
		now := time.Now().UnixMilli()
		s, ok := buckets(tx).get([]byte(key), now)
		if !ok {
			return ErrNotFound
		}
		var err error
		rec, err = s.record(now)
		return err
	})
	if err != nil {
		return Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	return rec, nil
}

// Forget deletes the record for key, whatever its state, with its queued
// request if it has one, and reports whether there was one.
func (d *Disk) Forget(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	had := false
	err := d.write(func(tx *bolt.Tx) error {
		b := buckets(tx)
		_, had = b.get([]byte(key), time.Now().UnixMilli())
		b.deleteAll([]byte(key))
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	return had, nil
}

// Ping checks that the file can be read.
func (d *Disk) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	if err := d.db.View(func(*bolt.Tx) error { return nil }); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	return nil
}

// Enqueue claims key and stores req for delivery in one transaction,
// committed to the file before it returns. If the key was free it returns
// true; otherwise false and the record that holds the key.
func (d *Disk) Enqueue(ctx context.Context, key string, req Request) (bool, Record, error) {
	if err := ctx.Err(); err != nil {
		return false, Record{}, fmt.Errorf("dedup: enqueue %s: %w", key, err)
	}
	payload := encodeRequest(req)
	var (
		won bool
		rec Record
	)
	err := d.write(func(tx *bolt.Tx) error {
		b := buckets(tx)
		now := time.Now().UnixMilli()
		k := []byte(key)
		if s, ok := b.get(k, now); ok {
			won = false
			var err error
			rec, err = s.record(now)
			return err
		}
		won = true
		b.deleteAll(k) // an expired record
		a := asyncRecord{state: Queued, accepted: now, at: now}
		if err := b.requests.Put(k, payload); err != nil {
			return err
		}
		return b.putAsync(k, asyncRecord{}, a, 0)
	})
	if err != nil {
		return false, Record{}, fmt.Errorf("dedup: enqueue %s: %w", key, err)
	}
	return won, rec, nil
}

// Take hands out at most n due deliveries, each leased for lease.
func (d *Disk) Take(ctx context.Context, n int, lease time.Duration) ([]Delivery, error) {
	if take, err := checkTake(ctx, n, lease); !take {
		return nil, err
	}
	// Workers poll: an empty poll reads, and commits nothing.
	var due bool
	err := d.db.View(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(bucketDue).Cursor().First()
		due = k != nil && int64(binary.BigEndian.Uint64(k)) <= time.Now().UnixMilli()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dedup: take: %w", err)
	}
	if !due {
		return nil, nil
	}
	var out []Delivery
	err = d.write(func(tx *bolt.Tx) error {
		out = out[:0]
		b := buckets(tx)
		now := time.Now()
		ms := now.UnixMilli()
		var keys [][]byte
		c := b.due.Cursor()
		for k, _ := c.First(); k != nil && len(keys) < n; k, _ = c.Next() {
			if int64(binary.BigEndian.Uint64(k)) > ms {
				break
			}
			keys = append(keys, bytes.Clone(k))
		}
		for _, idx := range keys {
			key := idx[8:]
			s, ok := b.get(key, ms)
			a, err := decodeAsync(s.value)
			if !ok || err != nil || (a.state != Queued && a.state != Delivering) {
				// An entry its record no longer points to: drop it
				// rather than stall the queue on it.
				_ = b.due.Delete(idx)
				continue
			}
			req, err := decodeRequest(b.requests.Get(key))
			if err != nil {
				// Never deliverable: dead-letter it rather than stall
				// every Take on it.
				failed := a
				failed.state, failed.at, failed.lastStatus = Failed, ms, 0
				failed.lastError = "the stored request cannot be read: " + err.Error()
				if err := b.putAsync(key, a, failed, now.Add(unreadableKeep).UnixMilli()); err != nil {
					return err
				}
				continue
			}
			next := a
			next.state = Delivering
			next.token = newToken()
			next.attempts++
			next.at = now.Add(lease).UnixMilli()
			if err := b.putAsync(key, a, next, 0); err != nil {
				return err
			}
			out = append(out, Delivery{
				Claim:      Claim{Key: string(key), Token: hex.EncodeToString(next.token[:])},
				Request:    req,
				Attempt:    next.attempts,
				AcceptedAt: time.UnixMilli(a.accepted),
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dedup: take: %w", err)
	}
	return out, nil
}

// settle ends dl's attempt, if dl still holds its event: the record drops
// dl's token and keeps the attempt's status and reason, and change sets
// the rest of its next state and returns its expiry.
func (d *Disk) settle(ctx context.Context, op string, dl Delivery, status int, reason string, change func(next *asyncRecord, now time.Time) (expires int64)) error {
	if err := checkResult(Result{Status: status}); err != nil {
		return fmt.Errorf("dedup: %s %s: %w", op, dl.Claim.Key, err)
	}
	tok, err := checkOwned(ctx, op, dl.Claim.Key, dl.Claim.Token)
	if err != nil {
		return err
	}
	err = d.write(func(tx *bolt.Tx) error {
		b := buckets(tx)
		now := time.Now()
		key := []byte(dl.Claim.Key)
		s, ok := b.get(key, now.UnixMilli())
		if !ok {
			return ErrNotOwner
		}
		a, err := decodeAsync(s.value)
		if err != nil || a.state != Delivering || a.token != tok {
			return ErrNotOwner
		}
		next := a
		next.token = [tokenLen]byte{}
		next.lastStatus, next.lastError = status, reason
		expires := change(&next, now)
		if next.state == Completed {
			_ = b.requests.Delete(key)
		}
		return b.putAsync(key, a, next, expires)
	})
	if err != nil {
		return fmt.Errorf("dedup: %s %s: %w", op, dl.Claim.Key, err)
	}
	return nil
}

// Succeed completes dl's event with res, kept for ttl, and drops its request.
func (d *Disk) Succeed(ctx context.Context, dl Delivery, res Result, ttl time.Duration) error {
	if err := checkDuration("ttl", ttl); err != nil {
		return fmt.Errorf("dedup: succeed %s: %w", dl.Claim.Key, err)
	}
	return d.settle(ctx, "succeed", dl, res.Status, "", func(a *asyncRecord, now time.Time) int64 {
		a.state, a.at = Completed, 0
		a.result, a.completed = res, now.Unix()
		return now.Add(ttl).UnixMilli()
	})
}

// Retry gives dl back to the queue, due again at next.
func (d *Disk) Retry(ctx context.Context, dl Delivery, next time.Time, status int, reason string) error {
	return d.settle(ctx, "retry", dl, status, reason, func(a *asyncRecord, _ time.Time) int64 {
		a.state, a.at = Queued, next.UnixMilli()
		return 0
	})
}

// Fail dead-letters dl's event, kept with its request for keep.
func (d *Disk) Fail(ctx context.Context, dl Delivery, status int, reason string, keep time.Duration) error {
	if err := checkDuration("keep", keep); err != nil {
		return fmt.Errorf("dedup: fail %s: %w", dl.Claim.Key, err)
	}
	return d.settle(ctx, "fail", dl, status, reason, func(a *asyncRecord, now time.Time) int64 {
		a.state, a.at = Failed, now.UnixMilli()
		return now.Add(keep).UnixMilli()
	})
}

// Requeue puts a dead-lettered event back in the queue as a new first
// attempt, accepted now (so RETRY_MAX_AGE counts afresh).
func (d *Disk) Requeue(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: requeue %s: %w", key, err)
	}
	err := d.write(func(tx *bolt.Tx) error {
		b := buckets(tx)
		now := time.Now().UnixMilli()
		k := []byte(key)
		s, ok := b.get(k, now)
		if !ok {
			return ErrNotFound
		}
		a, err := decodeAsync(s.value)
		if err != nil || a.state != Failed {
			return ErrNotFailed
		}
		next := asyncRecord{state: Queued, accepted: now, at: now}
		return b.putAsync(k, a, next, 0)
	})
	if err != nil {
		return fmt.Errorf("dedup: requeue %s: %w", key, err)
	}
	return nil
}

// DeadLetters lists up to limit failed events, oldest failure first, from
// cursor (empty: the first page), and the cursor of the next page.
func (d *Disk) DeadLetters(ctx context.Context, cursor string, limit int) ([]DeadLetter, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", fmt.Errorf("dedup: dead letters: %w", err)
	}
	if limit <= 0 {
		return nil, "", fmt.Errorf("dedup: dead letters: limit %d is not positive", limit)
	}
	after, err := hex.DecodeString(cursor)
	if err != nil || (cursor != "" && len(after) < 8) {
		return nil, "", fmt.Errorf("dedup: dead letters: bad cursor %q", cursor)
	}
	var (
		out  []DeadLetter
		next string
	)
	err = d.db.View(func(tx *bolt.Tx) error {
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
			a, err := decodeAsync(s.value)
			if err != nil {
				return err
			}
			out = append(out, DeadLetter{
				Key:        string(k[8:]),
				Attempts:   a.attempts,
				LastStatus: a.lastStatus,
				LastError:  a.lastError,
				FailedAt:   time.UnixMilli(a.at),
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
// of dead letters, reading the whole queue: fine for the one replica the
// embedded store serves.
func (d *Disk) Stats(ctx context.Context) (QueueStats, error) {
	if err := ctx.Err(); err != nil {
		return QueueStats{}, fmt.Errorf("dedup: stats: %w", err)
	}
	var st QueueStats
	err := d.db.View(func(tx *bolt.Tx) error {
		b := buckets(tx)
		now := time.Now().UnixMilli()
		oldest := int64(0)
		c := b.due.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			s, ok := b.get(k[8:], now)
			if !ok {
				continue
			}
			a, err := decodeAsync(s.value)
			if err != nil {
				return err
			}
			if oldest == 0 || a.accepted < oldest {
				oldest = a.accepted
			}
			if a.state != Delivering || a.at <= now { // not held, its lease running
				st.Depth++
			}
		}
		if oldest != 0 {
			st.OldestAge = max(0, time.Duration(now-oldest)*time.Millisecond)
		}
		c = b.dead.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if _, ok := b.get(k[8:], now); ok {
				st.DeadLetters++
			}
		}
		return nil
	})
	if err != nil {
		return QueueStats{}, fmt.Errorf("dedup: stats: %w", err)
	}
	return st, nil
}

// An async event's record on disk, one binary value (integers big-endian):
//
//	[0]      tag 0x10
//	[1]      state (Queued, Delivering, Failed or Completed)
//	[2:18]   the delivery's claim token (Delivering), else zero
//	[18:26]  accepted at, unix ms
//	[26:34]  at, unix ms: when it is due (Queued), when its lease runs
//	         out (Delivering), when it failed (Failed); 0 when Completed
//	[34:36]  the app's last status, uint16
//	         uvarint attempts, then the last error (uvarint length, text)
//	         Completed only: the completed record (encodeCompleted) to the end
const (
	// tagAsync follows the sync records' tags (encoding.go), leaving
	// room for more of them.
	tagAsync      = 0x10
	asyncFixedLen = 36
)

type asyncRecord struct {
	state      State
	token      [tokenLen]byte
	accepted   int64
	at         int64
	lastStatus int
	attempts   int
	lastError  string
	// result and completed (unix seconds, as a sync completion's) are the
	// outcome of a completed event.
	result    Result
	completed int64
}

func encodeAsync(a asyncRecord) []byte {
	b := make([]byte, 0, asyncFixedLen+2*binary.MaxVarintLen32+len(a.lastError))
	b = append(b, tagAsync, byte(a.state))
	b = append(b, a.token[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(a.accepted))
	b = binary.BigEndian.AppendUint64(b, uint64(a.at))
	b = binary.BigEndian.AppendUint16(b, uint16(a.lastStatus))
	b = binary.AppendUvarint(b, uint64(a.attempts))
	b = appendString(b, a.lastError)
	if a.state == Completed {
		b = append(b, encodeCompleted(a.result, a.completed)...)
	}
	return b
}

func decodeAsync(v []byte) (asyncRecord, error) {
	if len(v) < asyncFixedLen || v[0] != tagAsync {
		return asyncRecord{}, fmt.Errorf("%w: not an async record", errBadRecord)
	}
	a := asyncRecord{
		state:      State(v[1]),
		token:      [tokenLen]byte(v[2:18]),
		accepted:   int64(binary.BigEndian.Uint64(v[18:26])),
		at:         int64(binary.BigEndian.Uint64(v[26:34])),
		lastStatus: int(binary.BigEndian.Uint16(v[34:36])),
	}
	dec := decoder{rest: v[asyncFixedLen:]}
	a.attempts = int(dec.uvarint())
	a.lastError = dec.string()
	if dec.err != nil {
		return asyncRecord{}, fmt.Errorf("%w: %w", errBadRecord, dec.err)
	}
	switch a.state {
	case Queued, Delivering, Failed:
		if len(dec.rest) != 0 {
			return asyncRecord{}, fmt.Errorf("%w: trailing bytes", errBadRecord)
		}
	case Completed:
		rec, err := decodeRecord(string(dec.rest))
		if err != nil || rec.State != Completed {
			return asyncRecord{}, fmt.Errorf("%w: completed async record without its result", errBadRecord)
		}
		a.result, a.completed = rec.Result, rec.Since.Unix()
		// This file only ever holds encodeCompleted's 4-byte seconds; a
		// time beyond them is an earlier format or damage, not a record.
		if a.completed < 0 || a.completed > math.MaxUint32 {
			return asyncRecord{}, fmt.Errorf("%w: completion time %d out of range", errBadRecord, a.completed)
		}
	default:
		return asyncRecord{}, fmt.Errorf("%w: async state %d", errBadRecord, a.state)
	}
	return a, nil
}

// record is what callers see of a at now (TTL is the caller's). A delivery
// whose lease ran out is queued again: due since its lease ended.
func (a asyncRecord) record(now int64) Record {
	rec := Record{State: a.state, Since: time.UnixMilli(a.accepted)}
	rec.Delivery = DeliveryStatus{Attempts: a.attempts, LastStatus: a.lastStatus, LastError: a.lastError}
	switch a.state {
	case Queued:
		rec.Delivery.NextAttemptAt = time.UnixMilli(a.at)
	case Delivering:
		if a.at <= now {
			rec.State = Queued
			rec.Delivery.NextAttemptAt = time.UnixMilli(a.at)
		}
	case Failed:
		rec.Since = time.UnixMilli(a.at)
	case Completed:
		rec.Since = time.Unix(a.completed, 0)
		rec.Result = a.result
	}
	return rec
}

// count is the number of keys in bucket, for tests.
func (d *Disk) count(bucket []byte) int {
	n := 0
	_ = d.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucket).Stats().KeyN
		return nil
	})
	return n
}
