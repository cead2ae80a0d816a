// Package proxy forwards each webhook event to the upstream once: it finds
// the event ID, claims it in a store, forwards first-seen events and answers
// duplicates itself.
package proxy

import (
	"context"
	"crypto/sha256"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// Store is what the proxy needs of a dedup store (dedup.Redis, dedup.Memory).
type Store interface {
	Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error)
	Complete(ctx context.Context, c dedup.Claim, res dedup.Result, ttl time.Duration) error
	Release(ctx context.Context, c dedup.Claim) error
	Lookup(ctx context.Context, key string) (dedup.Record, error)
}

// Queue is what an async route needs of a store: claim the event and keep
// its request for background delivery, in one step (dedup.Queue).
type Queue interface {
	Enqueue(ctx context.Context, key string, req dedup.Request) (bool, dedup.Record, error)
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
	// Enqueued is called after a webhook was queued, so that this
	// process's delivery workers take it at once rather than at their next
	// poll. If nil, nothing is called.
	Enqueued func()
	// KeyPrefix starts every store key.
	KeyPrefix string
	// UpstreamTimeout bounds each forwarded request. If zero, 30s.
	UpstreamTimeout time.Duration
	// LeaseTTL is the lifetime of a claim. If zero, UpstreamTimeout + 15s.
	LeaseTTL time.Duration
	// MaxBodyBytes bounds a body the proxy must hold. If zero, 10 MiB.
	MaxBodyBytes int64
	// MaxBuffered bounds the memory, in bytes, the bodies of all requests take
	// at once on routes that read them; beyond it such a request is
	// answered 503 with Retry-After. If zero, no bound.
	MaxBuffered int64
	// OnStoreError is what a webhook gets while the store is unreachable.
	// If zero, RejectOnStoreError.
	OnStoreError StoreErrorPolicy
	// OnMissingID is what a webhook without an event ID gets. If zero,
	// ForwardMissingID.
	OnMissingID MissingIDPolicy
	// BodyFingerprint also treats a body already completed as a duplicate.
	BodyFingerprint bool
	// ReplayResponse answers duplicates with the original response, whose
	// body is kept up to ReplayMaxBytes (if zero, 64 KiB).
	ReplayResponse bool
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
	log     *zap.Logger
	m       *Metrics
	pool    bufferPool
	// bodies are the buffers of the bodies read, charged to budget.
	bodies bodyPool
	budget bodyBudget
	// copyBuffers relay the upstream's answers; without them
	// ReverseProxy allocates 32 KiB per request.
	copyBuffers copyBufferPool
	logFields   fieldPool
	// done is closed by Abandon to stop waits and upstream requests.
	abandon context.Context
	stop    context.CancelFunc
}

// New returns a Handler for cfg.
func New(cfg Config) *Handler {
	if cfg.UpstreamTimeout == 0 {
		cfg.UpstreamTimeout = 30 * time.Second
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = cfg.UpstreamTimeout + 15*time.Second
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 10 << 20
	}
	if cfg.ReplayMaxBytes == 0 {
		cfg.ReplayMaxBytes = 64 << 10
	}
	if cfg.InflightStatus == 0 {
		cfg.InflightStatus = http.StatusConflict
	}
	if cfg.AsyncStatus == 0 {
		cfg.AsyncStatus = http.StatusAccepted
	}
	if cfg.Enqueued == nil {
		cfg.Enqueued = func() {}
	}
	if cfg.Transport == nil {
		cfg.Transport = NewTransport()
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &Handler{cfg: cfg, routes: newRouteTable(cfg.Routes), log: cfg.Logger, m: cfg.Metrics}
	h.budget.max, h.budget.m = cfg.MaxBuffered, cfg.Metrics.budget
	h.budget.m.max.Set(float64(cfg.MaxBuffered))
	h.abandon, h.stop = context.WithCancel(context.Background())
	rewrite := Rewrite(cfg.Upstream)
	h.reverse = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			rewrite(pr)
			if b, ok := pr.In.Body.(*replayBody); ok && pr.Out.Body != nil {
				pr.Out.Body = b.forUpstream()
			}
		},
		Transport:      cfg.Transport,
		ModifyResponse: h.settle,
		ErrorHandler:   h.upstreamError,
		// FlushInterval stays 0: an answer of known length is written in
		// one go, while one that streams (no Content-Length, or
		// text/event-stream) is flushed at once by ReverseProxy itself. A
		// negative interval would also flush the headers on their own from
		// a timer goroutine: a second write, and a goroutine, per answer.
		BufferPool: &h.copyBuffers,
		ErrorLog:   zap.NewStdLog(cfg.Logger.Named("reverseproxy")),
	}
	return h
}

