package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/errgroup"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/delivery"
	"github.com/webhook-dedup/webhook-dedup/internal/server"
	"github.com/webhook-dedup/webhook-dedup/providers"
	"github.com/webhook-dedup/webhook-dedup/proxy"
	"github.com/webhook-dedup/webhook-dedup/upstream"
)

// store is what serving needs of a dedup store: the proxy's and the admin
// port's methods, and Close.
type store interface {
	proxy.Store
	admin.Store
	Close() error
}

// serve runs the proxy and the admin port until ctx is cancelled (SIGTERM),
// then drains as docs/operations.md's "Graceful shutdown" says.
func serve(ctx context.Context, environ map[string]string, stderr io.Writer) error {
	cfg, err := config.Load(environ)
	if err != nil {
		return usageError(fmt.Errorf("configuration:\n%w", err))
	}
	log, stopLog, err := newLogger(cfg, stderr)
	if err != nil {
		return usageError(err)
	}
	defer func() { _ = stopLog() }()
	for _, u := range config.UnknownVariables(environ) {
		log.Warn("unknown variable, ignored: is it misspelt?", zap.String("variable", u.Name), zap.String("did_you_mean", u.Suggestion))
	}
	// go-redis logs through a process-wide logger; route it through zap.
	redis.SetLogger(newRedisLogger(log))

	routes, err := buildRoutes(cfg, log)
	if err != nil {
		return usageError(fmt.Errorf("configuration:\n%w", err))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	st, err := openStore(cfg, log, reg)
	if err != nil {
		return usageError(err)
	}
	defer st.Close()

	buffered, how := bufferBudget(cfg.MaxBufferedBytes, cfg.MaxBodyBytes, os.DirFS("/"))
	log.Info("request bodies may take at most MAX_BUFFERED_BYTES at once", zap.Int64("max_buffered_bytes", buffered), zap.String("from", how))
	monitor, err := monitorRedis(ctx, cfg, st, log, reg)
	if err != nil {
		return err
	}
	var handler *proxy.Handler
	queue, workers := asyncDelivery(cfg, st, reg, log, func(r *http.Request) (string, time.Duration, string) {
		return handler.Settlement(r)
	})
	var enqueued func() // nil: proxy.New makes it a no-op
	if workers != nil {
		enqueued = workers.Nudge
	}
	handler, err = proxy.New(proxy.Config{
		Upstream:        cfg.Upstream,
		Routes:          routes,
		Store:           st,
		Queue:           queue,
		AsyncStatus:     cfg.AsyncStatus,
		Enqueued:        enqueued,
		KeyPrefix:       cfg.KeyPrefix,
		UpstreamTimeout: cfg.UpstreamTimeout,
		LeaseTTL:        cfg.LeaseTTL,
		MaxBodyBytes:    cfg.MaxBodyBytes,
		MaxBuffered:     buffered,
		OnStoreError:    cfg.OnStoreError,
		OnMissingID:     cfg.OnMissingID,
		BodyFingerprint: cfg.DedupBodyFingerprint,
		ReplayResponse:  cfg.ReplayResponse,
		ReplayMaxBytes:  cfg.ReplayMaxBytes,
		InflightWait:    cfg.InflightWait,
		InflightStatus:  cfg.InflightStatus,
		ShadowMode:      cfg.ShadowMode,
		Logger:          log,
		Metrics:         proxy.NewMetrics(reg),
	})
	if err != nil {
		return err
	}
	// queue is a nil interface without async routes, and so is DeadLetters.
	adminCfg := admin.Config{Store: st, Gatherer: reg, Token: cfg.AdminToken, DeadLetters: queue, KeyPrefix: cfg.KeyPrefix, Logger: log.Named("admin")}
	if cfg.ReadyCheckUpstream {
		adminCfg.Upstream = upstreamAnswers(cfg.Upstream)
	}
	adm := admin.New(adminCfg)

	// Requests are tracked so that, when draining runs out of time, the
	// handlers still running get to release their claims before exit.
	var active sync.WaitGroup
	tracked := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		active.Add(1)
		defer active.Done()
		handler.ServeHTTP(w, r)
	})
	publicLn, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("LISTEN_ADDR: %w", err)
	}
	if cfg.MaxConnections > 0 {
		publicLn = netutil.LimitListener(publicLn, cfg.MaxConnections)
	}
	privateLn, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		publicLn.Close()
		return fmt.Errorf("ADMIN_ADDR: %w", err)
	}
	log.Info("serving",
		zap.String("listen", publicLn.Addr().String()), zap.String("admin", privateLn.Addr().String()),
		zap.String("upstream", cfg.Upstream.Redacted()), zap.String("store", string(cfg.Store.Kind)),
		zap.Strings("routes", describeRoutes(cfg, routes)), zap.String("version", version))

	srv := &servers{
		public: server.Public(cfg, tracked, log), publicLn: publicLn,
		admin: server.Admin(cfg, adm, log), adminLn: privateLn,
		unready: adm.Drain, abandon: handler.Abandon, active: &active,
		delay: cfg.ShutdownDelay, timeout: cfg.ShutdownTimeout, log: log,
	}
	if monitor != nil {
		srv.background = monitor.Run
	}
	if workers != nil {
		srv.deliver = workers.Run
		if ch := notifications(st); ch != nil {
			// PostgreSQL: events queued by other replicas wake these
			// workers at once.
			srv.deliver = func(ctx context.Context) error {
				go nudgeOn(ctx, ch, workers.Nudge)
				return workers.Run(ctx)
			}
		}
	}
	if err := srv.run(ctx); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// servers are the public and admin servers of one process, and what
