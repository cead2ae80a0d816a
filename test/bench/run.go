package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/pgtest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// server is what a configuration puts in front of wrk.
type server int

const (
	upstreamAlone server = iota
	goProxy
	nginxProxy
	webhookDedup
	hookaido // the peer (hookaido.go)
)

// store is the store webhook-dedup runs on.
type store int

const (
	embedded      store = iota // in memory, in the proxy's process
	dataDir                    // the embedded store on disk (DATA_DIR)
	redisStore                 // a redis-server of its own
	postgresStore              // a PostgreSQL server of its own
)

func (s store) String() string {
	return [...]string{"embedded", "DATA_DIR", "Redis", "PostgreSQL"}[s]
}

// ownServer reports whether the store is a server process beside the
// proxy, whose CPU the run counts as the store's.
func (s store) ownServer() bool { return s == redisStore || s == postgresStore }

// config is one row of the table.
type config struct {
	name   string
	server server
	store  store // webhook-dedup's; the zero value is the embedded store
	cache  int   // webhook-dedup's CACHE_SIZE; 0: no cache
	async  bool  // DELIVERY=async: the sender is answered 202 once queued
	slow   bool  // the app takes slowAppDelay per request
	// durable runs PostgreSQL as deployed (fsync, synchronous_commit and
	// full_page_writes on), not as the tests run it (fsync off).
	durable bool
	load    load
	// logLevel is webhook-dedup's LOG_LEVEL: info logs one JSON line per
	// webhook to a file; warn logs none of them.
	logLevel string
	// before runs the -before binary instead of the one measured.
	before bool
}

// baseline reports whether c always runs, whatever -only says: the rows
// the others are compared with.
func (c config) baseline() bool {
	return (c.server == upstreamAlone || c.server == goProxy || c.server == nginxProxy) && c.load == uniqueJSON
}

// queues reports whether the server answers before the app has the event
// (webhook-dedup's async routes, Hookaido), leaving a backlog to deliver.
func (c config) queues() bool { return c.async || c.server == hookaido }

// paced reports whether the run measures delivery during intake too: on a
// queueing server, a fast app and first-seen events.
func (c config) paced() bool { return c.queues() && !c.slow && c.load == uniqueJSON }

// countsIDs reports whether the upstream counts distinct event IDs: on the
// rows that send each event 3×, to count the app's copies per event.
func (c config) countsIDs() bool { return c.load == thriceJSON }

// storeLabel names c's store in its row.
func (c config) storeLabel() string {
	if c.durable {
		return c.store.String() + " " + fsyncOn
	}
	return c.store.String()
}

// fsyncOn marks the rows of a PostgreSQL as deployed.
const fsyncOn = "fsync=on"

// cacheSize is CACHE_SIZE in the rows that measure the cache: far more
// entries than the rows' duplicates need.
const cacheSize = 10000

// Names of the rows the ratios are taken against.
const (
	nameUpstream = "upstream alone"
	nameGoProxy  = "Go httputil.ReverseProxy"
	nameNginx    = "nginx proxy_pass, keepalive"
)

// Names of the peer's rows.
const (
	nameHookaido       = "Hookaido, unique JSON"
	nameHookaidoThrice = "Hookaido, unique JSON, each sent 3×"
	nameGoProxyThrice  = "Go httputil.ReverseProxy, unique JSON, each sent 3×"
)

