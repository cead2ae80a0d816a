package proxy

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
)

// completing holds the events this process has answered 2xx and is still
// completing: the sender has the app's answer (see completeAfterAnswer),
// the store still has the in-flight claim. A copy of such an event that
// finds the claim waits here for the completion, then claims again and
// finds the completed record: within one process, a sender retrying the
// moment it has its 2xx is answered duplicate, as when the completion came
// first, and never forwarded (the claim is held throughout). A copy on
// another replica is answered in-flight for that round trip.
type completing struct {
	mu sync.Mutex
	// m maps a key to the lease completing it. Its zero value is ready:
	// add makes it.
	m map[string]completion
	// ended counts the completions over, so that a copy whose claim found
	// its event in flight can tell whether a completion here ended
	// between that claim and its look at m.
	ended atomic.Uint64
}

// completion is one event being completed: its lease, and a channel that
// a waiting copy made (nil until one waits), closed when it is done.
type completion struct {
	l    *Lease
	done chan struct{}
}

// add records that l's event was answered and is being completed.
func (c *completing) add(l *Lease) {
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string]completion)
	}
	c.m[l.Key()] = completion{l: l}
	c.mu.Unlock()
}

// remove records that l's completion is over, and wakes its waiters.
func (c *completing) remove(l *Lease) {
	c.mu.Lock()
	e, ok := c.m[l.Key()]
	if ok && e.l == l {
		delete(c.m, l.Key())
		c.ended.Add(1)
	}
	c.mu.Unlock()
	if ok && e.l == l && e.done != nil {
		close(e.done)
	}
}

// epoch is what wait compares with: read it before the claim.
func (c *completing) epoch() uint64 { return c.ended.Load() }

// wait waits until key's completion in this process, if there is one, is
// over, or ctx or abandon ends. It reports whether the event is worth
// claiming again: it waited for its completion, or a completion ended
// since epoch (perhaps key's, just after the claim that found it in
// flight).
func (c *completing) wait(ctx, abandon context.Context, key string, epoch uint64) bool {
	c.mu.Lock()
	e, ok := c.m[key]
	if ok && e.done == nil {
		e.done = make(chan struct{})
		c.m[key] = e
	}
	c.mu.Unlock()
	if !ok {
		return c.ended.Load() != epoch
	}
	select {
	case <-e.done:
	case <-ctx.Done():
	case <-abandon.Done():
	}
	return true
}

// completeAfterAnswer completes the lease of a webhook the app answered
// 2xx, once that answer is on its way to the sender: the completion's
// store round trip is then no part of the sender's wait. The claim is held
// until the record is completed, so a copy arriving meanwhile is never
// forwarded (see completing). The crash window is the one there always
// was between the app's answer and the record: a process that dies here
// leaves the claim to expire after its lease, and the sender's next retry
// is forwarded.
//
// The answer is flushed first; one without a Content-Length (chunked)
// still ends only when the handler returns, after the completion.
func (h *Handler) completeAfterAnswer(w http.ResponseWriter, f *forwarding, aborted bool) {
	if !aborted {
		flush(w)
	}
	_ = f.lease.Complete(&f.ctx, f.lease.answered) // its error is in the lease, for the log line
	h.completing.remove(f.lease)
}

// flush sends what w holds to the sender.
func flush(w http.ResponseWriter) {
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
		return
	}
	_ = http.NewResponseController(w).Flush()
}