// Rewrite is the httputil.ReverseProxy Rewrite hook that turns a received
// webhook into the upstream's request: the same method, path, query,
// headers and body, the Host the sender used (apps that verify signed URLs
// depend on it), an ingress's X-Forwarded-For chain kept and extended, and
// X-Forwarded-Host and -Proto as received. Sync routes and the background
// delivery of async routes both forward through it, so the app cannot tell
// them apart.
func Rewrite(upstream *url.URL) func(*httputil.ProxyRequest) {
	return func(pr *httputil.ProxyRequest) {
		pr.SetURL(upstream)
		pr.Out.Host = pr.In.Host
		if xff, ok := pr.In.Header["X-Forwarded-For"]; ok {
			pr.Out.Header["X-Forwarded-For"] = xff
		}
		pr.SetXForwarded()
	}
}

// NewTransport returns the upstream transport: a clone of
// http.DefaultTransport whose keep-alive pool is large enough that
// connection setup never limits throughput, and that never adds
// Accept-Encoding (the upstream must see the sender's headers unchanged).
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	t.IdleConnTimeout = 90 * time.Second
	t.DisableCompression = true
	t.ForceAttemptHTTP2 = false
	return t
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

// upstreamError answers 504 when the upstream ran past UpstreamTimeout, 502
// when it could not be reached or broke off, and 400 when the sender's own
// body broke off; a claim is released first. When the sender hung up (its
// request's context was cancelled, and not by Abandon) the answer reaches no
// one, and the outcome says client-gone rather than blaming the upstream.
func (h *Handler) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	status, outcome := http.StatusBadGateway, outcomeUpstreamError
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		status = http.StatusGatewayTimeout
	}
	if errors.Is(r.Context().Err(), context.Canceled) && h.abandon.Err() == nil {
		outcome = outcomeClientGone
	}
	c, _ := r.Context().Value(claimedKey{}).(*claimed)
	if c != nil {
		c.wh.err = err
		if c.hasher != nil && c.hasher.readError() != nil {
			// The sender's streamed body broke off (it hung up or was too
			// slow): the sender's fault, not the upstream's.
			status, outcome = http.StatusBadRequest, outcomeBadRequest
		}
		// Release before answering, so a retry sent the moment the sender
		// has its answer is forwarded rather than found in flight.
		if !c.settled {
			c.settled = true
			h.release(r.Context(), c)
		}
	}
	if ex, ok := w.(*exchange); ok {
		ex.upstreamErr = err
		ex.outcome = outcome
	}
	switch outcome {
	case outcomeBadRequest:
		h.log.Debug("sender's body broke off", zap.Error(err))
	case outcomeClientGone:
		h.log.Debug("upstream request cancelled: the sender went away", zap.Error(err))
	default:
		h.log.Warn("upstream error", zap.String("path", r.URL.Path), zap.Int("status", status), zap.Error(err))
	}
	w.WriteHeader(status)
}

// fingerprint is the SHA-256 of a body.
func fingerprint(body []byte) [32]byte { return sha256.Sum256(body) }
