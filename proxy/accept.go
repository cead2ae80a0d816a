package proxy

import (
	"net/http"
	"time"

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
	// The store call runs on the Handler's own context, as a claim does
	// (the store bounds each call): a sender's hang-up never cuts it off
	// halfway. Queued, the event is delivered, and the sender's retry is a
	// duplicate.
	start := time.Now()
	queued, rec, err := h.cfg.Queue.Enqueue(h.storeCtx(wh), wh.key, req)
	h.m.observeStore(opEnqueue, start, err)
	if err != nil {
		return h.storeUnavailable(w, r, wh, err)
	}
	switch {
	case queued:
		h.cfg.Enqueued()
		return h.answer(w, wh.id, h.cfg.AsyncStatus, outcomeQueued, "", nil)
	case rec.State == dedup.Completed:
		return h.duplicate(w, wh, rec)
	case rec.State == dedup.InFlight:
		// Claimed by a sync delivery (the route was sync until a moment
		// ago): the sender retries while that one finishes.
		return h.inFlight(w, wh, rec)
	}
	return h.answer(w, wh.id, http.StatusOK, outcomeDuplicate, "", nil)
}
