// Package proxy forwards each webhook event to the upstream once: it finds
// the event ID, claims it in a store, forwards first-seen events and answers
// duplicates itself.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/internal/tracing"
	"github.com/webhook-dedup/webhook-dedup/policy"
	"github.com/webhook-dedup/webhook-dedup/upstream"
)

// Store is what the proxy needs of a dedup store (redisstore.Store, memstore.Store).
// Each call must return within a bounded time whatever its context
// (redisstore.Store bounds every command by its Timeout): the proxy claims on a
// context that the sender hanging up does not cancel.
type Store interface {
	Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error)
	Complete(ctx context.Context, c dedup.Claim, res dedup.Result, ttl time.Duration) error
	Release(ctx context.Context, c dedup.Claim) error
	Lookup(ctx context.Context, key string) (dedup.Record, error)
}

// Queue is what an async route needs of a store: claim the event and keep
// its request for background delivery, in one step (dedup.Queue).
type Queue interface {
	Enqueue(ctx context.Context, key string, req dedup.Request, maxDepth int) (bool, dedup.Record, error)
}

// Config configures a Handler. Zero values are documented per field.
type Config struct {
	// Upstream is the app's base URL. Required.
	Upstream *url.URL
	// Routes are the dedup routes. Requests on no route pass through.
	Routes []Route
	// Store keeps the claims. Required.
	Store Store
	// Queue keeps the webhooks of async routes. Required when a route is
	// async; the Store and the Queue are then the same store.
	Queue Queue
	// AsyncStatus is the answer to a webhook queued for background
	// delivery. If zero, 202.
	AsyncStatus int
	// Enqueues bounds the enqueues of async routes at once (intake.Gate);
	// beyond it a webhook waits its turn (until its sender hangs up), so
	// that the delivery workers keep their share of the CPU and the store:
	// left unbounded, 200 senders at once took 95% of both, and delivery
	// fell to 5% of intake. If nil, no bound.
	Enqueues Gate
	// QueueMaxDepth bounds the events waiting for delivery
	// (QUEUE_MAX_DEPTH): the store checks it as it enqueues
	// (dedup.Producer), and a first-seen webhook of an async route it
	// refuses is answered 503 queue-full with Retry-After, nothing queued
	// (a duplicate is still answered as one). If zero, no bound.
	QueueMaxDepth int
	// Enqueued is called after a webhook was queued, with the path of
	// the route it came in on (dedup.Request.Route), so that this
	// process's delivery workers of that route take it at once rather
	// than at their next poll. If nil, nothing is called.
	Enqueued func(route string)
	// KeyPrefix starts every store key.
	KeyPrefix string
	// UpstreamTimeout bounds each forwarded request. If zero, 30s.
	UpstreamTimeout time.Duration
	// LeaseTTL is the lifetime of a claim. If zero,
	// policy.DefaultLease(UpstreamTimeout).
	LeaseTTL time.Duration
	// MaxBodyBytes bounds a body the proxy must hold. If zero, 10 MiB.
	MaxBodyBytes int64
	// Bodies bounds the memory the bodies of all requests take at once on
	// routes that read them (NewBodyBudget, MAX_BUFFERED_BYTES); beyond it
	// such a request is answered 503 with Retry-After. Async delivery
	// charges the bodies it holds to the same budget. If nil, no bound.
	Bodies *BodyBudget
	// OnStoreError is what a webhook gets while the store is unreachable.
	// If zero, RejectOnStoreError.
	OnStoreError policy.StoreErrorPolicy
	// OnMissingID is what a webhook without an event ID gets. If zero,
	// ForwardMissingID.
	OnMissingID policy.MissingIDPolicy
	// BodyFingerprint also treats a body already completed as a duplicate.
	BodyFingerprint bool
	// ReplayResponse answers duplicates with the original response.
	ReplayResponse bool
	// ReplayMaxBytes is the largest response body kept for replay; a
	// larger one is not kept, and its duplicates get the plain duplicate
	// answer. If zero, no body is kept: only answers with an empty body
	// are replayed.
	ReplayMaxBytes int
	// InflightWait is how long a duplicate of an in-flight event waits for
	// the first to finish. If zero, it is answered at once.
	InflightWait time.Duration
	// InflightStatus answers an unresolved in-flight duplicate unless the
	// preset chooses. If zero, 409.
	InflightStatus int
	// ShadowMode forwards duplicates too, marking them shadow-duplicate.
	ShadowMode bool
	// Transport reaches the upstream. If nil, a clone of
	// http.DefaultTransport sized for a sidecar.
	Transport http.RoundTripper
	// TracerProvider traces each webhook: a server span, continuing the
	// sender's trace (Propagator), with the upstream request as its child
	// (the Transport is wrapped by tracing.Transport, which carries the
	// trace on to the app) and the Store's and Queue's calls too when they
	// are traced (tracing.Backend). If nil, nothing is traced and no
	// header is read or written for it: tracing off costs nothing.
	TracerProvider trace.TracerProvider
	// Propagator reads the sender's trace context from its request and
	// writes the upstream span's into the app's. If nil, W3C trace
	// context (traceparent, tracestate). Unused without TracerProvider.
	Propagator propagation.TextMapPropagator
	// Logger logs one line per webhook. If nil, nothing is logged.
	Logger *zap.Logger
	// Metrics are updated per request. Required.
	Metrics *Metrics
	// Now is the clock used for signature timestamps. If nil, time.Now.
	Now func() time.Time
}

