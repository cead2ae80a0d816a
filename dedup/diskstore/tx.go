package diskstore

import (
	"errors"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrStalled means the store's file did not answer within the store's
// timeout: its volume is frozen or stalled (a write blocks in the kernel
// for as long as it is).
var ErrStalled = errors.New("dedup: the store's file did not answer in time (is its volume frozen or stalled?)")

// maxStalled bounds the operations left waiting on a stalled volume: past
// it, each call fails at once rather than leave one more goroutine behind.
const maxStalled = 256

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
