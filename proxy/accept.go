package proxy

import (
	"context"
	"net/http"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// accept answers a first-seen webhook of an async route: its event is
// claimed and its request stored for background delivery in one store step,
// and only once the store has accepted both is the sender told it is
// queued. A duplicate of an event the store holds in any state is safe
// with us, so it is answered 200 duplicate and the sender stops retrying.
// The body was read whole (serveWebhook reads it on async routes).
func (h *Handler) accept(w http.ResponseWriter, r *http.Request, wh *webhook) {
	// The store has copied the request by the time Enqueue returns, so the
	// pooled body buffer and the header can be handed over as they are.
	req := dedup.Request{
		Method:     r.Method,
		RequestURI: r.RequestURI,
		Host:       r.Host,
		Header:     r.Header,
		RemoteAddr: r.RemoteAddr,
		TLS:        r.TLS != nil,
		Body:       wh.body,
	}
	if req.Body == nil {
		req.Body = []byte{}
	}
	// The store call outlives the sender (for at most finishTimeout): an
	// event is queued whole or not at all, never cut off halfway by a
	// hang-up. Queued, it is delivered, and the sender's retry is a
	// duplicate.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), finishTimeout)
	defer cancel()
	start := time.Now()
	queued, rec, err := h.cfg.Queue.Enqueue(ctx, wh.key, req)
	h.m.observeStore(opEnqueue, start, err)
	if err != nil {
		h.storeUnavailable(w, r, wh, err)
		return
	}
	switch {
	case queued:
		h.cfg.Enqueued()
		h.answer(w, wh, h.cfg.AsyncStatus, outcomeQueued, "")
	case rec.State == dedup.Completed:
		h.duplicate(w, wh, rec)
	case rec.State == dedup.InFlight:
		// Claimed by a sync delivery (the route was sync until a moment
		// ago): the sender retries while that one finishes.
		h.inFlight(w, wh, rec)
	default:
		h.answer(w, wh, http.StatusOK, outcomeDuplicate, "")
	}
}

// Settlement is how a queued request's delivery is settled, as the proxy
// decided it when the request arrived: the route it came in on (the route
// label of the delivery metrics) and how long its completed record is kept
// (the preset's retention, or DEDUP_TTL). When no route matches any more
// (ROUTES changed since), the route is empty and the TTL zero.
func (h *Handler) Settlement(r *http.Request) (route string, ttl time.Duration) {
	rt := h.routes.match(r.URL.Path)
	if rt == nil {
		return "", 0
	}
	if ext := rt.Source.Resolve(r.Header); ext != nil {
		return rt.Path, ext.TTL
	}
	return rt.Path, 0
}