// draining them needs.
type servers struct {
	public, admin     *http.Server
	publicLn, adminLn net.Listener
	// unready turns /readyz to 503.
	unready func()
	// abandon makes the requests still in progress give up and release
	// their claims (proxy.Handler.Abandon); active counts those requests.
	abandon func()
	active  *sync.WaitGroup
	// delay is SHUTDOWN_DELAY, timeout SHUTDOWN_TIMEOUT.
	delay, timeout time.Duration
	log            *zap.Logger
	// background, if not nil, runs beside the servers until they stop
	// (the Redis monitor).
	background func(context.Context)
	// deliver, if not nil, runs the async routes' delivery workers until
	// its context ends (delivery.Workers.Run): at SIGTERM they stop taking
	// and finish their running attempts within SHUTDOWN_TIMEOUT, beside
	// the drain; the store closes after both.
	deliver func(context.Context) error
}

// run serves until ctx is cancelled (SIGTERM), then drains as
// docs/operations.md's "Graceful shutdown" says. If a server fails first, both are drained at once
// (without SHUTDOWN_DELAY) and its error is returned: the other must stop
// too, or Wait would wait for it forever.
func (s *servers) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	if s.background != nil {
		g.Go(func() error { s.background(gctx); return nil })
	}
	if s.deliver != nil {
		g.Go(func() error { return s.deliver(gctx) })
	}
	g.Go(func() error { return serveUntilClosed(s.public, s.publicLn) })
	g.Go(func() error { return serveUntilClosed(s.admin, s.adminLn) })
	g.Go(func() error {
		<-gctx.Done()
		delay := s.delay
		if ctx.Err() == nil {
			s.log.Error("a server failed: shutting down")
			delay = 0
		} else {
			s.log.Info("shutting down", zap.Duration("delay", s.delay), zap.Duration("timeout", s.timeout))
		}
		s.drain(delay)
		return nil
	})
	return g.Wait()
}

// drain stops both servers: readiness turns 503 at once, the public server
// keeps serving for delay (while load balancers remove the endpoint), then
// lets its requests finish for at most the shutdown timeout, after which
// it abandons them (their claims are released) and closes.
func (s *servers) drain(delay time.Duration) {
	s.unready()
	if delay > 0 {
		t := time.NewTimer(delay)
		<-t.C
	}
	drainCtx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if err := s.public.Shutdown(drainCtx); err != nil {
		s.log.Warn("drain timed out: abandoning requests still in progress and releasing their claims", zap.Error(err))
		s.abandon()
		waitTimeout(s.active, 10*time.Second)
		s.public.Close()
	}
	closeCtx, cancelClose := context.WithTimeout(context.Background(), time.Second)
	defer cancelClose()
	_ = s.admin.Shutdown(closeCtx)
}

