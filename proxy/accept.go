package proxy

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// accept answers a first-seen webhook of an async route: its event is
// claimed and its request stored for background delivery in one store step,
// and only once the store has accepted both is the sender told it is
// queued. A duplicate of an event the store holds in any state is safe
// with us, so it is answered 200 duplicate and the sender stops retrying.
// The body was read whole (handleWebhook reads it on async routes).
func (h *Handler) accept(w http.ResponseWriter, r *http.Request, wh *webhook) result {
	// The store has copied the request by the time Enqueue returns, so the
	// pooled body buffer and the header can be handed over as they are.
	req := dedup.Request{
		Method:     r.Method,
		RequestURI: r.RequestURI,
		Host:       r.Host,
		Header:     r.Header,
		RemoteAddr: r.RemoteAddr,
		TLS:        r.TLS != nil,
		Body:       wh.body, // never nil: read whole, even when empty
		// How the event is settled, decided now, as a sync route would
		// (its lease's TTL and body key): the worker delivers it later,
		// perhaps after ROUTES changed.
		Route:     wh.route.Path,
		Namespace: wh.ext.Namespace,
		TTL:       wh.ext.TTL,
		// The delivery attempts' spans link to this webhook's.
		TraceParent: wh.traceParent(),
	}
	h.orderOf(r, wh, &req)
	if len(wh.body) >= largeBody {
		if err := h.takeLargeTurn(r.Context()); err != nil {
			return h.senderGone(w, wh, err)
		}
		defer func() { <-h.largeTurn }()
	}
	// The store call runs on the Handler's own context, as a claim does
	// (the store bounds each call): a sender's hang-up never cuts it off
	// halfway. Queued, the event is delivered, and the sender's retry is a
	// duplicate.
	if err := h.cfg.Enqueues.Enter(r.Context()); err != nil {
		return h.senderGone(w, wh, err)
	}
	defer h.cfg.Enqueues.Leave()
	start := time.Now()
	queued, rec, err := h.cfg.Queue.Enqueue(h.storeCtx(wh), wh.key, req, h.cfg.QueueMaxDepth)
	if errors.Is(err, dedup.ErrQueueFull) {
		h.m.observeStore(opEnqueue, start, nil) // the store's answer, not its failure
		return h.queueFull(w, wh)
	}
	h.m.observeStore(opEnqueue, start, err)
	if err != nil {
		return h.storeUnavailable(w, r, wh, err)
	}
	if queued {
		if h.refusing.Load() && h.refusing.Swap(false) {
			h.log.Info("the queue has room again: accepting webhooks of async routes", zap.Int("queue_max_depth", h.cfg.QueueMaxDepth))
		}
		h.cfg.Enqueued(req.Route)
		return h.answer(w, wh.id, h.cfg.AsyncStatus, outcomeQueued, "", nil)
	}
	return h.held(w, wh, rec)
}

// largeBody is the size from which bodies are queued one at a time. A
// store encodes a copy of each body it queues (Redis its record,
// PostgreSQL the statement's parameter and then its message), which
// MAX_BUFFERED_BYTES does not count beside the body itself: 7 bodies of
// 9 MiB queued at once on Redis held 63 MiB of such copies, and took the
// process to 169 MiB resident with a 64 MiB budget. One at a time, they
// come to a body or two however many arrive together; under largeBody,
// to a few MiB for the enqueues at once (Enqueues' width).
const largeBody = 1 << 20

// takeLargeTurn waits until ctx is done for the turn of a large body to
// be queued (largeBody), counted in webhook_dedup_large_bodies_waiting
// while it waits.
func (h *Handler) takeLargeTurn(ctx context.Context) error {
	select {
	case h.largeTurn <- struct{}{}:
		return nil
	default:
	}
	h.m.budget.largeWaiting.Inc()
	defer h.m.budget.largeWaiting.Dec()
	select {
	case h.largeTurn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Gate bounds the enqueues under way: Enter waits for a turn until ctx is
// done, and Leave ends it (intake.Gate).
type Gate interface {
	Enter(ctx context.Context) error
	Leave()
}

// unbounded is the Gate of a Config without one.
type unbounded struct{}

func (unbounded) Enter(context.Context) error { return nil }
func (unbounded) Leave()                      {}

// orderOf sets req's order key on a route with order=: the route and the
// key's value, so that routes never share a key (a path holds no space).
// A request without its key (absent, empty, or not a valid one) is queued
// unordered, and counted: refusing it would lose the event for the sake
// of its order.
func (h *Handler) orderOf(r *http.Request, wh *webhook, req *dedup.Request) {
	if wh.route.Order == nil {
		return
	}
	v, err := wh.route.Order.Value(r.Header, wh.body)
	if err != nil {
		h.m.orderMissing.WithLabelValues(wh.route.Path).Inc()
		h.log.Debug("no order key: delivered in no particular order", zap.String("route", wh.route.Path), zap.String("id", wh.id), zap.Error(err))
		return
	}
	req.OrderKey, req.OrderBlock = wh.route.Path+" "+v, wh.route.OrderBlock
}

// held answers a copy of an event of an async route whose record the
// store holds, in any state.
func (h *Handler) held(w http.ResponseWriter, wh *webhook, rec dedup.Record) result {
	switch rec.State {
	case dedup.Completed:
		return h.duplicate(w, wh, rec)
	case dedup.InFlight:
		// Claimed by a sync delivery (the route was sync until a moment
		// ago): the sender retries while that one finishes.
		return h.inFlight(w, wh, rec)
	}
	return h.answer(w, wh.id, http.StatusOK, outcomeDuplicate, "", nil)
}

// queueFullRetryAfter is the Retry-After, in seconds, of a 503 answered
// while the queue is full: long enough for the workers to make room.
const queueFullRetryAfter = "30"

// queueFull answers a first-seen webhook of an async route that the store
// refused, the queue holding QUEUE_MAX_DEPTH events: 503 queue-full, and
// nothing was queued or claimed (a duplicate the store answers as one).
func (h *Handler) queueFull(w http.ResponseWriter, wh *webhook) result {
	if !h.refusing.Load() && !h.refusing.Swap(true) {
		h.log.Warn("the queue holds QUEUE_MAX_DEPTH events waiting for delivery: first-seen webhooks of async routes are answered 503 queue-full until it drains",
			zap.Int("queue_max_depth", h.cfg.QueueMaxDepth))
	}
	w.Header().Set("Retry-After", queueFullRetryAfter)
	return h.answer(w, wh.id, http.StatusServiceUnavailable, outcomeQueueFull, "the delivery queue is full (QUEUE_MAX_DEPTH), retry later", nil)
}
