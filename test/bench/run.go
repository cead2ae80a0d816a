package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// bench runs configurations.
type bench struct {
	opts   options
	tmp    string
	self   string // this executable: the upstream and the Go proxy
	bin    string // webhook-dedup
	before string // webhook-dedup to compare with; empty: none
	nginx  string // the nginx executable
	peer   *peer  // Hookaido; nil: none
	stderr io.Writer
}

// startFunc starts a server of a run.
type startFunc func(name string, env []string, argv ...string) (*proc, error)

// runOne starts fresh servers for c, warms them up, measures and stops them.
func (b *bench) runOne(ctx context.Context, c config, rep int) (res result, err error) {
	res = result{Config: c.name, Repeat: rep}
	if res.Settled, err = waitQuietDisk(b.tmp); err != nil {
		fmt.Fprintf(b.stderr, "(%v) ", err)
	}
	dir, err := os.MkdirTemp(b.tmp, "run-")
	if err != nil {
		return res, err
	}
	// What to stop at the end, in reverse order: the proxy before its
	// store, the store before nothing; then the run's files go, unless
	// -keep keeps them.
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		if !b.opts.keep {
			_ = os.RemoveAll(dir)
		}
	}()
	start := func(name string, env []string, argv ...string) (*proc, error) {
		p, err := startProc(name, filepath.Join(dir, name+".log"), env, placed(b.opts.serverCPUs, b.opts.nice, argv...)...)
		if err == nil {
			stops = append(stops, p.stop)
		}
		return p, err
	}
	baseEnv := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}

	upAddr, err := freeAddr()
	if err != nil {
		return res, err
	}
	upArgs := []string{b.self, "upstream", "-listen", upAddr}
	if c.slow {
		upArgs = append(upArgs, "-delay", slowAppDelay.String())
	}
	if c.countsIDs() {
		upArgs = append(upArgs, "-ids")
	}
	up, err := start("upstream", baseEnv, upArgs...)
	if err != nil {
		return res, err
	}
	if err := waitHTTP(up, "http://"+upAddr+"/", http.StatusOK); err != nil {
		return res, err
	}
	countURL := "http://" + upAddr + countPath

	var t target
	switch c.server {
	case upstreamAlone:
		t = target{proc: up, addr: upAddr}
	case goProxy:
		t, err = b.startGoProxy(upAddr, baseEnv, start)
	case nginxProxy:
		t, err = b.startNginx(dir, upAddr, baseEnv, start)
	case webhookDedup:
		t, err = b.startDedup(c, dir, upAddr, baseEnv, start, &stops)
	case hookaido:
		t, err = b.startHookaido(dir, upAddr, c.peerDepth, baseEnv, start)
		if err == nil {
			res.Peer = b.peer.version
		}
	}
	if err != nil {
		return res, err
	}

	path := "/stripe"
	if c.load == uniqueHeader {
		path = "/github"
	}
	url := "http://" + t.addr + path
	runNonce := nonce()
	dupID := "evt_dup_" + runNonce
	place := func(argv ...string) []string { return placed(b.opts.loadCPUs, b.opts.nice, argv...) }
	// Each wrk run has a nonce of its own, which keeps unique events
	// unique across runs.
	wrkRun := func(conns int, d time.Duration, nonce string) (wrkResult, error) {
		if err := ctx.Err(); err != nil {
			return wrkResult{}, err
		}
		return runWrk(dir, place, url, conns, d, script(c.load, path, nonce, dupID, c.keys))
	}
	if c.load == duplicateJSON {
		// The first copy, alone: every copy wrk sends is then a duplicate
		// of a completed event (not of one still in flight).
		if err := post(url, stripeHead+dupID+stripeTail); err != nil {
			return res, err
		}
	}
	// Warm up: connections, pools, the heap.
	if _, err := wrkRun(b.opts.conns, b.opts.warmup, nonce()); err != nil {
		return res, err
	}
	upBase := "http://" + upAddr
	if c.keys > 0 {
		// The warm-up's backlog delivered, the app held: the queue then
		// holds what the measurement adds, and nothing of it is delivered
		// before the app is let go (backlogRun).
		if _, _, err := drain(ctx, countURL, t.queued); err != nil {
			return res, err
		}
		if err := setGate(upBase, true); err != nil {
			return res, err
		}
	}
	before, err := usages(t.proc.measured(), t.storeProc, up.measured())
	if err != nil {
		return res, err
	}
	appBefore, err := countApp(countURL)
	if err != nil {
		return res, err
	}
	loadNonce := nonce()
	if res.Load, err = wrkRun(b.opts.conns, b.opts.duration, loadNonce); err != nil {
		return res, err
	}
	appAfter, err := countApp(countURL)
	if err != nil {
		return res, err
	}
	after, err := usages(t.proc.measured(), t.storeProc, up.measured())
	if err != nil {
		return res, err
	}
	res.ServerCPU = after[0].cpu - before[0].cpu
	res.StoreCPU = after[1].cpu - before[1].cpu
	if t.proc != up {
		res.UpstreamCPU = after[2].cpu - before[2].cpu
	}
	res.Delivered = appAfter.Requests - appBefore.Requests
	if c.keys > 0 {
		if res.Backlog, err = backlogRun(ctx, upBase, countURL, t.queued); err != nil {
			return res, err
		}
	} else if c.queues() && !c.slow {
		// The 32-connection run leaves a backlog that the workers deliver
		// afterwards: measured during it, the one-connection latency would
		// be that of a busy core, not of the accept path. (Behind the slow
		// app the backlog would take minutes to deliver, at
		// DELIVERY_CONCURRENCY per 200 ms, but its deliveries mostly wait:
		// they leave the core to the accept path.)
		if res.Drained, _, err = drain(ctx, countURL, t.queued); err != nil {
			return res, err
		}
	}
	if c.paced() {
		if res.Paced, err = b.pace(ctx, url, countURL, res.Load.acceptedRate()/2, t.queued); err != nil {
			return res, err
		}
	}
	if c.countsIDs() {
		// wrk had answers to Requests requests, so it sent at least the
		// first Requests: every event of their whole blocks went 3 times.
		res.Thrice = res.Load.Requests / (3 * copySpread) * copySpread
		n, err := countApp(fmt.Sprintf("%s?nonce=%s&below=%d", countURL, loadNonce, res.Thrice))
		if err != nil {
			return res, err
		}
		res.ThriceReached, res.ThriceCopies = n.Reached, n.Copies
	}
	if res.Single, err = wrkRun(1, b.opts.latencyDur, nonce()); err != nil {
		return res, err
	}
	final, err := usages(t.proc.measured())
	if err != nil {
		return res, err
	}
	res.PeakRSS = final[0].peak
	if t.outcomes != nil {
		res.Outcomes, err = t.outcomes()
	}
	return res, err
}

