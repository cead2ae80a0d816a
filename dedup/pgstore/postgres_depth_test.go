package pgstore

import (
	"testing"
	"time"
)

// TestDepthViewDoubt: what the reckoning may have counted twice never
// makes this process alone refuse below the bound for a read's pause.
// Each shape is a change this process made while a read ran, which the
// read may have seen (its snapshot taken after the change) and the
// reckoning counts again; the refusal it makes stands only by it, so a
// read is due at once, however recent the last.
func TestDepthViewDoubt(t *testing.T) {
	for _, tc := range []struct {
		name string
		// during is what this process does while the read runs, after
		// one enqueue of its own was admitted before it began; waiting is
		// how many events then wait, all seen by the read.
		during  func(v *depthView)
		waiting int
	}{
		{"an enqueue answered while the read ran", func(v *depthView) { v.answered(true) }, 1},
		{"an enqueue still under way at the read's end", func(*depthView) {}, 1},
		{"a retry while the read ran", func(v *depthView) { v.answered(true); v.raise() }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bound := tc.waiting + 1
			now := time.Now()
			v := &depthView{}
			v.endRead(v.beginRead(now), 0, now)
			if ok, _ := v.admit(bound, now); !ok {
				t.Fatal("the first enqueue refused on an empty queue")
			}
			r := v.beginRead(now)
			tc.during(v)
			v.endRead(r, tc.waiting, now)
			v.mu.Lock()
			reckoned := v.reckoned()
			v.mu.Unlock()
			ok, stale := v.admit(bound, now)
			if ok {
				t.Fatalf("admitted at a reckoning of %d with the bound %d: the shape counts nothing twice", reckoned, bound)
			}
			if !stale || !v.due(bound, now) {
				t.Errorf("refused at a reckoning of %d (%d waiting, the bound %d) with no read due: this process alone refuses below the bound until the read's pause is over", reckoned, tc.waiting, bound)
			}
		})
	}
	t.Run("a Take begun before the read, leased after its snapshot", func(t *testing.T) {
		const bound = 2
		now := time.Now()
		v := &depthView{}
		v.endRead(v.beginRead(now), 0, now)
		for range bound {
			v.admit(bound, now)
			v.answered(true)
		}
		epoch := v.takeBegins()
		v.endRead(v.beginRead(now), bound, now) // saw both waiting
		v.took(epoch, 1)                        // one leased after the snapshot
		ok, stale := v.admit(bound, now)
		if ok {
			t.Fatal("admitted at the bound as reckoned")
		}
		if !stale {
			t.Error("refused with one of the two leased since the read, and no read due")
		}
	})
}
