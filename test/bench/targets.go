package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/pgtest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

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
	stripe := "/stripe=stripe"
	if c.ordered {
		stripe += ";" + orderOption
	}
	env := append(baseEnv,
		"UPSTREAM_URL=http://"+upAddr,
		"ROUTES="+stripe+",/github=github",
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
