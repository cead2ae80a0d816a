package proxy

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes: the X-Webhook-Dedup values, which are also the outcome label of
// webhook_dedup_requests_total.
const (
	outcomeForwarded          = "forwarded"
	outcomeForwardedUnchecked = "forwarded-unchecked"
	outcomeShadowDuplicate    = "shadow-duplicate"
	outcomeDuplicate          = "duplicate"
	outcomeQueued             = "queued"
	outcomeInFlight           = "in-flight"
	outcomeStoreUnavailable   = "store-unavailable"
	outcomeQueueFull          = "queue-full"
	outcomeInvalidSignature   = "invalid-signature"
	outcomeMissingID          = "missing-id"
	outcomeInvalidID          = "invalid-id"
	outcomeTooLarge           = "too-large"
	outcomeUpstreamError      = "upstream-error"
	outcomeBadRequest         = "bad-request"
	outcomeClientGone         = "client-gone"
)

// Store operation names, the op label of the store metrics.
const (
	opClaim    = "claim"
	opComplete = "complete"
	opRelease  = "release"
	opLookup   = "lookup"
	opEnqueue  = "enqueue"
)

// Metrics are the proxy's Prometheus metrics.
type Metrics struct {
	requests        *prometheus.CounterVec
	upstream        prometheus.Histogram
	added           prometheus.Histogram
	storeDuration   *prometheus.HistogramVec
	storeErrors     *prometheus.CounterVec
	released        prometheus.Counter
	leaseLost       prometheus.Counter
	payloadMismatch *prometheus.CounterVec
	orderMissing    *prometheus.CounterVec
	inflight        prometheus.Gauge
	passthrough     *prometheus.CounterVec
	budget          *budgetMetrics
	// byRoute and byOp cache the children of requests (by route, then
	// outcome) and of storeDuration (by op) that requests use.
	byRoute children[*children[prometheus.Counter]]
	byOp    children[prometheus.Observer]
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_dedup_requests_total",
			Help: "Webhook requests on dedup routes, by route and outcome (the X-Webhook-Dedup value).",
		}, []string{"route", "outcome"}),
		upstream: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "webhook_dedup_upstream_duration_seconds",
			Help:    "Time from forwarding a webhook to the upstream's complete answer.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		added: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "webhook_dedup_added_latency_seconds",
			Help:    "Time the proxy adds to a webhook it forwards: until its sender is answered, less the upstream's time (the claim, reading the body, a release; a 2xx is completed after the answer).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		storeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "webhook_dedup_store_duration_seconds",
			Help:    "Store operation latency by operation.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"op"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_dedup_store_errors_total",
			Help: "Store operations that failed (store unreachable or timed out), by operation.",
		}, []string{"op"}),
		released: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhook_dedup_claims_released_total",
			Help: "Claims released after a non-2xx answer, an upstream error or a client that went away, so the retry is forwarded.",
		}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhook_dedup_leases_lost_total",
			Help: "Completions or releases refused because the lease had expired and the claim was no longer owned.",
		}),
		payloadMismatch: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_dedup_payload_mismatch_total",
			Help: "Duplicates whose body fingerprint differs from the completed original's.",
		}, []string{"route"}),
		orderMissing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_dedup_order_key_missing_total",
			Help: "Webhooks of a route with order= accepted without their order key (absent, empty or invalid): queued for delivery in no particular order.",
		}, []string{"route"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "webhook_dedup_inflight_claims",
			Help: "Claims this process holds and has not settled yet: their requests are with the upstream.",
		}),
	}
	reg.MustRegister(m.requests, m.upstream, m.added, m.storeDuration, m.storeErrors, m.released, m.leaseLost, m.payloadMismatch, m.orderMissing, m.inflight)
	m.passthrough = passthroughMetric(reg)
	m.budget = newBudgetMetrics(reg)
	m.byOp.make = func(op string) prometheus.Observer { return m.storeDuration.WithLabelValues(op) }
	m.byRoute.make = func(route string) *children[prometheus.Counter] {
		return &children[prometheus.Counter]{make: func(outcome string) prometheus.Counter {
			return m.requests.WithLabelValues(route, outcome)
		}}
	}
	return m
}

func (m *Metrics) observeStore(op string, start time.Time, err error) {
	m.byOp.get(op).Observe(time.Since(start).Seconds())
	if err != nil {
		m.storeErrors.WithLabelValues(op).Inc()
	}
}

// countRequest counts a webhook on route answered with outcome.
func (m *Metrics) countRequest(route, outcome string) {
	m.byRoute.get(route).get(outcome).Inc()
}

// children caches the children of a metric vector by the value of one
// label, each made at its first use: WithLabelValues, called per request,
// hashes and checks every label value each time. The values are few (the
// routes, the outcomes, the store operations), so each new one copies the
// map, and a lookup is one atomic load and one map read, without a lock.
type children[T any] struct {
	m  atomic.Pointer[map[string]T]
	mu sync.Mutex // serialises the copies
	// make makes the child for a label value. Required.
	make func(string) T
}

func (c *children[T]) get(v string) T {
	if m := c.m.Load(); m != nil {
		if x, ok := (*m)[v]; ok {
			return x
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if x, ok := (*old)[v]; ok {
			return x
		}
	}
	m := make(map[string]T, 1)
	if old != nil {
		maps.Copy(m, *old)
	}
	x := c.make(v)
	m[v] = x
	c.m.Store(&m)
	return x
}
