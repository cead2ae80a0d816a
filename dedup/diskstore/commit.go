package diskstore

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Group commit. Every write transaction costs two fdatasyncs (bbolt syncs
// the pages it wrote, then the meta page that makes them the file's
// state), so concurrent writes share one. bbolt's own Batch does not suit
// this store: it closes a batch MaxBatchDelay after the batch's first
// call, whether or not the transaction before it has committed, so that
// under load the batches queue up behind the writer's lock each with the
// calls of one delay (a commit apiece), and on a quiet file each call
// waits out the delay for nothing. Here the writes wait in one queue, and
// a committer takes all of them into one transaction as soon as the one
// before it has committed and the goroutines ready to run have queued
// theirs: a write that finds the file idle commits at once, and under
// load each commit holds every write that arrived during the one before
// it, however long that took.

// maxGroup bounds the writes of one commit (bbolt's DefaultMaxBatchSize):
// a longer transaction holds up the writes behind it.
const maxGroup = 1000

// group is the queue of the writes waiting for a commit.
type group struct {
	mu sync.Mutex
	// queue is the writes not yet taken into a transaction.
	queue []*pending
	// running is set while a committer goroutine runs (commitQueued): it
	// ends once the queue is empty, and a write that finds none running
	// starts one.
	running bool
}

// pending is a write waiting for its commit.
type pending struct {
	fn func(tx *bolt.Tx) error
	// done gets the commit's outcome: nil once it is fsync'd, or the
	// error of the transaction, or errSolo.
	done chan error
}

// errSolo tells a write that its fn failed in a shared transaction (which
// was then committed without it): it runs again alone, for its own error.
var errSolo = errors.New("diskstore: run the write alone")

// commit queues fn for the next shared transaction and waits, for at most
// the store's timeout, for that transaction's commit.
func (d *Store) commit(fn func(tx *bolt.Tx) error) error {
	if d.timeout > 0 && d.stalled.Load() >= maxStalled {
		return ErrStalled
	}
	p := &pending{fn: fn, done: make(chan error, 1)}
	g := &d.group
	g.mu.Lock()
	g.queue = append(g.queue, p)
	start := !g.running
	g.running = true
	g.mu.Unlock()
	if start {
		go d.commitQueued()
	}
	err := d.await(d.timeout, p.done)
	if err == errSolo {
		return d.bounded(d.timeout, func() error { return d.update(fn) })
	}
	return err
}

// commitQueued commits the queued writes, up to maxGroup a transaction,
// until none is left.
func (d *Store) commitQueued() {
	g := &d.group
	for {
		// The goroutines ready to run go first, so that the writes they
		// are about to queue are in this commit. With one scheduler slot
		// (GOMAXPROCS=1, as on one CPU) this is what makes the commits
		// grow with the load: each fdatasync can hold the only slot for
		// its whole length (the runtime takes a slot back from a system
		// call only once the call outlasts two wake-ups of its monitor,
		// which sleeps up to 10 ms when idle), so the handlers get to run
		// only between commits, and a committer that took the queue at
		// once would commit the one or two writes queued during its last
		// commit, and flush twice for each. Measured in
		// docs/performance.md ("DATA_DIR's slow phases"). With no
		// goroutine ready it returns at once.
		runtime.Gosched()
		g.mu.Lock()
		n := min(len(g.queue), maxGroup)
		if n == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		calls := g.queue[:n:n]
		if n == len(g.queue) {
			g.queue = nil
		} else {
			g.queue = g.queue[n:]
		}
		g.mu.Unlock()
		d.commitGroup(calls)
	}
}

// commitGroup runs the fn of calls in one write transaction, and tells
// each the outcome once it has committed. A call whose fn fails is taken
// out, the others are run again in a new transaction, and it is told to
// run alone (errSolo), as bbolt's Batch does: its error is its own.
func (d *Store) commitGroup(calls []*pending) {
	for len(calls) > 0 {
		failed := -1
		start := time.Now()
		err := d.update(func(tx *bolt.Tx) error {
			for i, c := range calls {
				if err := safely(c.fn, tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed >= 0 {
			calls[failed].done <- errSolo
			calls = append(calls[:failed], calls[failed+1:]...)
			continue
		}
		if d.onCommit != nil {
			d.onCommit(len(calls), time.Since(start))
		}
		for _, c := range calls {
			c.done <- err
		}
		return
	}
}

// safely runs fn on tx, and turns its panic into an error: the panic is
// then the caller's, when its fn runs again alone.
func safely(fn func(tx *bolt.Tx) error, tx *bolt.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("diskstore: a write panicked: %v", p)
		}
	}()
	return fn(tx)
}