func serveUntilClosed(s *http.Server, ln net.Listener) error {
	if err := s.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// buildRoutes parses every route's source and warns about secrets that no
// route can use.
func buildRoutes(cfg *config.Config, log *zap.Logger) ([]proxy.Route, error) {
	var routes []proxy.Route
	var errs []error
	used := map[string]bool{}
	for _, spec := range cfg.RouteSpecs {
		src, err := providers.ParseSource(spec.Path, spec.Source, cfg.ProviderOptions())
		if err != nil {
			errs = append(errs, fmt.Errorf("ROUTES: %s=%s: %w", spec.Path, spec.Source, err))
			continue
		}
		for _, name := range src.PresetNames() {
			used[name] = true
		}
		routes = append(routes, proxy.Route{Path: spec.Path, Source: src, Delivery: spec.Delivery})
	}
	for _, p := range providers.Presets() {
		if len(cfg.Secrets[p.Name]) > 0 && !used[p.Name] {
			log.Warn("a secret is set for a preset that no route uses", zap.String("variable", p.SecretVar))
		}
	}
	return routes, errors.Join(errs...)
}

// upstreamAnswers is READY_CHECK_UPSTREAM's check: the app answers an HTTP
// request at its base URL. Any answer counts, a 404 too: the question is
// whether the app is up, not whether it serves that path.
func upstreamAnswers(app *url.URL) func(ctx context.Context) error {
	client := &http.Client{
		Transport: upstream.NewTransport(),
		// A redirect is an answer.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, app.String(), nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return resp.Body.Close()
	}
}

// describeRoutes says, a line per route, what the start-up log shows of
// it: its path and source, and which of its presets verify signatures.
func describeRoutes(cfg *config.Config, routes []proxy.Route) []string {
	out := make([]string, len(routes))
	for i, r := range routes {
		var verified []string
		for _, name := range r.Source.PresetNames() {
			if len(cfg.Secrets[name]) > 0 {
				verified = append(verified, name)
			}
		}
		line := r.Path + "=" + cfg.RouteSpecs[i].Source
		if len(verified) > 0 {
			line += " (signatures verified: " + strings.Join(verified, ", ") + ")"
		} else {
			line += " (signatures not verified)"
		}
		out[i] = line
	}
	return out
}

// monitorRedis checks a Redis store once before serving, and returns the
// monitor that keeps checking it (nil for another store). A KEY_PREFIX
// that another APP_NAME owns stops the start (exit status 2); a Redis not
// reachable yet does not: the store refuses claims until the owner check
// passes.
func monitorRedis(ctx context.Context, cfg *config.Config, st store, log *zap.Logger, reg prometheus.Registerer) (*dedup.Monitor, error) {
	rs, ok := behindCache(st).(*dedup.Redis)
	if !ok {
		return nil, nil
	}
	m := dedup.NewMonitor(rs, dedup.MonitorConfig{KeyPrefix: cfg.KeyPrefix, Interval: cfg.RedisCheckInterval, Logger: log.Named("redis"), Registerer: reg})
	err := m.Check(ctx)
	switch {
	case errors.Is(err, dedup.ErrPrefixOwned):
		return nil, usageError(fmt.Errorf("APP_NAME: %w: set KEY_PREFIX to a prefix of this app's own (e.g. KEY_PREFIX=webhook-dedup:%s:), as two apps sharing one would answer each other's events as duplicates", err, cfg.AppName))
	case err != nil:
		log.Warn("redis not checked at start; checking again every REDIS_CHECK_INTERVAL", zap.Error(err))
	}
	return m, nil
}

// asyncDelivery sets up the background delivery of async routes: the
// store's queue, the workers and their metrics. Without async routes it
// returns nils.
func asyncDelivery(cfg *config.Config, st store, reg prometheus.Registerer, log *zap.Logger,
	settlement func(*http.Request) (string, time.Duration, string)) (dedup.Queue, *delivery.Workers) {
	if !cfg.AsyncRoutes() {
		return nil, nil
	}
	// config.checkAsyncStore lets only stores that keep a queue through.
	queue := st.(dedup.Queue)
	dlog := log.Named("delivery")
	workers := delivery.New(delivery.Config{
		Queue:           queue,
		Upstream:        cfg.Upstream,
		Transport:       upstream.NewTransport(),
		Settlement:      settlement,
		ReplayResponse:  cfg.ReplayResponse,
		ReplayMaxBytes:  cfg.ReplayMaxBytes,
		BodyFingerprint: cfg.DedupBodyFingerprint,
		KeyPrefix:       cfg.KeyPrefix,
		DefaultTTL:      cfg.DedupTTL,
		Concurrency:     cfg.DeliveryConcurrency,
		UpstreamTimeout: cfg.UpstreamTimeout,
		Lease:           cfg.LeaseTTL,
		InitialInterval: cfg.RetryInitialInterval,
		MaxInterval:     cfg.RetryMaxInterval,
		MaxAttempts:     cfg.RetryMaxAttempts,
		MaxAge:          cfg.RetryMaxAge,
		DeadLetterTTL:   cfg.DeadLetterTTL,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Logger:          dlog,
		Metrics:         delivery.NewMetrics(reg, queue, dlog),
	})
	log.Info("async delivery", zap.Strings("routes", cfg.AsyncPaths()), zap.Int("concurrency", cfg.DeliveryConcurrency),
		zap.Int("max_attempts", cfg.RetryMaxAttempts), zap.Duration("max_age", cfg.RetryMaxAge))
	if dc, ok := behindCache(st).(durabilityChecker); ok {
		logDurability(dc, log)
	}
	return queue, workers
}

// durabilityChecker is a store that can say whether its configuration
// keeps what the async queue accepted (dedup.Redis).
type durabilityChecker interface {
	CheckDurability(ctx context.Context) (dedup.Durability, error)
}

// durabilityTimeout bounds the start-up check of Redis's persistence.
const durabilityTimeout = 5 * time.Second

// logDurability logs, once at start, whether Redis keeps the events async
// routes answer 202: at error level when its settings lose them (the proxy
// keeps running: the operator decides), at warn when they cannot be read.
func logDurability(dc durabilityChecker, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), durabilityTimeout)
	defer cancel()
	d, err := dc.CheckDurability(ctx)
	switch {
	case err != nil:
		log.Warn("could not check whether Redis keeps accepted async events (appendonly, maxmemory-policy)", zap.Error(err))
	case !d.Readable:
		log.Warn("async delivery on Redis: "+d.String(), zap.String("reason", d.Unread))
	case !d.OK():
		log.Error("async delivery on Redis may lose events already answered 202: "+d.String(),
			zap.String("appendonly", d.AppendOnly), zap.String("appendfsync", d.AppendFsync), zap.String("maxmemory_policy", d.MaxmemoryPolicy))
	default:
		log.Info("async delivery on Redis: "+d.String(),
			zap.String("appendonly", d.AppendOnly), zap.String("appendfsync", d.AppendFsync), zap.String("maxmemory_policy", d.MaxmemoryPolicy))
	}
}