func allConfigs(before bool) []config {
	cs := []config{
		{name: nameUpstream, server: upstreamAlone, load: uniqueJSON},
		{name: nameGoProxy, server: goProxy, load: uniqueJSON},
		{name: nameNginx, server: nginxProxy, load: uniqueJSON},
	}
	dedup := func(c config, what string) config {
		c.name = "webhook-dedup, " + c.storeLabel() + ", " + c.load.String() + what
		c.server, c.logLevel = webhookDedup, "info"
		return c
	}
	on := func(s store, l load) config { return dedup(config{store: s, load: l}, "") }
	for _, s := range []store{embedded, redisStore} {
		for _, l := range []load{uniqueJSON, duplicateJSON, uniqueHeader} {
			cs = append(cs, on(s, l))
		}
	}
	// The cache in front of a store: duplicates answered from the
	// proxy's memory rather than by a round trip to the store.
	cached := func(c config) config {
		c.cache = cacheSize
		return dedup(c, fmt.Sprintf(", CACHE_SIZE=%d", cacheSize))
	}
	async := func(c config) config {
		c.name += ", async"
		c.async = true
		return c
	}
	slow := func(c config) config {
		c.name += ", slow app (200 ms)"
		c.slow = true
		return c
	}
	cs = append(cs, cached(config{store: redisStore, load: duplicateJSON}))
	// PostgreSQL: first-seen events, duplicates without and with the
	// cache, and async's accept path; as the tests run it (fsync off),
	// then as deployed (each commit flushed to the disk).
	for _, durable := range []bool{false, true} {
		pg := func(l load) config { return config{store: postgresStore, load: l, durable: durable} }
		cs = append(cs,
			dedup(pg(uniqueJSON), ""),
			dedup(pg(duplicateJSON), ""),
			cached(pg(duplicateJSON)),
			async(dedup(pg(uniqueJSON), "")),
		)
	}
	// Async delivery: its accept path against the sync path on a fast app,
	// then a slow app behind sync and async routes (the sender's answer
	// time, and the events accepted per second).
	cs = append(cs,
		async(on(redisStore, uniqueJSON)),
		on(dataDir, uniqueJSON),
		async(on(dataDir, uniqueJSON)),
		slow(on(redisStore, uniqueJSON)),
		async(slow(on(redisStore, uniqueJSON))),
		async(slow(on(dataDir, uniqueJSON))),
	)
	// The peer, on the same events as the async rows, and every proxy
	// with each event sent 3×: how many copies reach the app.
	cs = append(cs,
		config{name: nameHookaido, server: hookaido, load: uniqueJSON},
		config{name: nameHookaidoThrice, server: hookaido, load: thriceJSON},
		config{name: nameGoProxyThrice, server: goProxy, load: thriceJSON},
		async(on(dataDir, thriceJSON)),
		async(on(redisStore, thriceJSON)),
	)
	// What the per-webhook log line costs.
	quiet := dedup(config{store: redisStore, load: uniqueJSON}, ", LOG_LEVEL=warn")
	quiet.logLevel = "warn"
	cs = append(cs, quiet)
	if before {
		for _, c := range cs {
			if c.server == webhookDedup {
				c.name = strings.Replace(c.name, "webhook-dedup", "before", 1)
				c.before = true
				cs = append(cs, c)
			}
		}
	}
	return cs
}

// selectConfigs keeps the baselines and the configurations whose name
// contains only, in any case (-only postgres finds the PostgreSQL rows),
// and drops Hookaido's when the bench has none.
func selectConfigs(only string, before, peer bool) []config {
	var out []config
	for _, c := range allConfigs(before) {
		if c.server == hookaido && !peer {
			continue
		}
		if c.baseline() || matches(c.name, only) {
			out = append(out, c)
		}
	}
	return out
}

// matches reports whether name contains one of the |-separated parts of
// only, in any case; every name matches an empty only.
func matches(name, only string) bool {
	for _, part := range strings.Split(strings.ToLower(only), "|") {
		if strings.Contains(strings.ToLower(name), part) {
			return true
		}
	}
	return false
}

