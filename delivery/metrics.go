package delivery

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// Metrics are the delivery workers' Prometheus metrics. A nil *Metrics
// keeps none.
type Metrics struct {
	deliveries *prometheus.CounterVec
	attempts   prometheus.Histogram
	inUse      *prometheus.GaugeVec
	held       *heldCollector
}

// StatsSource is what the queue gauges are read from, at each scrape.
type StatsSource interface {
	Stats(ctx context.Context) (dedup.QueueStats, error)
}

// statsTimeout bounds reading the queue's stats during a scrape.
const statsTimeout = 2 * time.Second

// NewMetrics creates the metrics and registers them with reg; the queue
// gauges read stats when scraped. Every replica reports the same shared
// queue: aggregate them with max, not sum.
func NewMetrics(reg prometheus.Registerer, stats StatsSource, log *zap.Logger) *Metrics {
	if log == nil {
		log = zap.NewNop()
	}
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "webhook_dedup_deliveries_total",
			Help: "Background delivery attempts of async routes, by route and result (succeeded, retry, dead-lettered).",
		}, []string{"route", "result"}),
		attempts: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "webhook_dedup_delivery_attempts",
			Help:    "Attempts each background delivery took until the app answered 2xx.",
			Buckets: []float64{1, 2, 3, 4, 5, 8, 13, 25, 50},
		}),
		inUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "webhook_dedup_delivery_slots_in_use",
			Help: "Background delivery attempts running now in this process, by route (each async route has DELIVERY_CONCURRENCY slots; \"other\" is the lane of routes no longer async).",
		}, []string{"route"}),
		held: &heldCollector{},
	}
	reg.MustRegister(m.deliveries, m.attempts, m.inUse, m.held, &queueCollector{stats: stats, log: log, lanes: m.held})
	return m
}

// watch reports lanes' states in webhook_dedup_route_paused.
func (m *Metrics) watch(lanes []*lane) {
	if m == nil {
		return
	}
	m.held.mu.Lock()
	defer m.held.mu.Unlock()
	m.held.lanes = lanes
}

var pausedDesc = prometheus.NewDesc("webhook_dedup_route_paused",
	"1 while an async route's new delivery attempts are held back in this process: its breaker is open (the app does not answer), the app asked for a pause (429 or 503 with Retry-After), or a new attempt would wait for its turn under the route's rate=; else 0.",
	[]string{"route"}, nil)

// heldCollector reports, at each scrape, whether each lane holds its
// attempts back now: read from the lanes, so that a pause that ended
// between two attempts reads 0 without an attempt to say so.
type heldCollector struct {
	mu    sync.Mutex
	lanes []*lane
}

func (c *heldCollector) Describe(ch chan<- *prometheus.Desc) { ch <- pausedDesc }

func (c *heldCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	lanes := c.lanes
	c.mu.Unlock()
	for _, l := range lanes {
		v := 0.0
		if l.breaker.isOpen() || l.pace.holding() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, v, l.label)
	}
}

func (m *Metrics) delivered(route, result string, attempt int) {
	if m == nil {
		return
	}
	m.deliveries.WithLabelValues(route, result).Inc()
	if result == resultSucceeded {
		m.attempts.Observe(float64(attempt))
	}
}

// slots notes that delta more of route's slots are in use (an attempt
// started: 1; ended: -1; 0 shows the route's lane before its first).
func (m *Metrics) slots(route string, delta int) {
	if m == nil {
		return
	}
	m.inUse.WithLabelValues(route).Add(float64(delta))
}

var (
	depthDesc = prometheus.NewDesc("webhook_dedup_queue_depth",
		"Async events queued or waiting for a retry (not those being delivered, not dead letters).", nil, nil)
	oldestDesc = prometheus.NewDesc("webhook_dedup_queue_oldest_age_seconds",
		"Age of the oldest event queued or waiting for a retry; 0 when none.", nil, nil)
	deadDesc = prometheus.NewDesc("webhook_dedup_dead_letters",
		"Dead-lettered events kept (their attempts ran out).", nil, nil)
	routeDepthDesc = prometheus.NewDesc("webhook_dedup_route_queue_depth",
		"Async events queued or waiting for a retry, by async route (\"other\": every route without a lane of its own, such as one no longer async); they sum to webhook_dedup_queue_depth.",
		[]string{"route"}, nil)
)

// queueCollector reports the queue's stats at each scrape. When the store
// does not answer, the gauges are left out of that scrape rather than
// reported as zero, which would read as an empty queue.
type queueCollector struct {
	stats StatsSource
	log   *zap.Logger
	// lanes are the routes the depth is reported by.
	lanes *heldCollector
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- depthDesc
	ch <- oldestDesc
	ch <- deadDesc
	ch <- routeDepthDesc
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	st, err := c.stats.Stats(ctx)
	if err != nil {
		c.log.Warn("reading the queue's stats for /metrics failed", zap.Error(err))
		return
	}
	ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(st.Depth))
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, st.OldestAge.Seconds())
	ch <- prometheus.MustNewConstMetric(deadDesc, prometheus.GaugeValue, float64(st.DeadLetters))
	// By lane: each async route's own, and the rest's what is left, so
	// that every lane has its series, at 0 when empty.
	c.lanes.mu.Lock()
	lanes := c.lanes.lanes
	c.lanes.mu.Unlock()
	rest := st.Depth
	for _, l := range lanes {
		if !l.from.Rest {
			n := st.Routes[l.from.Route]
			rest -= n
			ch <- prometheus.MustNewConstMetric(routeDepthDesc, prometheus.GaugeValue, float64(n), l.label)
		}
	}
	for _, l := range lanes {
		if l.from.Rest {
			ch <- prometheus.MustNewConstMetric(routeDepthDesc, prometheus.GaugeValue, float64(max(rest, 0)), l.label)
		}
	}
}
