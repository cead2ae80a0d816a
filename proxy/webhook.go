package proxy

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/policy"
	"github.com/webhook-dedup/webhook-dedup/providers"
)

// webhook is one deduplicated request as it goes through the proxy: what
// is known of it. What became of it is the result its steps return.
type webhook struct {
	route *Route
	ext   *providers.Extractor
	start time.Time
	id    string
	key   string
	// bodyKey is the key of the body's fingerprint; "" when bodies are
	// not fingerprinted.
	bodyKey string
	body    []byte // nil when the body streams
	// sum is body's fingerprint once summed (bodySum).
	sum    [32]byte
	summed bool
	// replay hands the buffered body on; unused when the body streams.
	replay replayBody
	// fwd relays the upstream's answer, once the webhook is forwarded.
	fwd forwarding
	// span is the webhook's span; nil when tracing is off.
	span trace.Span
}

// result is what became of a webhook: the answer the sender got, and why.
type result struct {
	status  int
	outcome string
	// err is why the webhook was answered as it was (a bad body, a
	// signature, the store, the upstream); nil when all went well.
	err error
	// upstream is the time the exchange with the upstream took, of which
	// settling is the proxy's own (releasing the lease); zero when the
	// webhook was not forwarded.
	upstream, settling time.Duration
	// answered is when, since the webhook arrived, the sender was handed
	// the answer, when the proxy had more to do after it (completing the
	// lease); zero when the answer ended the handling.
	answered time.Duration
	// settleErr is why the lease could not be settled as it should.
	settleErr error
	// mismatch: a duplicate whose body differs from the original's.
	mismatch bool
	// aborted: relaying the answer failed midway (the sender is gone), so
	// the connection must be cut rather than the answer ended cleanly.
	aborted bool
}

// because adds why to the reasons of r.
func (r result) because(why error) result {
	r.err = errors.Join(why, r.err)
	return r
}

// serveWebhook takes a webhook through the pipeline and logs, once, what
// became of it.
func (h *Handler) serveWebhook(w http.ResponseWriter, r *http.Request, route *Route, ext *providers.Extractor) {
	wh := &webhook{route: route, ext: ext, start: time.Now()}
	if h.tracer != nil {
		r = h.startSpan(r, wh)
	}
	var res result
	defer func() {
		h.logWebhook(r, wh, res)
		if wh.span != nil {
			h.endSpan(r, wh, res)
		}
	}()
	res = h.handleWebhook(w, r, wh)
	if res.aborted {
		panic(http.ErrAbortHandler)
	}
}

// handleWebhook is the whole path of a webhook: read what must be read,
// verify, find the ID, then claim and forward it or answer it.
func (h *Handler) handleWebhook(w http.ResponseWriter, r *http.Request, wh *webhook) result {
	if res, refused := h.dropsCheckedHeader(w, r, wh); refused {
		return res
	}
	// An async route keeps the whole body for its background delivery.
	if wh.ext.NeedsBody || h.cfg.BodyFingerprint || wh.route.Delivery == policy.AsyncDelivery {
		buf, err := h.readBody(w, r)
		defer h.putBody(buf)
		if err != nil {
			return h.bodyRefused(w, wh, err)
		}
		wh.setBody(r, buf.bytes())
	} else if 0 < r.ContentLength && r.ContentLength <= maxArrivedBody {
		buf := h.pool.get()
		defer h.pool.put(buf)
		if err := takeArrivedBody(r, wh, buf); err != nil {
			return h.answer(w, wh.id, http.StatusBadRequest, outcomeBadRequest, "could not read the body", err)
		}
	}

	if v := wh.ext.Verifier; v != nil {
		if err := v.Verify(r.Header, wh.body, h.cfg.Now()); err != nil {
			return h.answer(w, wh.id, http.StatusUnauthorized, outcomeInvalidSignature, "signature invalid", err)
		}
	}

	id, err := wh.ext.EventID(r.Header, wh.body)
	switch {
	case errors.Is(err, providers.ErrNotEvent):
		return h.forward(w, r, wh, outcomeForwardedUnchecked, nil)
	case errors.Is(err, providers.ErrNoID) && h.cfg.OnMissingID == policy.RejectMissingID:
		return h.answer(w, wh.id, http.StatusBadRequest, outcomeMissingID, "no event ID found", err)
	case errors.Is(err, providers.ErrNoID):
		return h.forward(w, r, wh, outcomeForwardedUnchecked, nil).because(err)
	case err != nil:
		return h.answer(w, wh.id, http.StatusBadRequest, outcomeInvalidID, "event ID longer than 512 bytes, ambiguous or with control characters", err)
	}
	wh.id = id
	wh.key = dedup.EventKey(h.cfg.KeyPrefix, wh.ext.Namespace, id)
	wh.bodyKey = h.bodyKey(wh)

	if wh.bodyKey != "" {
		if res, answered := h.seenBody(w, r, wh); answered {
			return res
		}
	}
	if wh.route.Delivery == policy.AsyncDelivery {
		return h.accept(w, r, wh)
	}
	return h.claimAndForward(w, r, wh)
}

// bodySum is the fingerprint of the buffered body, hashed the first time it
// is asked for: the body's key, a duplicate's mismatch and the completed
// record all use the one sum.
func (wh *webhook) bodySum() [32]byte {
	if !wh.summed {
		wh.sum, wh.summed = fingerprint(wh.body), true
	}
	return wh.sum
}