// result is one configuration's measurements in one repeat.
type result struct {
	Config string    `json:"config"`
	Repeat int       `json:"repeat"`
	Load   wrkResult `json:"load"`   // the -c32 run
	Single wrkResult `json:"single"` // the -c1 run
	// CPU used during the -c32 run, by the server wrk talks to (and its
	// children), by the store's server (redis-server; PostgreSQL's
	// postmaster and every backend), and by the upstream behind a proxy.
	ServerCPU   time.Duration `json:"server_cpu_ns"`
	StoreCPU    time.Duration `json:"store_cpu_ns"`
	UpstreamCPU time.Duration `json:"upstream_cpu_ns"`
	// PeakRSS is the server's VmHWM at the end (its whole life: warm-up
	// and both measurements).
	PeakRSS int64 `json:"peak_rss"`
	// Outcomes counts webhook-dedup's X-Webhook-Dedup outcomes over the
	// server's life, from /metrics: a check that the load did what it says.
	Outcomes map[string]int64 `json:"outcomes,omitempty"`
	// Settled is how long the disk took to quieten before the run
	// (waitQuietDisk).
	Settled time.Duration `json:"settled_ns,omitempty"`
	// Drained is how long a queueing run's backlog took to be delivered
	// after the 32-connection run, before the one-connection run.
	Drained time.Duration `json:"drained_ns,omitempty"`
	// Delivered is how many requests the app received during the
	// 32-connection run: on a queueing row, the deliveries made while
	// the intake went on.
	Delivered int64 `json:"delivered,omitempty"`
	// Paced is the run at half the accept rate, on a queueing row.
	Paced *paceResult `json:"paced,omitempty"`
	// On the rows that send each event 3×, once the backlog is
	// delivered: how many events the 32-connection run certainly sent 3×
	// (those of its whole blocks of 3 × copySpread requests), how many of
	// them the app received, and its requests for them.
	Thrice        int64 `json:"thrice,omitempty"`
	ThriceReached int64 `json:"thrice_reached,omitempty"`
	ThriceCopies  int64 `json:"thrice_copies,omitempty"`
	// Peer is the version of Hookaido, on its rows.
	Peer string `json:"peer,omitempty"`
}

// copies is the app's requests per event sent 3× that it received.
func (r result) copies() float64 {
	if r.ThriceReached == 0 {
		return 0
	}
	return float64(r.ThriceCopies) / float64(r.ThriceReached)
}

// deliveredRate is the app's requests per second during the 32-connection run.
func (r result) deliveredRate() float64 {
	if r.Load.DurationUS == 0 {
		return 0
	}
	return float64(r.Delivered) / (float64(r.Load.DurationUS) / 1e6)
}

