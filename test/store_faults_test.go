package test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// faultStore is a store as the fault matrix sets it up.
type faultStore struct {
	name string
	// async says async delivery runs on it.
	async bool
	// networked says the proxy reaches it over TCP: it has a store link
	// to put a fault on.
	networked bool
	// env starts the store for t and returns the proxy's settings for it;
	// dial takes the store's host:port and returns the one the proxy is
	// to dial (a fault link's, or the same).
	env func(t *testing.T, dial func(addr string) string) map[string]string
}

var faultStores = []faultStore{{
	name: "memory",
	env:  func(*testing.T, func(string) string) map[string]string { return nil },
}, {
	name: "DATA_DIR", async: true,
	env: func(t *testing.T, _ func(string) string) map[string]string {
		return map[string]string{"DATA_DIR": t.TempDir()}
	},
}, {
	name: "Redis", async: true, networked: true,
	env: func(t *testing.T, dial func(string) string) map[string]string {
		srv := redistest.New(t, "--appendonly", "yes", "--maxmemory-policy", "noeviction")
		return map[string]string{"REDIS_URL": "redis://" + dial(srv.Addr)}
	},
}, {
	name: "PostgreSQL", async: true, networked: true,
	env: func(t *testing.T, dial func(string) string) map[string]string {
		u, err := url.Parse(postgres.Get(t).NewDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		u.Host = dial(u.Host)
		return map[string]string{"DATABASE_URL": u.String()}
	},
}}

// faultTimeouts keep each cell short: a call on a broken link gives up
// within a second or two, a claim whose reply was lost is free again
// after LEASE_TTL, and SIGTERM ends the process within
// faultShutdownBound. STORE_TIMEOUT may be at most a quarter of
// UPSTREAM_TIMEOUT.
var faultTimeouts = map[string]string{
	"UPSTREAM_TIMEOUT": "2s",
	"STORE_TIMEOUT":    "500ms",
	"LEASE_TTL":        "3s",
	"SHUTDOWN_DELAY":   "0s",
	"SHUTDOWN_TIMEOUT": "2s",
}

// faultShutdownBound is what the proxy promises for SIGTERM whatever its
// store or app does: SHUTDOWN_DELAY + SHUTDOWN_TIMEOUT + 2 s.
const faultShutdownBound = 0 + 2*time.Second + 2*time.Second

// faultPlan is how hard a cell pushes.
type faultPlan struct {
	// events is the batch, spread over before and window.
	events int
	// before is how long the batch runs before the fault.
	before time.Duration
	// window is how long the fault stays on.
	window time.Duration
}

// faultPlanFor is the plan of make test, or with FAULT_SOAK set (make
// soak) a longer one: five times the events, a fault four times as long.
// The window stays under the 5 s for which a sync completion the store
// did not take is retried: past it, a claim whose completion was lost
// runs out its lease and the sender's retry is forwarded again, as
// docs/delivery.md says.
func faultPlanFor() faultPlan {
	if os.Getenv("FAULT_SOAK") != "" {
		return faultPlan{events: 60, before: time.Second, window: 4 * time.Second}
	}
	return faultPlan{events: 8, before: 300 * time.Millisecond, window: time.Second}
}

// faultSettle bounds how long after the fault every event must have been
// answered 2xx and taken effect: a claim whose reply the fault cut off
// sits out its LEASE_TTL (3 s) before a retry gets it; the rest is slack
// for a loaded machine.
const faultSettle = 3*time.Second + 12*time.Second

// faultBackoff is the senders' pause before retry n: short, so that a
// cell ends soon after the fault does.
func faultBackoff(n int) time.Duration {
	return min(time.Duration(n)*50*time.Millisecond, 250*time.Millisecond)
}

// TestFaultMatrix puts each fault of faultShapes on each link — the store
// link on Redis and on PostgreSQL, the app link on every store — in sync
// and in async delivery (on the stores that have it), and checks the same
// invariants in every cell (faultCell). FAULT_SOAK=1 (make soak) runs it
// longer.
func TestFaultMatrix(t *testing.T) {
	t.Parallel()
	plan := faultPlanFor()
	for _, st := range faultStores {
		for _, link := range []string{"store-link", "app-link"} {
			if link == "store-link" && !st.networked {
				continue
			}
			for _, mode := range []string{"sync", "async"} {
				if mode == "async" && !st.async {
					continue
				}
				for _, f := range faultShapes {
					t.Run(st.name+"/"+link+"/"+mode+"/"+f.name, func(t *testing.T) {
						t.Parallel()
						faultCell(t, faultCase{store: st, storeLink: link == "store-link", async: mode == "async", fault: f, plan: plan})
					})
				}
			}
		}
	}
}

// faultCase is one cell of the matrix.
type faultCase struct {
	store     faultStore
	storeLink bool // the fault is on the store link; else on the app link
	async     bool
	fault     linkFault
	plan      faultPlan
}

// faultSend is one event of a cell's batch and what became of it.
type faultSend struct {
	p     provider
	ev    event
	tally *tally // its attempts' answers
	err   error  // no 2xx in time
}

// key is the event's key at the app.
func (s *faultSend) key() string { return key(s.p, s.ev.ID) }

// faultBatch is events from the n-th on, one provider after the other.
func faultBatch(from, n int) []*faultSend {
	batch := make([]*faultSend, n)
	for i := range batch {
		p := allProviders[(from+i)%len(allProviders)]
		batch[i] = &faultSend{p: p, ev: p.Event(from + i), tally: newTally()}
	}
	return batch
}

// sendFaultBatch delivers each event of batch to addr as a provider does, retrying
// until it is answered 2xx or ctx ends, the i-th starting i×gap from now;
// the returned wait waits for every sender.
func sendFaultBatch(ctx context.Context, client *http.Client, addr string, batch []*faultSend, gap time.Duration) (wait func()) {
	var wg sync.WaitGroup
	for i, s := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The schedule that spreads the batch over the fault, not a
			// wait for a condition.
			pause := time.NewTimer(time.Duration(i) * gap)
			defer pause.Stop()
			select {
			case <-pause.C:
			case <-ctx.Done():
			}
			snd := &sender{client: client, addr: addr, maxAttempts: 1 << 20, backoff: faultBackoff, tally: s.tally}
			_, s.err = snd.deliver(ctx, s.p, s.ev)
		}()
	}
	return wg.Wait
}

