package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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

// config is one row of the table.
type config struct {
	name   string
	server server
	redis  bool // webhook-dedup on Redis; false: the embedded store
	disk   bool // the embedded store on disk (DATA_DIR)
	async  bool // DELIVERY=async: the sender is answered 202 once queued
	slow   bool // the app takes slowAppDelay per request
	load   load
	// logLevel is webhook-dedup's LOG_LEVEL: info logs one JSON line per
	// webhook to a file; warn logs none of them.
	logLevel string
	// before runs the -before binary instead of the one measured.
	before bool
}

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
	for _, redis := range []bool{false, true} {
		store := "embedded"
		if redis {
			store = "Redis"
		}
		for _, l := range []load{uniqueJSON, duplicateJSON, uniqueHeader} {
			cs = append(cs, config{name: "webhook-dedup, " + store + ", " + l.String(), server: webhookDedup, redis: redis, load: l, logLevel: "info"})
		}
	}
	// Async delivery: its accept path against the sync path on a fast app,
	// then a slow app behind sync and async routes (the sender's answer
	// time, and the events accepted per second).
	cs = append(cs,
		config{name: "webhook-dedup, Redis, unique JSON, async", server: webhookDedup, redis: true, async: true, load: uniqueJSON, logLevel: "info"},
		config{name: "webhook-dedup, DATA_DIR, unique JSON", server: webhookDedup, disk: true, load: uniqueJSON, logLevel: "info"},
		config{name: "webhook-dedup, DATA_DIR, unique JSON, async", server: webhookDedup, disk: true, async: true, load: uniqueJSON, logLevel: "info"},
		config{name: "webhook-dedup, Redis, unique JSON, slow app (200 ms)", server: webhookDedup, redis: true, slow: true, load: uniqueJSON, logLevel: "info"},
		config{name: "webhook-dedup, Redis, unique JSON, slow app (200 ms), async", server: webhookDedup, redis: true, slow: true, async: true, load: uniqueJSON, logLevel: "info"},
		config{name: "webhook-dedup, DATA_DIR, unique JSON, slow app (200 ms), async", server: webhookDedup, disk: true, slow: true, async: true, load: uniqueJSON, logLevel: "info"},
	)
	// What the per-webhook log line costs.
	cs = append(cs, config{name: "webhook-dedup, Redis, unique JSON, LOG_LEVEL=warn", server: webhookDedup, redis: true, load: uniqueJSON, logLevel: "warn"})
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

// selectConfigs keeps the baselines and the configurations matching only.
func selectConfigs(only string, before bool) []config {
	var out []config
	for _, c := range allConfigs(before) {
		if c.server != webhookDedup || strings.Contains(c.name, only) {
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
	// children), by Redis, and by the upstream behind a proxy.
	ServerCPU   time.Duration `json:"server_cpu_ns"`
	RedisCPU    time.Duration `json:"redis_cpu_ns"`
	UpstreamCPU time.Duration `json:"upstream_cpu_ns"`
	// PeakRSS is the server's VmHWM at the end (its whole life: warm-up
	// and both measurements).
	PeakRSS int64 `json:"peak_rss"`
	// Outcomes counts webhook-dedup's X-Webhook-Dedup outcomes over the
	// server's life, from /metrics: a check that the load did what it says.
	Outcomes map[string]int64 `json:"outcomes,omitempty"`
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
	var procs []*proc
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
		}
	}()
	start := func(name string, env []string, argv ...string) (*proc, error) {
		p, err := startProc(name, filepath.Join(dir, name+".log"), env, placed(b.opts.serverCPUs, b.opts.nice, argv...)...)
		if err == nil {
			procs = append(procs, p)
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

	var redis, target *proc
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
		if c.redis {
			redisAddr, err := freeAddr()
			if err != nil {
				return res, err
			}
			_, port, _ := strings.Cut(redisAddr, ":")
			redis, err = start("redis", baseEnv, "redis-server", "--port", port, "--bind", "127.0.0.1",
				"--save", "", "--appendonly", "no", "--dir", dir)
			if err != nil {
				return res, err
			}
			if err := redistest.WaitPing(redisAddr, 10*time.Second); err != nil {
				return res, err
			}
			env = append(env, "REDIS_URL=redis://"+redisAddr)
		}
		if c.disk {
			env = append(env, "DATA_DIR="+filepath.Join(dir, "data"))
		}
		if c.async {
			env = append(env, "DELIVERY=async")
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
	before, err := usages(target, redis, up)
	if err != nil {
		return res, err
	}
	if res.Load, err = wrkRun(b.opts.conns, b.opts.duration); err != nil {
		return res, err
	}
	after, err := usages(target, redis, up)
	if err != nil {
		return res, err
	}
	res.ServerCPU = after[0].cpu - before[0].cpu
	res.RedisCPU = after[1].cpu - before[1].cpu
	if target != up {
		res.UpstreamCPU = after[2].cpu - before[2].cpu
	}
	if res.Single, err = wrkRun(1, b.opts.latencyDur); err != nil {
		return res, err
	}
	final, err := usages(target, nil, nil)
	if err != nil {
		return res, err
	}
	res.PeakRSS = final[0].peak
	if metricsURL != "" {
		res.Outcomes, err = outcomes(metricsURL)
	}
	return res, err
}

// slowAppDelay is how long the slow app takes per request.
const slowAppDelay = 200 * time.Millisecond

// usages reads each process's usage; a nil process reads as zero.
func usages(ps ...*proc) ([]usage, error) {
	out := make([]usage, len(ps))
	for i, p := range ps {
		if p == nil {
			continue
		}
		u, err := procUsage(p.pid())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
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
