package diskstore

import (
	"container/heap"
	"math"
	"sync"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
)

// queueCounts is what Stats reports, kept in memory so that a /metrics
// scrape costs the same whatever the backlog (walking the queue cost
// 24–81 ms with 20,000 events queued). One process holds the file (its
// lock), so the counts are computed from the file once, as it is opened,
// and then changed only by the commits that change what they count
// (tally). It is safe for concurrent use.
type queueCounts struct {
	mu sync.Mutex
	// queued and delivering count the records in each state; a
	// delivering one whose lease ran out counts as queued again
	// (leases), as Lookup shows it.
	queued, delivering int
	// accepted holds when each queued or delivering event was accepted:
	// its earliest is OldestAge's.
	accepted moments
	// leases holds when the delivering events' leases run out.
	leases deadlines
	// dead holds when the dead letters expire: one past its expiry is
	// gone for Lookup and DeadLetters before the sweep deletes it.
	dead deadlines
	// routes are queued, delivering and leases again, by route, for
	// Stats' Routes.
	routes map[string]*routeCounts
}

// routeCounts are one route's share of queueCounts' queued, delivering
// and leases.
type routeCounts struct {
	queued, delivering int
	leases             deadlines
}

// depthAt is the route's depth at now (unix ms).
func (r *routeCounts) depthAt(now int64) int {
	return r.queued + r.delivering - r.leases.ahead(now)
}

// stats is the counts as Stats reports them at now.
func (c *queueCounts) stats(now time.Time) dedup.QueueStats {
	ms := now.UnixMilli()
	c.mu.Lock()
	defer c.mu.Unlock()
	// max(0, …): a guard; the tallies are applied in commit order
	// (Store.update).
	st := dedup.QueueStats{
		Depth:       max(0, c.depthAt(ms)),
		DeadLetters: max(0, c.dead.ahead(ms)),
	}
	if t, ok := c.accepted.earliest(); ok {
		st.OldestAge = max(0, time.Duration(ms-t)*time.Millisecond)
	}
	for route, r := range c.routes {
		if n := r.depthAt(ms); n > 0 {
			if st.Routes == nil {
				st.Routes = map[string]int{}
			}
			st.Routes[route] = n
		}
	}
	return st
}

// depth is Stats' Depth at now (unix ms): the events waiting for
// delivery, as of the last transaction committed.
func (c *queueCounts) depth(now int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.depthAt(now)
}

// depthAt is depth; c.mu must be held.
func (c *queueCounts) depthAt(now int64) int {
	return c.queued + c.delivering - c.leases.ahead(now)
}

// count adds ch to the counts. c.mu must be held.
func (c *queueCounts) count(ch change) {
	switch ch.state {
	case dedup.Queued:
		c.queued += ch.k
		c.accepted.add(ch.accepted, ch.k)
		c.route(ch.route).queued += ch.k
	case dedup.Delivering:
		c.delivering += ch.k
		c.accepted.add(ch.accepted, ch.k)
		c.leases.add(ch.at, ch.k)
		r := c.route(ch.route)
		r.delivering += ch.k
		r.leases.add(ch.at, ch.k)
	case dedup.Failed:
		c.dead.add(ch.expires, ch.k)
	}
}

// route is route's counts, made on first use. c.mu must be held. A
// route's counts stay once made: there are as many as routes ever
// configured.
func (c *queueCounts) route(route string) *routeCounts {
	r := c.routes[route]
	if r == nil {
		if c.routes == nil {
			c.routes = map[string]*routeCounts{}
		}
		r = &routeCounts{}
		c.routes[route] = r
	}
	return r
}