// faultCell runs one cell in two phases.
//
// The fault window: a batch of signed events, whose senders retry every
// non-2xx answer as providers do, with a fault on one link for a window
// in the middle of it; then the fault is removed. Checked:
//
//   - every event is answered 2xx (202 queued on async routes) once the
//     fault is gone, and takes effect at the app;
//   - none takes effect twice, but where the fault cut a request off
//     after the app acted on it (a row that losesReplies, on the app
//     link): in sync mode the proxy answers 502/504 upstream-error and
//     releases the claim, and the sender's retry is forwarded again (the
//     README's "an upstream error or timeout releases the claim so the
//     retry gets through"); in async mode the attempt counts as failed
//     and is retried. There the cell allows exactly that: an event takes
//     effect once plus once per upstream-error answer its sender got
//     (sync), or at most once per attempt the proxy made (async: the app
//     cannot tell an attempt whose answer was lost from one the proxy
//     got, so this bound is looser), and at most once after the fault is
//     gone. A fault on the store link, or one that loses no reply, allows
//     no repeat;
//   - /healthz on the admin port answers 200 all through the fault;
//   - the process's peak RSS (VmHWM) stays under faultMemoryBound.
//
// The shutdown: the fault back on, a few more events on their way
// through it, SIGTERM. The process exits, status 0, within SHUTDOWN_DELAY
// + SHUTDOWN_TIMEOUT + 2 s. Then the fault is removed and a second
// process started on the same store and port: every event of either
// phase is answered 2xx and takes effect (an async event the first
// process had queued is delivered by the second). What SIGTERM cut off
// may take effect again: a request or delivery still running at
// SHUTDOWN_TIMEOUT is abandoned and retried (docs/operations.md).
func faultCell(t *testing.T, c faultCase) {
	app := newUpstream(t)
	appURL := app.URL
	var link *faultLink
	through := func(addr string) string {
		link = newFaultLink(t, addr)
		return link.Addr
	}
	var storeEnv map[string]string
	if c.storeLink {
		storeEnv = c.store.env(t, through)
	} else {
		storeEnv = c.store.env(t, func(addr string) string { return addr })
		appURL = "http://" + through(app.Listener.Addr().String())
	}
	var env map[string]string
	if c.async {
		env = asyncEnv(appURL, storeEnv)
	} else {
		env = proxyEnv(app, storeEnv)
		env["UPSTREAM_URL"] = appURL
	}
	for k, v := range faultTimeouts {
		env[k] = v
	}
	px := startProxy(t, env)
	px.awaitReady(t)
	client := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), c.plan.before+c.plan.window+2*faultSettle)
	defer cancel()

	// The fault window.
	batch := faultBatch(0, c.plan.events)
	wait := sendFaultBatch(ctx, client, px.Addr, batch, (c.plan.before+c.plan.window)/time.Duration(len(batch)))
	time.Sleep(c.plan.before) // the schedule: the fault comes while the batch runs
	link.apply(c.fault)
	watch := watchHealth(px)
	time.Sleep(c.plan.window) // the fault itself
	polls, unhealthy := watch.end()
	link.remove()
	removed := app.EffectsSnapshot()
	wait()
	attempts := c.awaitSettled(t, px, app, batch)
	repeats := c.checkRepeats(t, app, batch, attempts, removed)
	for _, f := range unhealthy {
		t.Errorf("/healthz during the fault: %s", f)
	}
	hwm := px.procBytes(t, "VmHWM")
	if bound := faultMemoryBound(); hwm > bound {
		t.Errorf("peak RSS (VmHWM) %d MiB, want at most %d MiB", hwm>>20, bound>>20)
	}

	// The shutdown.
	link.apply(c.fault)
	late := faultBatch(c.plan.events, faultShutdownEvents)
	wait = sendFaultBatch(ctx, client, px.Addr, late, 0)
	time.Sleep(faultShutdownLead) // the schedule: SIGTERM while the late events meet the fault
	px.Terminate()
	code, took := px.awaitExitOrDump(faultShutdownBound + exitDeadline)
	link.remove()
	switch {
	case code == -1:
		t.Errorf("still running %s after SIGTERM with the fault on; want an exit within %s (its goroutines, dumped by SIGQUIT, are in its output)", took.Round(time.Millisecond), faultShutdownBound)
	case took > faultShutdownBound:
		t.Errorf("exited %s after SIGTERM with the fault on; want within %s (SHUTDOWN_DELAY + SHUTDOWN_TIMEOUT + 2 s)", took.Round(time.Millisecond), faultShutdownBound)
	case code != 0:
		t.Errorf("exit status %d after SIGTERM with the fault on, want 0", code)
	}
	next := maps.Clone(env)
	next["LISTEN_ADDR"] = px.Addr // where the late events' senders retry
	second := startProxy(t, next)
	second.awaitReady(t)
	wait()
	c.awaitSettled(t, second, app, append(batch, late...))

	summary := fmt.Sprintf("e2e fault matrix [%s]: %d+%d events, %d attempts (%s), %d repeated effects in the window, /healthz %d polls %d failed, VmHWM %d MiB, SIGTERM exit %s after",
		strings.TrimPrefix(t.Name(), "TestFaultMatrix/"), len(batch), len(late), requestsOf(batch)+requestsOf(late), outcomesOf(append(batch, late...)),
		repeats, polls, len(unhealthy), hwm>>20, took.Round(time.Millisecond))
	t.Log(summary)
	fmt.Println(summary)
}

