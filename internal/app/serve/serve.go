// Package serve is the composition root of the proxy: it wires the
// configuration, the store, the proxy, the delivery workers and the admin
// port together, serves until told to stop, and drains.
package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/delivery"
	"github.com/webhook-dedup/webhook-dedup/internal/app/stores"
	"github.com/webhook-dedup/webhook-dedup/internal/intake"
	"github.com/webhook-dedup/webhook-dedup/internal/memlimit"
	"github.com/webhook-dedup/webhook-dedup/internal/server"
	"github.com/webhook-dedup/webhook-dedup/internal/tracing"
	"github.com/webhook-dedup/webhook-dedup/providers"
	"github.com/webhook-dedup/webhook-dedup/proxy"
	"github.com/webhook-dedup/webhook-dedup/upstream"
)

// Build is what the binary says about itself, stamped at build time.
type Build struct{ Version, Commit string }

// Run runs the proxy and the admin port until ctx is cancelled (SIGTERM),
// then drains as docs/operations.md's "Graceful shutdown" says. A problem
// with the configuration is a *config.Error.
func Run(ctx context.Context, environ map[string]string, stderr io.Writer, build Build) error {
	start, err := prepare(environ)
	if err != nil {
		return err
	}
	cfg, routes := start.cfg, start.routes
	log, stopLog, err := newLogger(cfg, stderr)
	if err != nil {
		return &config.Error{Err: err}
	}
	defer func() { _ = stopLog() }()
	for _, w := range start.warnings {
		fields := []zap.Field{zap.String("variable", w.Variable)}
		if w.Suggestion != "" {
			fields = append(fields, zap.String("did_you_mean", w.Suggestion))
		}
		log.Warn(w.Message, fields...)
	}

	// Before anything of size is allocated: the soft limit is in force
	// from the start.
	mem := memlimit.Derive(memlimit.Settings{MaxBuffered: cfg.MaxBufferedBytes, MaxBody: cfg.MaxBodyBytes, GoMemLimit: environ["GOMEMLIMIT"]}, os.DirFS("/"))
	if mem.SoftLimit > 0 {
		// Given back when Run returns: the limit is the process's, and Run
		// may run in a process that outlives it (the tests).
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(mem.SoftLimit))
	}
	log.Info("request bodies may take at most MAX_BUFFERED_BYTES at once", zap.Int64("max_buffered_bytes", mem.Buffered), zap.String("from", mem.BufferedFrom))
	log.Info("soft memory limit: the Go runtime collects garbage harder as its memory nears it", zap.Int64("soft_limit", debug.SetMemoryLimit(-1)), zap.String("from", mem.SoftLimitFrom))

	tp, stopTracing, err := setupTracing(ctx, environ, build.Version, log.Named("tracing"))
	if err != nil {
		return &config.Error{Err: fmt.Errorf("configuration:\n%w", err)}
	}
	defer stopTracing() // last: the spans of the drain are flushed too
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	backend, err := stores.Open(ctx, cfg, stores.Env{Log: log, Registerer: reg, Serving: true})
	if err != nil {
		return err
	}
	// Closed on the way out until the servers take it over, to close it
	// within the shutdown's deadline.
	closeStore := backend.Close
	defer func() {
		if closeStore != nil {
			_ = closeStore()
		}
	}()
	if tp != nil {
		backend = tracing.Backend(backend, tp, string(cfg.Store.Kind))
		log.Info("tracing on: spans exported as the standard OTEL_* variables say")
	}
	st := backend.Store

	// As many enqueues at once as delivery attempts, and up to four times
	// as many while delivery keeps more than its share of a saturating
	// intake (SPEC, Backpressure: accepting webhooks never starves the
	// workers; docs/delivery.md, "Intake and delivery share the machine").
	enqueues := intake.New(cfg.DeliveryConcurrency, 4*cfg.DeliveryConcurrency)
	// One budget for every body held in memory: the requests' being read,
	// and the async deliveries' the workers hold.
	proxyMetrics := proxy.NewMetrics(reg)
	bodies := proxy.NewBodyBudget(mem.Buffered, proxyMetrics)
	queue, workers, backlog := asyncDelivery(ctx, cfg, backend, routes, reg, log, tp, enqueues.Delivered, bodies)
	var enqueued func(string) // nil: proxy.New makes it a no-op
	if workers != nil {
		enqueued = workers.NudgeRoute
	}
	handler, err := proxy.New(proxy.Config{
		Upstream:        cfg.Upstream,
		Routes:          routes,
		Store:           st,
		Queue:           queue,
		AsyncStatus:     cfg.AsyncStatus,
		Enqueued:        enqueued,
		QueueMaxDepth:   cfg.QueueMaxDepth,
		Enqueues:        enqueues,
		KeyPrefix:       cfg.KeyPrefix,
		UpstreamTimeout: cfg.UpstreamTimeout,
		LeaseTTL:        cfg.LeaseTTL,
		MaxBodyBytes:    cfg.MaxBodyBytes,
		Bodies:          bodies,
		OnStoreError:    cfg.OnStoreError,
		OnMissingID:     cfg.OnMissingID,
		BodyFingerprint: cfg.DedupBodyFingerprint,
		ReplayResponse:  cfg.ReplayResponse,
		ReplayMaxBytes:  cfg.ReplayMaxBytes,
		InflightWait:    cfg.InflightWait,
		InflightStatus:  cfg.InflightStatus,
		ShadowMode:      cfg.ShadowMode,
		TracerProvider:  tp,
		Logger:          log,
		Metrics:         proxyMetrics,
	})
	if err != nil {
		return err
	}
	adminCfg := admin.Config{Store: st, Gatherer: reg, Token: cfg.AdminToken, KeyPrefix: cfg.KeyPrefix, Logger: log.Named("admin")}
	if queue != nil {
		adminCfg.DeadLetters = queue
	}
	if backend.Queue != nil {
		adminCfg.Events = backend.Queue
	}
	if cfg.ReadyCheckUpstream {
		adminCfg.Upstream = upstreamAnswers(cfg.Upstream)
	}
	adm := admin.New(adminCfg)
	ui := operatorConsole(cfg, routes, st, queue, backlog, reg, log.Named("console"))
	adm.MountConsole(ui)

	// Requests are tracked so that, when draining runs out of time, the
	// handlers still running get to release their claims before exit.
	requests := &inflight{}
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
		zap.Strings("routes", describeRoutes(cfg, routes)), zap.String("version", build.Version))

	srv := &servers{
		public: server.Public(cfg, requests.track(handler), log), publicLn: publicLn,
		admin: server.Admin(cfg, adm, log), adminLn: privateLn,
		unready: adm.Drain, abandon: handler.Abandon, requests: requests,
		delay: cfg.ShutdownDelay, timeout: cfg.ShutdownTimeout, log: log,
		closeStore: backend.Close,
	}
	closeStore = nil
	// The console reads the counters once a minute, for its overview's
	// last minutes.
	srv.background = append(backend.Jobs[:len(backend.Jobs):len(backend.Jobs)], ui.Run)
	if backlog != nil {
		srv.background = append(srv.background[:len(srv.background):len(srv.background)], backlog.Run)
	}
	if workers != nil {
		srv.background = append(srv.background, enqueues.Run)
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "webhook_dedup_enqueue_turns",
			Help: "Enqueues of async routes let through at once: DELIVERY_CONCURRENCY, up to four times as many while delivery keeps more than its share of a saturating intake.",
		}, func() float64 { return float64(enqueues.Width()) }))
		srv.deliver, srv.settle = workers.Run, workers.Drain
		if backend.Wake != nil {
			// Events queued by other replicas wake these workers at once.
			ch := backend.Wake()
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

// startup is what Run works out from the environment alone, before it
// binds a port or opens the store.
type startup struct {
	cfg    *config.Config
	routes []proxy.Route
	// warnings are logged at warn once the logger runs.
	warnings []config.Warning
}

// prepare validates environ as Run needs it: the configuration with the
// checks against the chosen store (stores.Load), LOG_LEVEL as the logger
// reads it, and every route's source. stores.Load lists every problem at
// once, one line each; the logger and the routes are then built from what
// it has already checked, so they fail only if the two disagree. It has no
// side effect beyond config.Load's (DATA_DIR is created if missing, to
// tell whether it can be written). A problem is a *config.Error.
func prepare(environ map[string]string) (*startup, error) {
	cfg, err := stores.Load(environ)
	if err != nil {
		return nil, fmt.Errorf("configuration:\n%w", err)
	}
	if _, err := logLevel(cfg); err != nil {
		return nil, &config.Error{Err: err}
	}
	routes, unused, err := buildRoutes(cfg)
	if err != nil {
		return nil, &config.Error{Err: fmt.Errorf("configuration:\n%w", err)}
	}
	return &startup{cfg: cfg, routes: routes, warnings: append(config.Warnings(environ), unused...)}, nil
}

// Check validates the configuration in environ exactly as Run does before
// it binds a port or opens the store (`webhook-dedup check`), and returns
// it with the warnings Run would log at start. It listens on nothing and
// does not reach the store: what only the store can refuse (a KEY_PREFIX
// another APP_NAME owns, a wrong password) shows when serving. A problem
// is a *config.Error that joins every one found, each naming its variable.
func Check(environ map[string]string) (*config.Config, []config.Warning, error) {
	start, err := prepare(environ)
	if err != nil {
		return nil, nil, err
	}
	return start.cfg, start.warnings, nil
}

// buildRoutes parses every route's source, and returns a warning for each
// secret that no route can use and each async route left unverified.
func buildRoutes(cfg *config.Config) ([]proxy.Route, []config.Warning, error) {
	var routes []proxy.Route
	var warnings []config.Warning
	var errs []error
	used := map[string]bool{}
	for _, spec := range cfg.RouteSpecs {
		src, err := providers.ParseSource(spec.Path, spec.Source, cfg.SourceOptions(spec))
		if err != nil {
			errs = append(errs, fmt.Errorf("ROUTES: %s=%s: %w", spec.Path, spec.Source, err))
			continue
		}
		if w, ok := unverifiedAsync(spec, src); ok {
			warnings = append(warnings, w)
		}
		for _, name := range src.PresetNames() {
			used[name] = true
		}
		routes = append(routes, proxy.Route{Path: spec.Path, Source: src, Delivery: spec.Delivery,
			Order: spec.Order, OrderBlock: cfg.OrderOnFailure == config.OrderBlock})
	}
	for _, p := range providers.Presets() {
		if len(cfg.Secrets[p.Name]) > 0 && !used[p.Name] {
			warnings = append(warnings, config.Warning{Variable: p.SecretVar, Message: "a secret is set for a preset that no route uses"})
		}
	}
	return routes, warnings, errors.Join(errs...)
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

// asyncDelivery sets up the background delivery of the store's queue: the
// workers and their metrics, traced by tp unless it is nil. It does when a
// route is async, and also when none is but the store still holds events
// that async routes queued (a route rolled back from async to sync): they
// were answered 202, so they are delivered, never stranded. Otherwise it
// returns nils. The Backlog keeps the queue's stats, for /metrics (and
// PostgreSQL's reckoning of the depth); it is to be run. The workers
// charge the bodies they hold to bodies.
func asyncDelivery(ctx context.Context, cfg *config.Config, backend dedup.Backend, routes []proxy.Route, reg prometheus.Registerer, log *zap.Logger, tp trace.TracerProvider, attempted func(), bodies delivery.BodyBudget) (dedup.Queue, *delivery.Workers, *delivery.Backlog) {
	// stores.Check lets async routes through only on a store that keeps a
	// queue.
	if backend.Queue == nil || (!cfg.AsyncRoutes() && !stillQueued(ctx, cfg, backend.Queue, log)) {
		return nil, nil, nil
	}
	queue := backend.Queue
	dlog := log.Named("delivery")
	backlog := delivery.NewBacklog(queue, dlog)
	var resign func(route, namespace string) delivery.Resigner // nil: RESIGN=off
	if cfg.Resign == config.ResignAuto {
		resign = resigners(routes)
	}
	workers := delivery.New(delivery.Config{
		Queue:           queue,
		Upstream:        cfg.Upstream,
		Transport:       upstream.NewTransport(),
		ReplayResponse:  cfg.ReplayResponse,
		ReplayMaxBytes:  cfg.ReplayMaxBytes,
		BodyFingerprint: cfg.DedupBodyFingerprint,
		Bodies:          backend.Store,
		KeyPrefix:       cfg.KeyPrefix,
		DefaultTTL:      cfg.DedupTTL,
		Routes:          cfg.AsyncPaths(),
		Spacing:         spacing(cfg.RouteSpecs),
		Concurrency:     cfg.DeliveryConcurrency,
		HeldBodies:      bodies,
		MaxBody:         cfg.MaxBodyBytes,
		UpstreamTimeout: cfg.UpstreamTimeout,
		StoreTimeout:    cfg.StoreTimeout,
		Lease:           cfg.LeaseTTL,
		InitialInterval: cfg.RetryInitialInterval,
		MaxInterval:     cfg.RetryMaxInterval,
		MaxAttempts:     cfg.RetryMaxAttempts,
		MaxAge:          cfg.RetryMaxAge,
		DeadLetterTTL:   cfg.DeadLetterTTL,
		Resigners:       resign,
		TracerProvider:  tp,
		Logger:          dlog,
		Metrics:         delivery.NewMetrics(reg, backlog, dlog),
		Attempted:       attempted,
	})
	// What the retries of an event failing every attempt come to, with
	// full jitter: RETRY_MAX_AGE alone says it without a cap on attempts.
	longest, average := delivery.Schedule(cfg.RetryInitialInterval, cfg.RetryMaxInterval, cfg.RetryMaxAge, cfg.RetryMaxAttempts)
	log.Info("async delivery", zap.Strings("routes", cfg.AsyncPaths()), zap.Int("concurrency", cfg.DeliveryConcurrency),
		zap.Int("queue_max_depth", cfg.QueueMaxDepth), zap.Int("max_attempts", cfg.RetryMaxAttempts), zap.Stringer("max_age", cfg.RetryMaxAge),
		zap.Stringer("dead_letter_after_at_most", longest.Round(time.Second)), zap.Stringer("dead_letter_after_on_average", average.Round(time.Second)))
	return queue, workers, backlog
}

// spacing is the least time between two attempts' starts of each route
// with a rate= (delivery.Config.Spacing); nil when none has.
func spacing(specs []config.RouteSpec) map[string]time.Duration {
	var m map[string]time.Duration
	for _, r := range specs {
		if d := r.Rate.Interval(); d > 0 {
			if m == nil {
				m = map[string]time.Duration{}
			}
			m[r.Path] = d
		}
	}
	return m
}

// stillQueued reports whether a queue that no async route feeds any more
// holds events to deliver, saying so in the log. A queue it cannot read
// is logged, and left to a proxy with an async route.
func stillQueued(ctx context.Context, cfg *config.Config, q dedup.Operator, log *zap.Logger) bool {
	ctx, cancel := context.WithTimeout(ctx, cfg.StoreTimeout)
	defer cancel()
	st, err := q.Stats(ctx)
	switch {
	case err != nil:
		log.Warn("could not tell whether the store holds events queued by async routes: no route is async, so none is delivered by this proxy", zap.Error(err))
		return false
	case st.Depth == 0 && st.OldestAge == 0:
		return false
	}
	log.Warn("no route is async, but the store holds events async routes queued: delivering them (a route rolled back from async to sync; its senders' retries are answered 409 until their event is delivered)",
		zap.Int("queued", st.Depth), zap.Duration("oldest_age", st.OldestAge))
	return true
}

// nudgeOn calls nudge for each signal on ch until ctx ends: the delivery
// workers look for an event another replica queued now, rather than at
// their next poll.
func nudgeOn(ctx context.Context, ch <-chan struct{}, nudge func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			nudge()
		}
	}
}
