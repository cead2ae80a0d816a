// Package intake shares a saturated machine between the webhooks being
// queued and the deliveries of those queued before: a Gate bounds the
// enqueues under way, and moves its bound with what delivery keeps of
// them.
//
// Both sides need the same CPU and the same store. With a fixed bound of as
// many enqueues at once as delivery attempts, delivery kept 0.58 of a
// saturating intake on DATA_DIR but 0.94 on Redis and 0.99 on PostgreSQL:
// the senders got what delivery left (docs/performance.md, "Intake and
// delivery share the machine"). The Gate widens while delivery keeps
// more than its share and the senders wait for a turn, and narrows back
// when it keeps less; it never goes below the fixed bound, so that a slow
// app (delivering little whatever the width) leaves the intake as it was.
package intake

import (
	"context"
	"sync/atomic"
	"time"
)

// The share delivery keeps of a saturating intake, measured per Window:
// above High the Gate widens, below Low it narrows. Between them it holds,
// so that the noise of a window does not move it. The floor asked for is
// half (issue 33: delivery keeps at least 0.50 of a saturating intake);
// Low sits above it so that a run's average stays above it too.
const (
	Low  = 0.55
	High = 0.70
)

// Window is how often the Gate looks at what delivery kept: long enough to
// count a few hundred events at the rates it matters at, short enough to
// follow a burst that lasts seconds.
const Window = 250 * time.Millisecond

// Gate bounds the enqueues under way to its width, which moves between
// its lowest and highest. The zero value is not usable: call New.
type Gate struct {
	lo, hi int
	// tokens holds one token per enqueue under way, and the ones
	// that the Gate holds itself (hi-width): its width is the capacity left.
	tokens chan struct{}
	// width is only written by Run, as each token changes hands, so that
	// it stays the capacity left even if Run stops halfway; read by Width.
	width atomic.Int64
	// What happened since Run last looked.
	entered, delivered, waited atomic.Uint64
}

// New returns a Gate of width lo that Run may widen up to hi (at least
// lo). lo must be positive.
func New(lo, hi int) *Gate {
	hi = max(lo, hi)
	g := &Gate{lo: lo, hi: hi, tokens: make(chan struct{}, hi)}
	for range hi - lo {
		g.tokens <- struct{}{}
	}
	g.width.Store(int64(lo))
	return g
}

// Enter waits for a turn, until ctx is done. Each Enter that returns nil
// is followed by one Leave.
func (g *Gate) Enter(ctx context.Context) error {
	select {
	case g.tokens <- struct{}{}:
	default:
		g.waited.Add(1)
		select {
		case g.tokens <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	g.entered.Add(1)
	return nil
}

// Leave ends a turn that Enter began.
func (g *Gate) Leave() { <-g.tokens }

// Delivered counts one delivery attempt ended, whatever its outcome: the
// work delivery did meanwhile.
func (g *Gate) Delivered() { g.delivered.Add(1) }

// Width is the enqueues at once the Gate lets through now.
func (g *Gate) Width() int { return int(g.width.Load()) }

// Run moves the width once per Window until ctx is done.
func (g *Gate) Run(ctx context.Context) {
	t := time.NewTicker(Window)
	defer t.Stop()
	g.run(ctx, t.C)
}

// run moves the width at each tick until ctx is done.
func (g *Gate) run(ctx context.Context, ticks <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		width := g.Width()
		next := g.next(width, g.entered.Swap(0), g.delivered.Swap(0), g.waited.Swap(0))
		for ; width < next; width++ {
			<-g.tokens // a token the Gate held: one more turn for the senders
		}
		g.width.Store(int64(width))
		for ; width > next; width-- {
			select {
			case g.tokens <- struct{}{}: // taken back once an enqueue leaves
			case <-ctx.Done():
				return
			}
			g.width.Store(int64(width - 1))
		}
	}
}

// next is the width after a window in which entered enqueues began,
// delivered attempts ended and waited enqueues found no turn at once.
func (g *Gate) next(width int, entered, delivered, waited uint64) int {
	if waited == 0 || entered == 0 {
		// The senders found a turn whenever they came: the width did
		// not bound the intake, so what delivery kept says nothing of it.
		return width
	}
	step := max(1, width/8)
	switch share := float64(delivered) / float64(entered); {
	case share > High:
		return min(g.hi, width+step)
	case share < Low:
		return max(g.lo, width-step)
	}
	return width
}
