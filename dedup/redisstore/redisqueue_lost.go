package redisstore

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// maxLostTokens bounds the tokens lostTakes keeps: through a long outage
// every poll's Take fails, and those past this many are left to their
// lease, as they all were before.
const maxLostTokens = 1024

// lostTakes keeps the tokens of this process's Takes whose answer was
// lost, until their lease ends: the script may have run (Redis stalled
// with the command in its socket, then ran it once it woke) and leased
// deliveries under tokens no worker holds. Each Take of the same lane
// passes them, and the script hands out again those it finds leased to
// this consumer under one of them, with the same token and attempt number
// (no attempt counted twice), and a fresh lease. Once a token's lease has
// ended, XAUTOCLAIM hands its delivery out anyway, as a new attempt.
type lostTakes struct {
	mu    sync.Mutex
	takes []lostTake
	n     int // tokens in takes
}

// lostTake is one Take whose answer was lost.
type lostTake struct {
	lane   string // laneID of its lane
	tokens []string
	until  time.Time // when its leases end
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
func (l *lostTakes) add(lane string, tokens []string, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n+len(tokens) > maxLostTokens {
		return
	}
	l.takes = append(l.takes, lostTake{lane: lane, tokens: tokens, until: until})
	l.n += len(tokens)
}

// claim takes out the lost Takes of lane whose leases have not ended, for
// one Take alone: two Takes passing the same token would both hand its
// delivery out. The Take gives back with keep what it did not resolve.
func (l *lostTakes) claim(lane string, now time.Time) []lostTake {
	l.mu.Lock()
	defer l.mu.Unlock()
	var claimed []lostTake
	kept := l.takes[:0]
	for _, lt := range l.takes {
		switch {
		case !lt.until.After(now):
			l.n -= len(lt.tokens) // its deliveries go by takeover now
		case lt.lane == lane:
			claimed = append(claimed, lt)
			l.n -= len(lt.tokens)
		default:
			kept = append(kept, lt)
		}
	}
	clear(l.takes[len(kept):])
	l.takes = kept
	return claimed
}

// keep gives back what a Take that passed claimed did not resolve, given
// what it handed out (out, nil if it failed) and whether its search
// could have stopped short (full: it handed out all it was asked). Once
// one token of a lost Take is found, that Take has run, and a search that
// did not stop short found every delivery it leased that is still to
// hand out: the rest of its tokens either leased nothing or lost their
// delivery since. Until then it may yet run (queued behind a stall), so
// its tokens are kept.
func (l *lostTakes) keep(claimed []lostTake, out []dedup.Delivery, full bool) {
	if len(claimed) == 0 {
		return
	}
	handed := make(map[string]bool, len(out))
	for _, d := range out {
		handed[d.Claim.Token] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, lt := range claimed {
		left := slices.DeleteFunc(lt.tokens, func(tok string) bool { return handed[tok] })
		if len(left) == 0 || (len(left) < len(lt.tokens) && !full) {
			continue
		}
		lt.tokens = left
		l.takes = append(l.takes, lt)
		l.n += len(left)
	}
}

// tokens are every token of takes.
func tokens(takes []lostTake) []string {
	var all []string
	for _, lt := range takes {
		all = append(all, lt.tokens...)
	}
	return all
}