// Handler is the proxy. It is safe for concurrent use.
type Handler struct {
	cfg     Config
	routes  routeTable
	reverse *httputil.ReverseProxy
	leases  *leases
	// completion is what a 2xx leaves in the event's record.
	completion upstream.Completion
	// completing holds the events answered 2xx whose records are being
	// completed.
	completing completing
	log        *zap.Logger
	m          *Metrics
	pool       bufferPool
	// bodies are the buffers of the bodies read, charged to budget.
	bodies bodyPool
	budget *BodyBudget
	// copyBuffers relay the upstream's answers; without them
	// ReverseProxy allocates 32 KiB per request.
	copyBuffers upstream.BufferPool
	logFields   fieldPool
	// abandon is cancelled by Abandon to stop waits and upstream requests.
	abandon context.Context
	stop    context.CancelFunc
	// tracer makes the webhooks' spans; nil when tracing is off.
	tracer trace.Tracer
	// refusing is set from the first webhook refused queue-full until one
	// is queued again, so that the log says when each spell begins and
	// ends, not each refusal.
	refusing atomic.Bool
	// largeTurn is held by the enqueue of a large body (accept).
	largeTurn chan struct{}
}

// ErrConfig is returned by New for a Config it cannot run with.
var ErrConfig = errors.New("proxy: invalid configuration")

// New returns a Handler for cfg, or an error wrapping ErrConfig when a
// required field is missing.
func New(cfg Config) (*Handler, error) {
	var missing []error
	if cfg.Upstream == nil {
		missing = append(missing, fmt.Errorf("%w: Upstream is nil", ErrConfig))
	}
	if cfg.Store == nil {
		missing = append(missing, fmt.Errorf("%w: Store is nil", ErrConfig))
	}
	if cfg.Metrics == nil {
		missing = append(missing, fmt.Errorf("%w: Metrics is nil", ErrConfig))
	}
	for _, rt := range cfg.Routes {
		if rt.Delivery == policy.AsyncDelivery && cfg.Queue == nil {
			missing = append(missing, fmt.Errorf("%w: Queue is nil, and route %s is async", ErrConfig, rt.Path))
			break
		}
	}
	if err := errors.Join(missing...); err != nil {
		return nil, err
	}
	if cfg.UpstreamTimeout == 0 {
		cfg.UpstreamTimeout = upstream.DefaultTimeout
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = policy.DefaultLease(cfg.UpstreamTimeout)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 10 << 20
	}
	if cfg.InflightStatus == 0 {
		cfg.InflightStatus = http.StatusConflict
	}
	if cfg.AsyncStatus == 0 {
		cfg.AsyncStatus = http.StatusAccepted
	}
	if cfg.Enqueued == nil {
		cfg.Enqueued = func(string) {}
	}
	if cfg.Transport == nil {
		cfg.Transport = upstream.NewTransport()
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &Handler{
		cfg:    cfg,
		routes: newRouteTable(cfg.Routes),
		leases: &leases{store: cfg.Store, lease: cfg.LeaseTTL, m: cfg.Metrics},
		completion: upstream.Completion{
			ReplayResponse:  cfg.ReplayResponse,
			ReplayMaxBytes:  cfg.ReplayMaxBytes,
			BodyFingerprint: cfg.BodyFingerprint,
		},
		log:       cfg.Logger,
		m:         cfg.Metrics,
		largeTurn: make(chan struct{}, 1),
	}
	if cfg.Enqueues == nil {
		h.cfg.Enqueues = unbounded{}
	}
	h.budget = cfg.Bodies
	if h.budget == nil {
		h.budget = NewBodyBudget(0, cfg.Metrics)
	}
	h.abandon, h.stop = context.WithCancel(context.Background())
	if cfg.TracerProvider != nil {
		if cfg.Propagator == nil {
			h.cfg.Propagator = propagation.TraceContext{}
		}
		h.tracer = cfg.TracerProvider.Tracer(tracing.Scope)
		h.cfg.Transport = tracing.Transport(cfg.Transport, cfg.TracerProvider, h.cfg.Propagator)
	}
	h.reverse = h.newReverseProxy(cfg.Upstream)
	return h, nil
}

// Abandon makes requests still in progress give up: waits end and upstream
// requests are cancelled, so their claims are released. Shutdown calls it
// when draining runs out of time.
func (h *Handler) Abandon() { h.stop() }

// ServeHTTP routes a request: POSTs on a dedup route whose source recognises
// them are deduplicated; everything else passes through untouched, and is
// counted. Routes match the path as an app framework routes it (see
// routeTable.match), but the request is forwarded as it came.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route := h.routes.match(r.URL.Path)
	if route == nil {
		h.passThrough(w, r, passNoRoute)
		return
	}
	if !isPost(r.Method) {
		h.passThrough(w, r, passNotPost)
		return
	}
	ext := route.Source.Resolve(r.Header)
	if ext == nil {
		h.passThrough(w, r, passNotRecognised)
		return
	}
	h.serveWebhook(w, r, route, ext)
}
