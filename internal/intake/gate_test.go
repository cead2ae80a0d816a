package intake

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/timing"
)

// TestGateNext: the width moves only in a window where senders waited,
// toward more turns while delivery kept more than High of the enqueues and
// fewer while it kept less than Low, by an eighth at least one, within
// [lo, hi].
func TestGateNext(t *testing.T) {
	g := New(16, 64)
	for _, c := range []struct {
		name                       string
		width                      int
		entered, delivered, waited uint64
		want                       int
	}{
		{"no sender waited: the width bound nothing", 16, 1000, 1000, 0, 16},
		{"nothing entered", 20, 0, 500, 3, 20},
		{"delivery kept more than its share: widen", 16, 1000, 900, 5, 18},
		{"delivery kept its share: hold", 24, 1000, 600, 5, 24},
		{"delivery kept less: narrow", 24, 1000, 300, 5, 21},
		{"never wider than hi", 63, 1000, 1000, 5, 64},
		{"never narrower than lo (a slow app)", 17, 1000, 0, 5, 16},
		{"at lo, a small step", 16, 1000, 0, 5, 16},
	} {
		if got := g.next(c.width, c.entered, c.delivered, c.waited); got != c.want {
			t.Errorf("%s: next(%d, entered %d, delivered %d, waited %d) = %d, want %d", c.name, c.width, c.entered, c.delivered, c.waited, got, c.want)
		}
	}
	if got := New(1, 4).next(1, 100, 100, 1); got != 2 {
		t.Errorf("width 1: widened to %d, want 2 (a step of at least one)", got)
	}
}

// TestGateWidensAndNarrows: Enter lets width turns through at once and
// holds the next until a Leave or its context's end; run widens the Gate
// after a window where senders waited and delivery kept up, and narrows it
// back to lo after one where delivery fell behind, once a turn under way
// has left.
func TestGateWidensAndNarrows(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := New(2, 3)
	ticks := make(chan time.Time)
	go g.run(ctx, ticks)
	held := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if err := g.Enter(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: %v, want it held until its context ended", what, err)
		}
	}
	widthBecomes := func(want int) {
		t.Helper()
		deadline := time.Now().Add(timing.LoadMargin)
		for g.Width() != want {
			if time.Now().After(deadline) {
				t.Fatalf("width %d, want %d", g.Width(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for i := range 2 {
		if err := g.Enter(ctx); err != nil {
			t.Fatalf("turn %d of width 2: %v", i+1, err)
		}
	}
	held("a third turn at width 2")
	// Delivery kept all of a saturated intake: one more turn.
	for range 10 {
		g.Delivered()
	}
	ticks <- time.Now()
	widthBecomes(3)
	if err := g.Enter(ctx); err != nil {
		t.Fatalf("a third turn at width 3: %v", err)
	}
	held("a fourth turn at width 3")
	// Delivery kept nothing of it: back to 2, once a turn has left.
	ticks <- time.Now()
	if g.Width() != 3 {
		t.Fatalf("width %d with three turns under way, want 3 until one leaves", g.Width())
	}
	g.Leave()
	widthBecomes(2)
	held("a turn at width 2 with two under way")
	g.Leave()
	if err := g.Enter(ctx); err != nil {
		t.Fatalf("a turn after a Leave at width 2: %v", err)
	}
}
