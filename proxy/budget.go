package proxy

import (
	"errors"
	"io"
	"math"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// BodyBudget bounds the request-body bytes all requests hold at once
// (MAX_BUFFERED_BYTES): every buffer a body is read into is charged for its
// capacity while a request holds it, and so is the body of every async
// delivery the workers hold (Charge). Without it, a few hundred connections
// that each declare a large body take the process past its memory limit.
type BodyBudget struct {
	max  int64 // the bound; zero: none
	held atomic.Int64
	m    *budgetMetrics
}

// NewBodyBudget is a budget of limit bytes (MAX_BUFFERED_BYTES; zero: no
// bound), shown in m's metrics. One budget serves the proxy (Config.Bodies)
// and async delivery, which charges it the bodies it holds.
func NewBodyBudget(limit int64, m *Metrics) *BodyBudget {
	m.budget.max.Set(float64(limit))
	return &BodyBudget{max: limit, m: m.budget}
}

// errOverBudget means a body would take the bytes held past the budget.
var errOverBudget = errors.New("proxy: request bodies held at once would exceed MAX_BUFFERED_BYTES")

// full reports whether nothing is left: a request that must read its body
// is refused before a byte of it is read.
func (b *BodyBudget) full() bool { return b.max > 0 && b.held.Load() >= b.max }

// take charges n bytes, or reports false (charging nothing) when they would
// take the bytes held past the budget.
func (b *BodyBudget) take(n int64) bool {
	for {
		held := b.held.Load()
		if b.max > 0 && held+n > b.max {
			return false
		}
		if b.held.CompareAndSwap(held, held+n) {
			b.m.held.Add(float64(n))
			return true
		}
	}
}

// give returns n bytes taken before.
func (b *BodyBudget) give(n int64) {
	if n != 0 {
		b.Charge(-n)
	}
}

// Room is how many bytes are left, or math.MaxInt64 with no bound: async
// delivery asks before it takes deliveries, whose bodies it then holds.
func (b *BodyBudget) Room() int64 {
	if b.max == 0 {
		return math.MaxInt64
	}
	return max(b.max-b.held.Load(), 0)
}

// Charge charges n bytes already in memory, whatever the room (an async
// delivery's body, once taken), or gives back -n charged before.
func (b *BodyBudget) Charge(n int64) {
	b.held.Add(n)
	b.m.held.Add(float64(n))
}

// budgetMetrics show how close the budget runs to its bound, and what it refused.
type budgetMetrics struct {
	held    prometheus.Gauge
	max     prometheus.Gauge
	refused prometheus.Counter
	// largeWaiting counts the large bodies waiting for their turn to be
	// queued (largeBody).
	largeWaiting prometheus.Gauge
}

func newBudgetMetrics(reg prometheus.Registerer) *budgetMetrics {
	m := &budgetMetrics{
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "webhook_dedup_body_bytes_held",
			Help: "Bytes of memory the request bodies being read or held take now (their buffers' capacity), on routes that read the body, and the bodies of the async deliveries the workers hold.",
		}),
		max: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "webhook_dedup_body_bytes_max",
			Help: "MAX_BUFFERED_BYTES: the most bytes request bodies may take at once (0: no bound).",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhook_dedup_body_budget_refused_total",
			Help: "Requests answered 503 (X-Webhook-Dedup: too-large, with Retry-After) because the bodies held at once would have exceeded MAX_BUFFERED_BYTES.",
		}),
		largeWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "webhook_dedup_large_bodies_waiting",
			Help: "Webhooks of async routes with a body of 1 MiB or more waiting for their turn to be queued: such bodies go to the store one at a time, so that the store's copies of them stay out of the memory MAX_BUFFERED_BYTES leaves.",
		}),
	}
	reg.MustRegister(m.held, m.max, m.refused, m.largeWaiting)
	return m
}

// overBudgetRetryAfter is the Retry-After, in seconds, of a 503 answered
// when the budget is spent: bodies are read within seconds (READ_TIMEOUT
// at most), so room comes back soon.
const overBudgetRetryAfter = "2"