// awaitExitOrDump waits up to deadline for the process to exit, and
// returns its exit status and how long it took; a process still running
// then gets SIGQUIT, so that the Go runtime writes where each goroutine
// waits into its output, and -1 is returned.
func (p *proxy) awaitExitOrDump(deadline time.Duration) (int, time.Duration) {
	start := time.Now()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), time.Since(start)
	case <-time.After(deadline):
	}
	took := time.Since(start)
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	p.waitExit(exitDeadline)
	return -1, took
}

// faultShutdownEvents are the events on their way when SIGTERM comes, and
// faultShutdownLead how long they have to get there first.
const (
	faultShutdownEvents = 4
	faultShutdownLead   = 300 * time.Millisecond
)

// awaitSettled fails the test unless every event of batch was answered
// 2xx and (async: once px has it completed) took effect, and returns,
// on async routes, how many attempts each took.
func (c faultCase) awaitSettled(t *testing.T, px *proxy, app *upstream, batch []*faultSend) map[string]int {
	t.Helper()
	keys := make([]string, 0, len(batch))
	attempts := map[string]int{}
	for _, s := range batch {
		if s.err != nil {
			t.Errorf("%s: no 2xx within %s of the fault's removal: %v", s.key(), faultSettle, s.err)
			continue
		}
		keys = append(keys, s.key())
		if c.async {
			// The admin lookup is the store's: on a machine starved of
			// CPU it may take longer than the cell's STORE_TIMEOUT, and be
			// answered 503, whatever link the fault was on. It is asked
			// again until the settling deadline: a store that never
			// answers still fails the cell, with its last answer.
			await(t, faultSettle, func() error {
				ev, err := px.lookup(t, s.p, s.ev.ID)
				switch {
				case err != nil:
					return err
				case ev.State != "completed":
					return fmt.Errorf("event %s: %+v, want state completed", s.ev.ID, ev)
				}
				attempts[s.key()] = ev.Attempts
				return nil
			})
		}
	}
	awaitEffects(t, app, keys, faultSettle)
	return attempts
}

