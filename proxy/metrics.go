package proxy

import (
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
			Help:    "Time the proxy adds to a webhook it forwards: its whole handling less the upstream's time (the claim, completing it, reading the body).",
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
	return m
}

func (m *Metrics) observeStore(op string, start time.Time, err error) {
	m.storeDuration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		m.storeErrors.WithLabelValues(op).Inc()
	}
}