// apply adds the changes of a committed transaction to the counts.
func (c *queueCounts) apply(t *tally, now time.Time) {
	if len(t.changes) == 0 {
		return // a sync record's write: not the queue's
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Drop what has passed first, also when no Stats is called, so that
	// the deadlines do not pile up; what the tally adds that has already
	// passed, they ignore.
	ms := now.UnixMilli()
	c.leases.ahead(ms)
	c.dead.ahead(ms)
	for _, r := range c.routes {
		r.leases.ahead(ms)
	}
	for _, ch := range t.changes {
		c.count(ch)
	}
}

// tally collects the records one write transaction adds to or removes
// from the counts, applied once the transaction commits (tx.OnCommit): a
// group commit runs its writes again when one of them fails, and only
// the run that commits counts. Every write of a transaction shares its
// tally (Store.txTally), so each sees what those before it changed. Its
// methods do nothing on a nil tally (the transaction that opens the
// file: its counts are read from the file after it).
type tally struct {
	changes []change
	// waiting is what the changes add to the depth (queueCounts.depth):
	// a queued record, or a delivering one whose lease has run out.
	waiting int
}

// change is one record added to (k = 1) or removed from (k = -1) the
// counts: its state, its route and the times that count.
type change struct {
	state                 dedup.State
	route                 string
	accepted, at, expires int64 // unix ms; expires: math.MaxInt64 for never
	k                     int
}

// changeOf is a, of route, which expires at expires (unix ms, 0: never),
// added (k = 1) or removed (k = -1).
func changeOf(a codec.Async, route string, expires int64, k int) change {
	if expires == 0 {
		expires = math.MaxInt64
	}
	return change{state: a.State, route: route, accepted: a.Accepted, at: a.At, expires: expires, k: k}
}

// note records that the transaction adds (k = 1) or removes (k = -1) a,
// of route, which expires at expires (unix ms, 0: never).
func (t *tally) note(a codec.Async, route string, expires int64, k int) {
	if t == nil {
		return
	}
	t.changes = append(t.changes, changeOf(a, route, expires, k))
	if a.State == dedup.Queued || (a.State == dedup.Delivering && a.At <= time.Now().UnixMilli()) {
		t.waiting += k
	}
}

// moments is a multiset of unix ms times whose earliest is at hand. Each
// time is held once, with how many of it there are; a time whose count
// falls to zero stays until it comes first (or until those at zero are
// the most, and the heap is rebuilt), so that a record leaving and coming
// back at the same time (Take, Retry) costs no heap operation.
type moments struct {
	n     map[int64]int // how many of each time, zero for some
	order timeHeap      // the times in n, earliest first
	zeros int           // the times in n at zero
	total int           // the sum of n
}

func (m *moments) add(t int64, k int) {
	if m.n == nil {
		m.n = map[int64]int{}
	}
	c, had := m.n[t]
	switch {
	case !had:
		heap.Push(&m.order, t)
	case c == 0:
		m.zeros--
	}
	m.n[t] = c + k
	m.total += k
	if c+k == 0 {
		m.zeros++
		m.compact()
	}
}

// earliest is the earliest time held, dropping the ones at zero before it.
func (m *moments) earliest() (int64, bool) {
	for len(m.order) > 0 {
		if t := m.order[0]; m.n[t] != 0 {
			return t, true
		}
		m.pop()
	}
	return 0, false
}

// dropThrough removes every time up to t.
func (m *moments) dropThrough(t int64) {
	for len(m.order) > 0 && m.order[0] <= t {
		m.pop()
	}
}

// pop removes the earliest time, however many of it there are.
func (m *moments) pop() {
	t := heap.Pop(&m.order).(int64)
	c := m.n[t]
	if c == 0 {
		m.zeros--
	}
	m.total -= c
	delete(m.n, t)
}

// compact rebuilds the heap without the times at zero once they are most
// of it, so that it stays the size of what it holds.
func (m *moments) compact() {
	if m.zeros < 64 || 2*m.zeros < len(m.order) {
		return
	}
	kept := m.order[:0]
	for _, t := range m.order {
		if m.n[t] != 0 {
			kept = append(kept, t)
		} else {
			delete(m.n, t)
		}
	}
	m.order, m.zeros = kept, 0
	heap.Init(&m.order)
}

// deadlines counts the times still ahead of now (a lease's end, a dead
// letter's expiry), as now moves on: each time is dropped once it has
// passed, and one added or removed after it passed changes nothing (it
// no longer counts either way), so that the order in which changes
// arrive does not matter.
type deadlines struct {
	m      moments
	passed int64 // every time up to it is dropped
}

func (d *deadlines) add(t int64, k int) {
	if t > d.passed {
		d.m.add(t, k)
	}
}

// ahead is how many times are after now.
func (d *deadlines) ahead(now int64) int {
	if now > d.passed {
		d.passed = now
		d.m.dropThrough(now)
	}
	return d.m.total
}

// timeHeap is a min-heap of unix ms times (container/heap).
type timeHeap []int64

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *timeHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}
