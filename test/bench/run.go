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

	"github.com/webhook-dedup/webhook-dedup/internal/pgtest"
	"github.com/webhook-dedup/webhook-dedup/internal/redistest"
)

// server is what a configuration puts in front of wrk.
type server int

const (
	upstreamAlone server = iota
	goProxy
	nginxProxy
	webhookDedup
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
	load   load
	// logLevel is webhook-dedup's LOG_LEVEL: info logs one JSON line per
	// webhook to a file; warn logs none of them.
	logLevel string
	// before runs the -before binary instead of the one measured.
	before bool
}

// cacheSize is CACHE_SIZE in the rows that measure the cache: far more
// entries than the rows' duplicates need.
const cacheSize = 10000

// Names of the rows the ratios are taken against.
const (
	nameUpstream = "upstream alone"
	nameGoProxy  = "Go httputil.ReverseProxy"
	nameNginx    = "nginx proxy_pass, keepalive"
)

func allConfigs(before bool) []config {
	cs := []config{
		{name: nameUpstream, server: upstreamAlone, load: uniqueJSON},
		{name: nameGoProxy, server: goProxy, load: uniqueJSON},
		{name: nameNginx, server: nginxProxy, load: uniqueJSON},
	}
	dedup := func(s store, l load, what string) config {
		name := "webhook-dedup, " + s.String() + ", " + l.String() + what
		return config{name: name, server: webhookDedup, store: s, load: l, logLevel: "info"}
	}
	for _, s := range []store{embedded, redisStore} {
		for _, l := range []load{uniqueJSON, duplicateJSON, uniqueHeader} {
			cs = append(cs, dedup(s, l, ""))
		}
	}
	// The cache in front of a store: duplicates answered from the
	// proxy's memory rather than by a round trip to the store.
	cached := func(s store) config {
		c := dedup(s, duplicateJSON, fmt.Sprintf(", CACHE_SIZE=%d", cacheSize))
		c.cache = cacheSize
		return c
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
	cs = append(cs, cached(redisStore))
	// PostgreSQL: first-seen events, duplicates without and with the
	// cache, and async's accept path.
	cs = append(cs,
		dedup(postgresStore, uniqueJSON, ""),
		dedup(postgresStore, duplicateJSON, ""),
		cached(postgresStore),
		async(dedup(postgresStore, uniqueJSON, "")),
	)
	// Async delivery: its accept path against the sync path on a fast app,
	// then a slow app behind sync and async routes (the sender's answer
	// time, and the events accepted per second).
	cs = append(cs,
		async(dedup(redisStore, uniqueJSON, "")),
		dedup(dataDir, uniqueJSON, ""),
		async(dedup(dataDir, uniqueJSON, "")),
		slow(dedup(redisStore, uniqueJSON, "")),
		async(slow(dedup(redisStore, uniqueJSON, ""))),
		async(slow(dedup(dataDir, uniqueJSON, ""))),
	)
	// What the per-webhook log line costs.
	quiet := dedup(redisStore, uniqueJSON, ", LOG_LEVEL=warn")
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
// contains only, in any case (-only postgres finds the PostgreSQL rows).
func selectConfigs(only string, before bool) []config {
	var out []config
	for _, c := range allConfigs(before) {
		if c.server != webhookDedup || strings.Contains(strings.ToLower(c.name), strings.ToLower(only)) {
			out = append(out, c)
		}
	}
	return out
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
	// Drained is how long an async run's backlog took to be delivered
	// after the 32-connection run, before the one-connection run.
	Drained time.Duration `json:"drained_ns,omitempty"`
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
	stderr io.Writer
}

// runOne starts fresh servers for c, warms them up, measures and stops them.
func (b *bench) runOne(ctx context.Context, c config, rep int) (res result, err error) {
	res = result{Config: c.name, Repeat: rep}
	dir, err := os.MkdirTemp(b.tmp, "run-")
	if err != nil {
		return res, err
	}
	// What to stop at the end, in reverse order: the proxy before its
	// store, the store before nothing.
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
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
	up, err := start("upstream", baseEnv, upArgs...)
	if err != nil {
		return res, err
	}
	if err := waitHTTP(up, "http://"+upAddr+"/", http.StatusOK); err != nil {
		return res, err
	}

	var target *proc
	var storeProc measured // zero: no store server
	var metricsURL string
	path := "/stripe"
	if c.load == uniqueHeader {
		path = "/github"
	}
	addr := upAddr
	switch c.server {
	case upstreamAlone:
		target = up
	case goProxy:
		if addr, err = freeAddr(); err != nil {
			return res, err
		}
		if target, err = start("goproxy", baseEnv, b.self, "goproxy", "-listen", addr, "-upstream", "http://"+upAddr); err != nil {
			return res, err
		}
		if err := waitHTTP(target, "http://"+addr+"/", http.StatusOK); err != nil {
			return res, err
		}
	case nginxProxy:
		if addr, err = freeAddr(); err != nil {
			return res, err
		}
		conf, err := writeNginxConf(dir, addr, upAddr)
		if err != nil {
			return res, err
		}
		if target, err = start("nginx", baseEnv, b.nginx, "-p", dir, "-e", filepath.Join(dir, "nginx-error.log"), "-c", conf, "-g", "daemon off;"); err != nil {
			return res, err
		}
		if err := waitHTTP(target, "http://"+addr+"/", http.StatusOK); err != nil {
			return res, err
		}
	case webhookDedup:
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
				return res, err
			}
			_, port, _ := strings.Cut(redisAddr, ":")
			redis, err := start("redis", baseEnv, "redis-server", "--port", port, "--bind", "127.0.0.1",
				"--save", "", "--appendonly", "no", "--dir", dir)
			if err != nil {
				return res, err
			}
			if err := redistest.WaitPing(redisAddr, 10*time.Second); err != nil {
				return res, err
			}
			storeProc = redis.measured()
			env = append(env, "REDIS_URL=redis://"+redisAddr)
		case postgresStore:
			pg, err := b.startPostgres()
			if err != nil {
				return res, err
			}
			stops = append(stops, pg.Close)
			storeProc = measured{name: "postgres", pid: pg.PID()}
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
		if addr, err = freeAddr(); err != nil {
			return res, err
		}
		adminAddr, err := freeAddr()
		if err != nil {
			return res, err
		}
		env = append(env, "LISTEN_ADDR="+addr, "ADMIN_ADDR="+adminAddr)
		// stderr, the JSON log, goes to a file (webhook-dedup.log), as it
		// would to a container runtime's log pipe.
		bin := b.bin
		if c.before {
			bin = b.before
		}
		if target, err = start("webhook-dedup", env, bin); err != nil {
			return res, err
		}
		metricsURL = "http://" + adminAddr + "/metrics"
		if err := waitHTTP(target, "http://"+adminAddr+"/readyz", http.StatusOK); err != nil {
			return res, err
		}
	}

	url := "http://" + addr + path
	runNonce := nonce()
	dupID := "evt_dup_" + runNonce
	wrkRun := func(conns int, d time.Duration) (wrkResult, error) {
		if err := ctx.Err(); err != nil {
			return wrkResult{}, err
		}
		place := func(argv ...string) []string { return placed(b.opts.loadCPUs, b.opts.nice, argv...) }
		return runWrk(dir, place, url, conns, d, script(c.load, path, nonce(), dupID))
	}
	if c.load == duplicateJSON {
		// The first copy, alone: every copy wrk sends is then a duplicate
		// of a completed event (not of one still in flight).
		if err := post(url, stripeHead+dupID+stripeTail); err != nil {
			return res, err
		}
	}
	// Warm up: connections, pools, the heap.
	if _, err := wrkRun(b.opts.conns, b.opts.warmup); err != nil {
		return res, err
	}
	before, err := usages(target.measured(), storeProc, up.measured())
	if err != nil {
		return res, err
	}
	if res.Load, err = wrkRun(b.opts.conns, b.opts.duration); err != nil {
		return res, err
	}
	after, err := usages(target.measured(), storeProc, up.measured())
	if err != nil {
		return res, err
	}
	res.ServerCPU = after[0].cpu - before[0].cpu
	res.StoreCPU = after[1].cpu - before[1].cpu
	if target != up {
		res.UpstreamCPU = after[2].cpu - before[2].cpu
	}
	if c.async && !c.slow {
		// The 32-connection run leaves a backlog that the workers deliver
		// afterwards: measured during it, the one-connection latency would
		// be that of a busy core, not of the accept path. (Behind the slow
		// app the backlog would take minutes to deliver, at
		// DELIVERY_CONCURRENCY per 200 ms, but its deliveries mostly wait:
		// they leave the core to the accept path.)
		if res.Drained, err = drainQueue(ctx, metricsURL, drainFor); err != nil {
			return res, err
		}
	}
	if res.Single, err = wrkRun(1, b.opts.latencyDur); err != nil {
		return res, err
	}
	final, err := usages(target.measured())
	if err != nil {
		return res, err
	}
	res.PeakRSS = final[0].peak
	if metricsURL != "" {
		res.Outcomes, err = outcomes(metricsURL)
	}
	return res, err
}

// drainFor bounds the wait for an async run's backlog to be delivered.
const drainFor = 2 * time.Minute

// drainQueue waits until the proxy's async queue is empty (its
// webhook_dedup_queue_depth gauge reads 0), and returns how long that took.
func drainQueue(ctx context.Context, metricsURL string, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		depth, err := metricValue(metricsURL, "webhook_dedup_queue_depth")
		if err == nil && depth == 0 {
			return time.Since(start), nil
		}
		if time.Since(start) > limit {
			return 0, fmt.Errorf("the async queue still held %v events after %s (last error: %v)", depth, limit, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// metricValue reads one unlabelled sample from a /metrics page.
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
// postgres on loopback, as the tests run it: fsync off, so commits reach
// the kernel but not the disk) and places it on the servers' CPUs at
// their nice value, as the other servers are.
func (b *bench) startPostgres() (*pgtest.Server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, p, _ := strings.Cut(addr, ":")
	port, err := strconv.Atoi(p)
	if err != nil {
		return nil, err
	}
	pg, err := pgtest.Start(port)
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