// pace offers first-seen events at rate (half what the 32-connection run
// accepted) for the measurement's duration, counting the deliveries made
// meanwhile, then waits for the backlog.
func (b *bench) pace(ctx context.Context, url, countURL string, rate float64, queued func() (int64, error)) (*paceResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if rate < 1 {
		return nil, fmt.Errorf("nothing to pace: the 32-connection run accepted %.1f events/s", 2*rate)
	}
	place := func(argv ...string) []string { return placed(b.opts.loadCPUs, b.opts.nice, argv...) }
	p, err := runPacer(b.self, place, url, countURL, rate, b.opts.duration, b.opts.conns)
	if err != nil {
		return nil, err
	}
	p.Drained, _, err = drain(ctx, countURL, queued)
	return &p, err
}

// backlogRun lets the held app go and times the delivery of the backlog
// queued behind it: the deliveries alone on the servers' core, with no
// intake beside them.
func backlogRun(ctx context.Context, upBase, countURL string, queued func() (int64, error)) (*backlogResult, error) {
	held, err := countApp(countURL)
	if err != nil {
		return nil, err
	}
	if err := setGate(upBase, false); err != nil {
		return nil, err
	}
	var r backlogResult
	var got int64
	if r.Drained, got, err = drain(ctx, countURL, queued); err != nil {
		return nil, err
	}
	r.Events = got - held.Requests
	return &r, nil
}

// slowAppDelay is how long the slow app takes per request.
const slowAppDelay = 200 * time.Millisecond