// checkRepeats checks how often each event of batch took effect (see
// faultCell), given the attempts on async routes and the effects already
// there when the fault was removed, and returns the repeats.
func (c faultCase) checkRepeats(t *testing.T, app *upstream, batch []*faultSend, attempts, removed map[string]int) int {
	t.Helper()
	effects := app.EffectsSnapshot()
	repeats := 0
	for _, s := range batch {
		k := s.key()
		n := effects[k]
		allowed, why := 1, "the fault loses no reply"
		switch {
		case c.storeLink:
			why = "a fault on the store link allows no repeat"
		case !c.fault.losesReplies:
		case c.async:
			allowed, why = max(1, attempts[k]), fmt.Sprintf("at most once per attempt (%d)", attempts[k])
		default:
			lost := s.tally.outcomes["upstream-error"]
			allowed, why = 1+lost, fmt.Sprintf("once, and once more per upstream-error answer its sender got (%d)", lost)
		}
		if n > allowed {
			t.Errorf("%s took effect %d times; want at most %d: %s (answers by X-Webhook-Dedup %v)", k, n, allowed, why, s.tally.outcomes)
		}
		if after := n - removed[k]; after > 1 {
			t.Errorf("%s took effect %d times after the fault was removed; want at most once", k, after)
		}
		repeats += max(0, n-1)
	}
	return repeats
}

// requestsOf is how many attempts the batch's senders made.
func requestsOf(batch []*faultSend) int {
	n := 0
	for _, s := range batch {
		n += s.tally.requests
	}
	return n
}

// outcomesOf sums the batch's answers by X-Webhook-Dedup ("no answer"
// for transport errors), in a stable order.
func outcomesOf(batch []*faultSend) string {
	sum := map[string]int{}
	for _, s := range batch {
		for o, n := range s.tally.outcomes {
			sum[o] += n
		}
		if s.tally.errors > 0 {
			sum["no answer"] += s.tally.errors
		}
	}
	parts := make([]string, 0, len(sum))
	for o, n := range sum {
		parts = append(parts, fmt.Sprintf("%s=%d", o, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// faultMemoryBound is the most a cell's process may take (VmHWM): its
// batch is a few kilobytes, so a process near the bound is one that a
// fault made buffer or leak without bound. Measured: 27–33 MiB (40 MiB
// in the soak), and 62–79 MiB in a binary built with -race (129 MiB in
// the soak), whose shadow memory and per-goroutine state multiply it.
func faultMemoryBound() int64 {
	if raceDetector {
		return 192 << 20
	}
	return 64 << 20
}
