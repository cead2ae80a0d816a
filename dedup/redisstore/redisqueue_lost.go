package redisstore

import (
	"encoding/hex"
	"slices"
	"strings"
	"sync"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
)

// maxLostTokens bounds the tokens lostTakes keeps: through a long outage
// every poll's Take fails, and those past this many are not kept (nor
// fenced): what they lease, if they run, waits out its lease. The first
// ones are kept, those most likely to have been sent before Redis froze.
const maxLostTokens = 1024

// takeCall is what one run of queue_take.lua is given to tell it apart:
// a random take ID, and a fresh token per delivery it may lease.
type takeCall struct {
	id     string
	tokens []string
}

// newTakeCall draws the take ID and the n tokens of a Take.
func newTakeCall(n int) takeCall {
	id := codec.NewToken()
	c := takeCall{id: hex.EncodeToString(id[:]), tokens: make([]string, n)}
	for i := range c.tokens {
		tok := codec.NewToken()
		c.tokens[i] = hex.EncodeToString(tok[:])
	}
	return c
}

// lostTakes keeps this process's Takes whose answer was lost, until the
// next Take of their lane resolves them: the script may have run (Redis
// stalled with the command in its socket, then ran it once it woke), or
// may yet run (several Takes queue up on different connections during a
// stall, and Redis runs them in any order once it wakes), and lease
// deliveries under tokens no worker holds. The next Take of the same lane
// passes their take IDs and tokens, and its script, in one step, fences
// each take ID (a lost Take that runs after that leases nothing) and
// hands out again what one that did run leased and still holds, found
// under its tokens in this consumer's pending list, with the same token
// and attempt number (no attempt counted twice) and a fresh lease; what
// it has no room for goes back to the queue (queue_take.lua). Once that
// Take has answered, nothing more can come of them, and they are
// forgotten. They are not dropped when their lease would have ended: a
// lost Take's leases run from when Redis runs it, which may be long after
// it was sent (a freeze longer than the lease), and until it is fenced it
// may run yet.
type lostTakes struct {
	mu    sync.Mutex
	takes []lostTake
	n     int // tokens in takes
}

// lostTake is one Take whose answer was lost.
type lostTake struct {
	lane string // laneID of its lane
	takeCall
}

// laneID tells lanes apart: the route, or the routes the rest lane leaves
// out, in any order.
func laneID(lane dedup.Lane) string {
	if !lane.Rest {
		return "route\x00" + lane.Route
	}
	except := slices.Clone(lane.Except)
	slices.Sort(except)
	return "rest\x00" + strings.Join(except, "\x00")
}

// add remembers a lost Take of lane.
func (l *lostTakes) add(lane string, call takeCall) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n+len(call.tokens) > maxLostTokens {
		return
	}
	l.takes = append(l.takes, lostTake{lane: lane, takeCall: call})
	l.n += len(call.tokens)
}

// claim takes out the lost Takes of lane, for one Take alone: two Takes
// passing the same token would both hand its delivery out. A Take that
// fails gives them back with restore: its script may not have run.
func (l *lostTakes) claim(lane string) []lostTake {
	l.mu.Lock()
	defer l.mu.Unlock()
	var claimed []lostTake
	kept := l.takes[:0]
	for _, lt := range l.takes {
		if lt.lane == lane {
			claimed = append(claimed, lt)
			l.n -= len(lt.tokens)
		} else {
			kept = append(kept, lt)
		}
	}
	clear(l.takes[len(kept):])
	l.takes = kept
	return claimed
}

// restore gives back what a Take that failed claimed: whether or not its
// script ran, passing them again to the next Take is exact (a fence set
// twice is one fence, and what the first run handed out again is still
// leased under the same tokens).
func (l *lostTakes) restore(claimed []lostTake) {
	if len(claimed) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, lt := range claimed {
		l.takes = append(l.takes, lt)
		l.n += len(lt.tokens)
	}
}