// openStore opens the store config chose (config.Store), with the cache
// in front when CACHE_SIZE says so: the one place that turns that choice
// into a running store. Its metrics go to reg.
func openStore(cfg *config.Config, log *zap.Logger, reg prometheus.Registerer) (store, error) {
	st, err := openChosenStore(cfg, log, reg)
	if err != nil {
		return nil, err
	}
	return withCache(cfg, st, log, reg), nil
}

func openChosenStore(cfg *config.Config, log *zap.Logger, reg prometheus.Registerer) (store, error) {
	switch cfg.Store.Kind {
	case config.StoreRedis:
		return openRedis(cfg, log)
	case config.StoreDynamoDB:
		return openDynamoDB(cfg, log)
	case config.StorePostgres:
		return openPostgres(cfg, log, reg)
	case config.StoreDisk:
		st, err := dedup.OpenDisk(cfg.DataDir)
		if err != nil {
			return nil, fmt.Errorf("DATA_DIR: %w", err)
		}
		log.Info("store: embedded, on disk", zap.String("file", filepath.Join(cfg.DataDir, dedup.DiskFile)))
		return st, nil
	default:
		log.Warn("no store configured (DATA_DIR, REDIS_URL, REDIS_CLUSTER_ADDRS, REDIS_SENTINEL_ADDRS, DYNAMODB_TABLE or DATABASE_URL): using the embedded in-memory store, which only deduplicates within this one process; run one replica only, and expect duplicates after a restart")
		return dedup.NewMemory(), nil
	}
}

// openRedis connects to Redis in the mode config chose, handing dedup only
// that mode's addresses.
func openRedis(cfg *config.Config, log *zap.Logger) (store, error) {
	rc := dedup.RedisConfig{
		Username:     cfg.RedisUsername,
		Password:     cfg.RedisPassword,
		PoolSize:     cfg.RedisPoolSize,
		DialTimeout:  cfg.RedisDialTimeout,
		Timeout:      cfg.RedisTimeout,
		WaitReplicas: cfg.RedisWaitReplicas,
		WaitTimeout:  cfg.RedisWaitTimeout,
		AppName:      cfg.AppName,
		KeyPrefix:    cfg.KeyPrefix,
		Logger:       log.Named("store"),
	}
	switch cfg.Store.RedisMode {
	case config.RedisStandalone:
		rc.URL = cfg.RedisURL
	case config.RedisCluster:
		rc.ClusterAddrs = cfg.RedisClusterAddrs
	case config.RedisSentinel:
		rc.SentinelAddrs, rc.SentinelMaster = cfg.RedisSentinelAddrs, cfg.RedisSentinelMaster
		rc.SentinelUsername, rc.SentinelPassword = cfg.RedisSentinelUsername, cfg.RedisSentinelPassword
	}
	if cfg.RedisTLS || strings.HasPrefix(rc.URL, "rediss://") {
		rc.TLS = &dedup.RedisTLS{
			CAFile:     cfg.RedisTLSCAFile,
			CertFile:   cfg.RedisTLSCertFile,
			KeyFile:    cfg.RedisTLSKeyFile,
			ServerName: cfg.RedisTLSServerName,
		}
	}
	st, err := dedup.OpenRedis(rc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Store.Variable, err)
	}
	log.Info("store: redis", zap.String("mode", string(cfg.Store.RedisMode)), zap.Bool("tls", rc.TLS != nil),
		zap.Int("wait_replicas", rc.WaitReplicas), zap.Duration("timeout", rc.Timeout))
	if cfg.Store.RedisMode != config.RedisStandalone && rc.WaitReplicas == 0 {
		log.Info("REDIS_WAIT_REPLICAS is 0: a failover may lose the last records the master acknowledged, and let a duplicate through")
	}
	return st, nil
}
