package pgstore

import (
	"context"
	"runtime"
	"sync"
)

// Group commit. On PostgreSQL the cost of a small write is mostly the
// statement's, not its rows': the round trip, the backend's wake-up,
// parsing the parameters, starting the executor for each step of the
// statement, and the commit. So the writes of one kind that wait at the
// same time (enqueues, completions of deliveries) go in one statement
// over arrays: one round trip and one commit for all of them. They wait
// in one queue, and a committer takes all of them into one statement as
// soon as the one before it has committed and the goroutines ready to run
// have queued theirs (as DATA_DIR's group commit does): a write that finds
// the store idle is sent at once, and under load each statement holds
// every write that arrived during the one before it. Each caller is
// answered once the statement that holds its write has committed.

// A shared statement reads each of its rows by its primary key, and its
// plan must not depend on the statistics: a queue filled since its last
// ANALYZE (a saturating intake fills it within seconds; autovacuum
// analyzes once a minute at most) made the planner believe a few rows
// were left, and read every row instead (25,000 of them, 216 ms for 8
// completions). So beside the key, a shared statement's conditions on a
// row are wrapped in IS TRUE, which no index serves and no partial
// index's predicate is implied by, and a per-key probe (LATERAL) is fenced
// with LIMIT 1, which keeps it a probe rather than a join the planner may
// turn into a scan of the whole table.

// maxGroup bounds the writes of one statement: a longer one holds up the
// writes behind it, and its arrays' parameters grow with it.
const maxGroup = 256

// groupCall is a write waiting in a group.
type groupCall interface {
	// groupKey is the row the write changes: one statement changes each
	// row once (ON CONFLICT cannot change a row twice), the second write
	// of a row waits for the next statement.
	groupKey() string
	// context is the caller's: a write whose caller stopped waiting
	// before its statement was sent is left out.
	context() context.Context
}

// group is the queue of the writes waiting for a statement.
type group[C groupCall] struct {
	mu sync.Mutex
	// queue is the writes not yet taken into a statement.
	queue []C
	// running is set while a committer goroutine runs (commitAll): it
	// ends once the queue is empty, and a write that finds none running
	// starts one.
	running bool
}

// add queues c for the next statement, which commit runs.
func (g *group[C]) add(c C, commit func([]C)) {
	g.mu.Lock()
	g.queue = append(g.queue, c)
	start := !g.running
	g.running = true
	g.mu.Unlock()
	if start {
		go g.commitAll(commit)
	}
}

// commitAll runs the queued writes, up to maxGroup a statement, until
// none is left.
func (g *group[C]) commitAll(commit func([]C)) {
	for {
		// The goroutines ready to run go first, so that the writes they
		// are about to queue are in this statement: with one scheduler
		// slot (GOMAXPROCS=1, the proxy pinned to one CPU), a committer
		// that took the queue at once would send the one or two queued
		// since its last statement (see diskstore's commitQueued).
		runtime.Gosched()
		g.mu.Lock()
		calls := g.takeLocked()
		if len(calls) == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		commit(calls)
	}
}

// takeLocked takes the next statement's writes out of the queue: up to
// maxGroup, each row once, and none whose caller stopped waiting. g.mu
// must be held.
func (g *group[C]) takeLocked() []C {
	var calls, rest []C
	keys := make(map[string]bool, min(len(g.queue), maxGroup))
	for _, c := range g.queue {
		switch k := c.groupKey(); {
		case c.context().Err() != nil:
		case len(calls) < maxGroup && !keys[k]:
			keys[k] = true
			calls = append(calls, c)
		default:
			rest = append(rest, c)
		}
	}
	g.queue = rest
	return calls
}

// requeue puts calls back at the head of the queue, for the next
// statement.
func (g *group[C]) requeue(calls []C) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queue = append(calls, g.queue...)
}

// waiting is how many writes wait for a statement.
func (g *group[C]) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.queue)
}

// idle reports whether no committer runs.
func (g *group[C]) idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.running
}