// UnmarshalJSON also reads the -raw files of older runs, which named the
// store's CPU redis_cpu_ns (Redis was the only store server then).
func (r *result) UnmarshalJSON(b []byte) error {
	type plain result // without this method
	var v struct {
		plain
		RedisCPU time.Duration `json:"redis_cpu_ns"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = result(v.plain)
	if r.StoreCPU == 0 {
		r.StoreCPU = v.RedisCPU
	}
	return nil
}

func (r result) note() string {
	var parts []string
	if n := r.Load.errors() + r.Single.errors(); n > 0 {
		parts = append(parts, fmt.Sprintf("%d errors", n))
	}
	for _, k := range sortedKeys(r.Outcomes) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, r.Outcomes[k]))
	}
	if r.Drained > 0 {
		parts = append(parts, fmt.Sprintf("%.0f delivered/s during intake, drained in %s", r.deliveredRate(), seconds(r.Drained)))
	}
	if p := r.Paced; p != nil {
		parts = append(parts, fmt.Sprintf("paced at %.0f/s: %.0f accepted/s, %.0f delivered/s, drained in %s", p.Rate, p.acceptedRate(), p.deliveredRate(), seconds(p.Drained)))
	}
	if r.Thrice > 0 {
		parts = append(parts, fmt.Sprintf("%.2f copies at the app per event sent 3× (%d of %d events reached it)", r.copies(), r.ThriceReached, r.Thrice))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

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

// target is the server wrk talks to, with what the run reads of it.
type target struct {
	proc       *proc
	addr       string
	storeProc  measured // zero: no store server
	metricsURL string   // empty: none
	// queued reads how many events a queueing server has taken on to
	// deliver (its own count: wrk does not count the answers it cut off
	// at the end of a run); outcomes reads its counters. Nil when it has
	// none.
	queued   func() (int64, error)
	outcomes func() (map[string]int64, error)
}

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
		t, err = b.startHookaido(dir, upAddr, baseEnv, start)
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
		return runWrk(dir, place, url, conns, d, script(c.load, path, nonce, dupID))
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
	if c.queues() && !c.slow {
		// The 32-connection run leaves a backlog that the workers deliver
		// afterwards: measured during it, the one-connection latency would
		// be that of a busy core, not of the accept path. (Behind the slow
		// app the backlog would take minutes to deliver, at
		// DELIVERY_CONCURRENCY per 200 ms, but its deliveries mostly wait:
		// they leave the core to the accept path.)
		if res.Drained, err = drain(ctx, countURL, t.queued); err != nil {
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
	p.Drained, err = drain(ctx, countURL, queued)
	return &p, err
}

// startGoProxy starts the plain Go proxy in front of the upstream.
func (b *bench) startGoProxy(upAddr string, env []string, start startFunc) (target, error) {
	var t target
	var err error
	if t.addr, err = freeAddr(); err != nil {
		return t, err
	}
	if t.proc, err = start("goproxy", env, b.self, "goproxy", "-listen", t.addr, "-upstream", "http://"+upAddr); err != nil {
		return t, err
	}
	return t, waitHTTP(t.proc, "http://"+t.addr+"/", http.StatusOK)
}

// startNginx starts nginx in front of the upstream, its files in dir.
func (b *bench) startNginx(dir, upAddr string, env []string, start startFunc) (target, error) {
	var t target
	var err error
	if t.addr, err = freeAddr(); err != nil {
		return t, err
	}
	conf, err := writeNginxConf(dir, t.addr, upAddr)
	if err != nil {
		return t, err
	}
	if t.proc, err = start("nginx", env, b.nginx, "-p", dir, "-e", filepath.Join(dir, "nginx-error.log"), "-c", conf, "-g", "daemon off;"); err != nil {
		return t, err
	}
	return t, waitHTTP(t.proc, "http://"+t.addr+"/", http.StatusOK)
}

// startDedup starts webhook-dedup, and its store's server if it has one,
// in front of the upstream; what stops the store goes on stops.
func (b *bench) startDedup(c config, dir, upAddr string, baseEnv []string, start startFunc, stops *[]func()) (target, error) {
	var t target
	env := append(baseEnv,
		"UPSTREAM_URL=http://"+upAddr,
		"ROUTES=/stripe=stripe,/github=github",
		"LOG_LEVEL="+c.logLevel,
		"LOG_FORMAT=json",
	)
	switch c.store {
	case redisStore:
		redisAddr, err := freeAddr()
		if err != nil {
			return t, err
		}
		_, port, _ := strings.Cut(redisAddr, ":")
		redis, err := start("redis", baseEnv, "redis-server", "--port", port, "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir)
		if err != nil {
			return t, err
		}
		if err := redistest.WaitPing(redisAddr, 10*time.Second); err != nil {
			return t, err
		}
		t.storeProc = redis.measured()
		env = append(env, "REDIS_URL=redis://"+redisAddr)
	case postgresStore:
		pg, err := b.startPostgres(c.durable)
		if err != nil {
			return t, err
		}
		*stops = append(*stops, pg.Close)
		t.storeProc = measured{name: "postgres", pid: pg.PID()}
		env = append(env, "DATABASE_URL="+pg.URL("postgres"))
	case dataDir:
		env = append(env, "DATA_DIR="+filepath.Join(dir, "data"))
	}
	if c.cache > 0 {
		env = append(env, "CACHE_SIZE="+strconv.Itoa(c.cache))
	}
	if c.async {
		// The load is unsigned, as on the sync runs, which verify
		// nothing either: the bench measures the proxy, not HMACs.
		env = append(env, "DELIVERY=async", "ALLOW_UNVERIFIED_ASYNC=true")
	}
	var err error
	if t.addr, err = freeAddr(); err != nil {
		return t, err
	}
	adminAddr, err := freeAddr()
	if err != nil {
		return t, err
	}
	env = append(env, "LISTEN_ADDR="+t.addr, "ADMIN_ADDR="+adminAddr)
	// stderr, the JSON log, goes to a file (webhook-dedup.log), as it
	// would to a container runtime's log pipe.
	bin := b.bin
	if c.before {
		bin = b.before
	}
	if t.proc, err = start("webhook-dedup", env, bin); err != nil {
		return t, err
	}
	t.metricsURL = "http://" + adminAddr + "/metrics"
	t.queued = func() (int64, error) {
		n, err := outcomes(t.metricsURL)
		return n["queued"], err
	}
	t.outcomes = func() (map[string]int64, error) { return outcomes(t.metricsURL) }
	return t, waitHTTP(t.proc, "http://"+adminAddr+"/readyz", http.StatusOK)
}

// drainFor bounds the wait for a backlog to be delivered.
const drainFor = 2 * time.Minute

// drain waits until a queueing server has delivered its backlog, and
// returns how long that took: until the app has received as many requests
// as the server has queued events. (Its queue's gauge would read empty
// later: the record of a delivery is settled after the app's answer,
// written in batches. And the sender's own count of 2xx answers misses
// the events of the requests wrk cut off at the end of a run, queued but
// never answered to it.)
func drain(ctx context.Context, countURL string, queued func() (int64, error)) (time.Duration, error) {
	start := time.Now()
	var want, got int64
	for {
		n, err := countApp(countURL)
		got = n.Requests
		if err == nil {
			want, err = queued()
		}
		if err == nil && got >= want {
			return time.Since(start), nil
		}
		if time.Since(start) > drainFor {
			return 0, fmt.Errorf("waited %s for the app to receive the %d events queued: it has %d (last error: %v)", drainFor, want, got, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// metricValue reads one sample from a /metrics page: name is the metric's
// name and, if it has any, its labels as the page spells them.
func metricValue(url, name string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/metrics has no %s", name)
}

// slowAppDelay is how long the slow app takes per request.
const slowAppDelay = 200 * time.Millisecond

// startPostgres starts a PostgreSQL server of its own (initdb, then
// postgres on loopback: as the tests run it, fsync off, so commits reach
// the kernel but not the disk; durable, as deployed) and places it on the
// servers' CPUs at their nice value, as the other servers are.
func (b *bench) startPostgres(durable bool) (*pgtest.Server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, p, _ := strings.Cut(addr, ":")
	port, err := strconv.Atoi(p)
	if err != nil {
		return nil, err
	}
	pg, err := pgtest.StartWith(port, pgtest.Options{Durable: durable})
	if err != nil {
		return nil, err
	}
	if err := place(pg.PID(), b.opts.serverCPUs, b.opts.nice); err != nil {
		pg.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return pg, nil
}

// measured names a process whose usage a run reads.
type measured struct {
	name string
	pid  int // 0: none, read as zero usage
}

func (p *proc) measured() measured { return measured{name: p.name, pid: p.pid()} }

// usages reads each process's usage; a zero pid reads as zero.
func usages(ms ...measured) ([]usage, error) {
	out := make([]usage, len(ms))
	for i, m := range ms {
		if m.pid == 0 {
			continue
		}
		u, err := procUsage(m.pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		out[i] = u
	}
	return out, nil
}

// writeNginxConf writes a plain reverse proxy: one worker, keep-alive to
// the upstream, no access log (the Go proxy logs nothing either), every
// path inside dir.
func writeNginxConf(dir, listen, upstream string) (string, error) {
	user := ""
	if os.Geteuid() == 0 {
		user = "user root root;\n" // the worker must reach dir
	}
	conf := fmt.Sprintf(`%sworker_processes 1;
pid %[2]s/nginx.pid;
error_log %[2]s/nginx-error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %[2]s/client_body;
    proxy_temp_path %[2]s/proxy;
    fastcgi_temp_path %[2]s/fastcgi;
    uwsgi_temp_path %[2]s/uwsgi;
    scgi_temp_path %[2]s/scgi;
    upstream app {
        server %[3]s;
        keepalive 64;
    }
    server {
        listen %[4]s;
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }
    }
}
`, user, dir, upstream, listen)
	path := filepath.Join(dir, "nginx.conf")
	return path, os.WriteFile(path, []byte(conf), 0o644)
}

// outcomes reads webhook_dedup_requests_total by outcome from /metrics.
func outcomes(url string) (map[string]int64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]int64{}
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "webhook_dedup_requests_total{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `outcome="`)
		outcome, rest, _ := strings.Cut(rest, `"`)
		_, value, _ := strings.Cut(rest, "} ")
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("/metrics: %q: %w", line, err)
		}
		out[outcome] += int64(n)
	}
	return out, s.Err()
}

// post sends one event and wants 200.
func post(url, body string) error {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return nil
}

func nonce() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