// bodyRefused answers a webhook whose body readBody could not deliver:
// 413 over MAX_BODY_BYTES, 503 (retry soon) over MAX_BUFFERED_BYTES, and
// 400 when the sender's body broke off.
func (h *Handler) bodyRefused(w http.ResponseWriter, wh *webhook, err error) result {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return h.answer(w, wh.id, http.StatusRequestEntityTooLarge, outcomeTooLarge, "body larger than MAX_BODY_BYTES", err)
	case errors.Is(err, errOverBudget):
		h.budget.m.refused.Inc()
		// The connection's unread body is not worth draining: the sender
		// retries on a fresh one.
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", overBudgetRetryAfter)
		return h.answer(w, wh.id, http.StatusServiceUnavailable, outcomeTooLarge, "too many request bodies held at once (MAX_BUFFERED_BYTES), retry later", err)
	default:
		return h.answer(w, wh.id, http.StatusBadRequest, outcomeBadRequest, "could not read the body", err)
	}
}

// heldBody is a request body read into memory, charged to the budget
// for its buffer's capacity until it is put back.
type heldBody struct {
	buf     []byte
	charged int64
}

// bytes is the body read; never nil, since a nil body means one that streams.
func (b *heldBody) bytes() []byte {
	if b.buf == nil {
		return []byte{}
	}
	return b.buf
}

// firstChunk is the most a body's buffer holds before its bytes arrive:
// a connection that sends headers alone holds no more, however large the
// Content-Length it declares. Most webhook bodies fit in it.
const firstChunk = 16 << 10

// maxPooledBody bounds the buffers kept for reuse: larger ones go back
// to the garbage collector, so that a burst of large bodies does not pin
// its memory, and a connection that sends headers alone never holds a
// large pooled buffer.
const maxPooledBody = 64 << 10

// bodyPool recycles the buffers bodies are read into.
type bodyPool struct{ p sync.Pool }

func (p *bodyPool) get() *heldBody {
	if b, ok := p.p.Get().(*heldBody); ok {
		return b
	}
	return &heldBody{}
}

// put gives b's charge back to the budget and keeps its buffer for reuse.
// b may be nil.
func (h *Handler) putBody(b *heldBody) {
	if b == nil {
		return
	}
	h.budget.give(b.charged)
	b.charged = 0
	if cap(b.buf) > maxPooledBody {
		b.buf = nil
	}
	b.buf = b.buf[:0]
	h.bodies.p.Put(b)
}

// readBody reads the whole body, at most MaxBodyBytes, into a buffer that
// grows as the bytes arrive: from firstChunk (or the declared length, if
// smaller), doubling, and never past the declared length or MaxBodyBytes.
// A declared Content-Length over the limit is refused before reading
// (413); a budget already spent, at once (errOverBudget, 503), and so is a
// growth the budget has no room for. The caller puts the buffer back with
// putBody, also after an error.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) (*heldBody, error) {
	limit := h.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return h.bodies.get(), nil
	}
	if h.budget.full() {
		return nil, errOverBudget
	}
	ceiling := limit
	if r.ContentLength > 0 {
		ceiling = r.ContentLength
	}
	b := h.bodies.get()
	if !h.budget.take(int64(cap(b.buf))) {
		h.putBody(b)
		return nil, errOverBudget
	}
	b.charged = int64(cap(b.buf))
	body := http.MaxBytesReader(w, r.Body, limit)
	for {
		if int64(len(b.buf)) == r.ContentLength {
			return b, nil // all of it: the server reads no further
		}
		var err error
		switch {
		case int64(len(b.buf)) >= ceiling:
			// A body of unknown length filled MaxBodyBytes: one byte
			// more (a MaxBytesError), or its end, decides.
			var probe [1]byte
			_, err = body.Read(probe[:])
		case len(b.buf) == cap(b.buf):
			if err := h.growBody(b, ceiling); err != nil {
				return b, err
			}
			fallthrough
		default:
			var n int
			n, err = body.Read(b.buf[len(b.buf):cap(b.buf)])
			b.buf = b.buf[:len(b.buf)+n]
		}
		switch {
		case err == io.EOF:
			return b, nil
		case err != nil:
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				return b, err
			}
			return b, errors.Join(errBodyRead, err)
		}
	}
}

// growBody replaces b's full buffer with one twice as large (firstChunk
// when it has none), at most ceiling bytes. The budget is charged the
// difference before the new buffer is made (the old one, garbage once
// copied, is not counted meanwhile).
func (h *Handler) growBody(b *heldBody, ceiling int64) error {
	size := min(max(2*int64(cap(b.buf)), firstChunk), ceiling)
	if !h.budget.take(size - b.charged) {
		return errOverBudget
	}
	grown := make([]byte, len(b.buf), size)
	copy(grown, b.buf)
	b.buf, b.charged = grown, size
	return nil
}