// setBody hands a body read into memory on to the upstream.
func (wh *webhook) setBody(r *http.Request, body []byte) {
	wh.body = body
	wh.replay.Reset(body)
	r.Body = &wh.replay
}

// claimAndForward claims the event and forwards it, or answers the copy
// whose event is completed or in flight.
func (h *Handler) claimAndForward(w http.ResponseWriter, r *http.Request, wh *webhook) result {
	ctx := r.Context()
	var waitUntil time.Time
	if h.cfg.InflightWait > 0 {
		waitUntil = time.Now().Add(h.cfg.InflightWait)
	}
	// recheck: a copy found in flight may still look whether its event
	// was being completed here (once: each look may claim again).
	recheck := true
	for {
		epoch := h.completing.epoch()
		l, rec, err := h.leases.claim(h.storeCtx(wh), wh.key, wh.ext.TTL, wh.bodyKey)
		switch {
		case ctx.Err() != nil:
			// The sender left while the store was claiming: nothing was
			// forwarded, so a claim taken meanwhile is given back.
			if l != nil {
				_ = l.Release(ctx)
			}
			return h.senderGone(w, wh, errors.Join(ctx.Err(), err))
		case err != nil:
			return h.storeUnavailable(w, r, wh, err)
		case l != nil:
			return h.forward(w, r, wh, outcomeForwarded, l)
		case h.cfg.ShadowMode:
			res := h.forward(w, r, wh, outcomeShadowDuplicate, nil)
			res.mismatch = rec.State == dedup.Completed && h.mismatch(wh, rec)
			return res
		case rec.State == dedup.Completed:
			return h.duplicate(w, wh, rec)
		case recheck && h.completing.wait(ctx, h.abandon, wh.key, epoch):
			recheck = false
			continue // answered 2xx here and completed since: claim again
		case waitUntil.IsZero():
			return h.inFlight(w, wh, rec)
		}
		// In flight: wait for the first copy's outcome.
		rec, err = h.awaitOutcome(ctx, wh.key, waitUntil)
		switch {
		case ctx.Err() != nil:
			return h.senderGone(w, wh, ctx.Err())
		case err != nil && !errors.Is(err, errWaitOver):
			return h.storeUnavailable(w, r, wh, err)
		case rec.State == dedup.Completed:
			return h.duplicate(w, wh, rec)
		case rec.State == dedup.Absent:
			continue // released: try to claim it ourselves
		}
		return h.inFlight(w, wh, rec)
	}
}

var errWaitOver = errors.New("proxy: in-flight wait over")

// inflightPoll is how often a waiting duplicate looks at the first copy's record.
const inflightPoll = 50 * time.Millisecond

// awaitOutcome polls the record until it is no longer in flight or until
// the deadline. It returns the last record seen.
func (h *Handler) awaitOutcome(ctx context.Context, key string, until time.Time) (dedup.Record, error) {
	var timer *time.Timer
	for {
		rec, gone, err := h.lookup(ctx, key)
		if gone {
			return rec, ctx.Err() // the sender is gone, not the store
		}
		if err != nil || rec.State != dedup.InFlight {
			return rec, err
		}
		left := time.Until(until)
		if left <= 0 {
			return rec, errWaitOver
		}
		if timer == nil {
			timer = time.NewTimer(min(inflightPoll, left))
			defer timer.Stop()
		} else {
			timer.Reset(min(inflightPoll, left))
		}
		select {
		case <-ctx.Done():
			return rec, ctx.Err()
		case <-h.abandon.Done():
			return rec, errWaitOver
		case <-timer.C:
		}
	}
}

// seenBody answers a duplicate when the same body was already completed
// (DEDUP_BODY_FINGERPRINT), and reports whether it answered.
func (h *Handler) seenBody(w http.ResponseWriter, r *http.Request, wh *webhook) (result, bool) {
	rec, gone, err := h.lookup(r.Context(), wh.bodyKey)
	if gone {
		return h.senderGone(w, wh, err), true // the sender's hang-up cancelled the lookup
	}
	if err != nil {
		return h.storeUnavailable(w, r, wh, err), true
	}
	switch {
	case rec.State != dedup.Completed:
		return result{}, false
	case h.cfg.ShadowMode:
		return h.forward(w, r, wh, outcomeShadowDuplicate, nil), true
	}
	return h.duplicate(w, wh, rec), true
}

// lookup reads key's record, counted in the store metrics: a key not found
// is Absent. gone reports a lookup the sender's hang-up cut short: not the
// store's failure, so not counted.
func (h *Handler) lookup(ctx context.Context, key string) (rec dedup.Record, gone bool, err error) {
	start := time.Now()
	rec, err = h.cfg.Store.Lookup(ctx, key)
	switch {
	case errors.Is(err, dedup.ErrNotFound):
		rec, err = dedup.Record{State: dedup.Absent}, nil
	case err != nil && ctx.Err() != nil:
		return rec, true, err
	}
	h.m.observeStore(opLookup, start, err)
	return rec, false, err
}

// bodyKey is the key of the body's fingerprint, or "" when bodies are not
// fingerprinted. BodyFingerprint has every body read into memory
// (handleWebhook), so there is one to fingerprint. '#' never occurs in a
// route path or preset name, so it cannot collide with an event ID key.
func (h *Handler) bodyKey(wh *webhook) string {
	if !h.cfg.BodyFingerprint {
		return ""
	}
	return dedup.BodyKey(h.cfg.KeyPrefix, wh.ext.Namespace, wh.bodySum())
}
