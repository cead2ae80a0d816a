package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/providers"
)

// HeaderOutcome is the response header naming what the proxy did.
const HeaderOutcome = "X-Webhook-Dedup"

// storeErrorRetryAfter is the Retry-After, in seconds, of a 503 answered
// while the store is unreachable.
const storeErrorRetryAfter = "5"

// finishTimeout bounds completing or releasing a claim after the request
// itself is over (the sender may be gone, but the record must be written).
const finishTimeout = 5 * time.Second

// webhook is one deduplicated request as it goes through the proxy.
type webhook struct {
	route   *Route
	ext     *providers.Extractor
	start   time.Time
	id      string
	key     string
	outcome string
	status  int
	body    []byte // nil when the body streams
	err     error
	// upstream is the time the exchange with the upstream took, of which
	// settling is the proxy's own (completing the claim); zero when the
	// request was not forwarded.
	upstream, settling time.Duration
	// replay hands the buffered body on; unused when the body streams.
	replay replayBody
	// ex relays the upstream's answer, once the webhook is forwarded.
	ex exchange
	// claim is the claim a forwarded first-seen webhook holds.
	claim claimed
}

func (h *Handler) serveWebhook(w http.ResponseWriter, r *http.Request, route *Route, ext *providers.Extractor) {
	wh := &webhook{route: route, ext: ext, start: time.Now()}
	defer h.logWebhook(r, wh)
	if h.dropsCheckedHeader(w, r, wh) {
		return
	}

	// An async route keeps the whole body for its background delivery.
	if ext.NeedsBody || h.cfg.BodyFingerprint || route.Delivery == AsyncDelivery {
		buf, err := h.readBody(w, r)
		defer h.putBody(buf)
		if err != nil {
			h.bodyRefused(w, wh, err)
			return
		}
		wh.body = buf.bytes()
		wh.replay.Reset(wh.body)
		r.Body = &wh.replay
	} else if 0 < r.ContentLength && r.ContentLength <= maxArrivedBody {
		buf := h.pool.get()
		defer h.pool.put(buf)
		if err := h.takeArrivedBody(r, wh, buf); err != nil {
			wh.err = err
			h.answer(w, wh, http.StatusBadRequest, outcomeBadRequest, "could not read the body")
			return
		}
	}

	if ext.Verifier != nil {
		if err := ext.Verifier.Verify(r.Header, wh.body, h.cfg.Now()); err != nil {
			wh.err = err
			h.answer(w, wh, http.StatusUnauthorized, outcomeInvalidSignature, "signature invalid")
			return
		}
	}

	id, err := ext.EventID(r.Header, wh.body)
	switch {
	case errors.Is(err, providers.ErrNotEvent):
		h.forwardUnchecked(w, r, wh)
		return
	case errors.Is(err, providers.ErrNoID):
		wh.err = err
		if h.cfg.OnMissingID == RejectMissingID {
			h.answer(w, wh, http.StatusBadRequest, outcomeMissingID, "no event ID found")
			return
		}
		h.forwardUnchecked(w, r, wh)
		return
	case err != nil:
		wh.err = err
		h.answer(w, wh, http.StatusBadRequest, outcomeInvalidID, "event ID longer than 512 bytes, ambiguous or with control characters")
		return
	}
	wh.id = id
	wh.key = dedup.EventKey(h.cfg.KeyPrefix, ext.Namespace, id)

	if h.cfg.BodyFingerprint && h.seenBody(w, r, wh) {
		return
	}
	if route.Delivery == AsyncDelivery {
		h.accept(w, r, wh)
		return
	}
	h.claimAndForward(w, r, wh)
}

// maxArrivedBody bounds the declared length of a body that takeArrivedBody
// reads on a route that streams.
const maxArrivedBody = 16 << 10

// takeArrivedBody makes one read of a small body on a route that streams
// it (a header-sourced ID, no signature to check). A webhook's body usually
// arrives with its headers and is already in net/http's buffer, so that
// read does not wait. When it returns the whole body, the body is handed
// on from memory, as on routes that read it: its headers and body then
// reach the upstream in one write, not two. When it returns only a part,
// that part goes first and the rest streams. Either way the proxy holds
// one chunk at most, waits only as a streaming copy waits for its first
// bytes, and answers no 413 (MAX_BODY_BYTES is for routes that must hold
// the body).
func (h *Handler) takeArrivedBody(r *http.Request, wh *webhook, buf *bytes.Buffer) error {
	buf.Grow(int(r.ContentLength))
	chunk := buf.AvailableBuffer()[:r.ContentLength]
	n, err := r.Body.Read(chunk)
	if err != nil && !errors.Is(err, io.EOF) {
		return errors.Join(errBodyRead, err)
	}
	if int64(n) == r.ContentLength {
		wh.body = chunk[:n]
		wh.replay.Reset(wh.body)
		r.Body = &wh.replay
		return nil
	}
	r.Body = readCloser{io.MultiReader(bytes.NewReader(chunk[:n]), r.Body), r.Body}
	return nil
}

// claimAndForward claims the event and forwards it, or answers the duplicate.
func (h *Handler) claimAndForward(w http.ResponseWriter, r *http.Request, wh *webhook) {
	ctx := r.Context()
	var waitUntil time.Time
	if h.cfg.InflightWait > 0 {
		waitUntil = time.Now().Add(h.cfg.InflightWait)
	}
	for {
		start := time.Now()
		claim, rec, err := h.cfg.Store.Claim(ctx, wh.key, h.cfg.LeaseTTL)
		if err != nil {
			h.storeFailed(w, r, wh, opClaim, start, err)
			return
		}
		h.m.observeStore(opClaim, start, nil)
		if claim.Token != "" {
			h.forwardClaimed(w, r, wh, claim)
			return
		}
		if h.cfg.ShadowMode {
			if rec.State == dedup.Completed {
				h.checkPayload(wh, rec)
			}
			h.forward(w, r, wh, outcomeShadowDuplicate)
			return
		}
		if rec.State == dedup.Completed {
			h.duplicate(w, wh, rec)
			return
		}
		if waitUntil.IsZero() {
			h.inFlight(w, wh, rec)
			return
		}
		// In flight: wait for the first copy's outcome.
		rec, err = h.awaitOutcome(ctx, wh.key, waitUntil)
		switch {
		case ctx.Err() != nil:
			h.senderGone(w, wh, ctx.Err())
			return
		case err != nil && !errors.Is(err, errWaitOver):
			h.storeUnavailable(w, r, wh, err)
			return
		case rec.State == dedup.Completed:
			h.duplicate(w, wh, rec)
			return
		case rec.State == dedup.Absent:
			continue // released: try to claim it ourselves
		}
		h.inFlight(w, wh, rec)
		return
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
		start := time.Now()
		rec, err := h.cfg.Store.Lookup(ctx, key)
		if errors.Is(err, dedup.ErrNotFound) {
			h.m.observeStore(opLookup, start, nil)
			return dedup.Record{State: dedup.Absent}, nil
		}
		if err != nil && ctx.Err() != nil {
			return rec, ctx.Err() // the sender is gone, not the store
		}
		h.m.observeStore(opLookup, start, err)
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

// claimed is a forwarded request that holds a claim, until it is settled:
// completed on a 2xx answer, released on anything else. It is also the
// forwarded request's context, which is how settle, called with the
// upstream's answer alone, finds it: as context.WithValue would, without
// allocating a context of its own.
type claimed struct {
	context.Context
	wh      *webhook
	claim   dedup.Claim
	hasher  *hashingBody // fingerprints a streamed body; nil when buffered
	settled bool
}

type claimedKey struct{}

func (c *claimed) Value(key any) any {
	if key == (claimedKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// forwardClaimed forwards a claimed event. The claim is settled as soon as
// the upstream's answer arrives, before the sender sees it (settle, run as
// ModifyResponse), so a retry sent the moment the sender has its answer
// already finds the record. When no answer comes (upstream error, timeout,
// sender gone, or a panic from a broken copy) the claim is released.
func (h *Handler) forwardClaimed(w http.ResponseWriter, r *http.Request, wh *webhook, claim dedup.Claim) {
	h.m.inflight.Inc()
	c := &wh.claim
	c.wh, c.claim = wh, claim
	if wh.body == nil && r.Body != nil && r.Body != http.NoBody {
		// Stream the body to the upstream, fingerprinting it on the way.
		c.hasher = newHashingBody(r.Body, r.ContentLength)
		r.Body = c.hasher
	}
	ex := wh.newExchange(w, outcomeForwarded)
	defer func() {
		// Runs during a panic too (httputil.ReverseProxy aborts the handler
		// with http.ErrAbortHandler when the response copy fails).
		h.m.inflight.Dec()
		wh.status, wh.outcome = ex.status, ex.outcome
		if !c.settled {
			h.release(r.Context(), c)
		}
	}()
	h.exchange(ex, r, wh, c)
}

// settle completes or releases the claim of a forwarded request when the
// upstream's answer arrives. With ReplayResponse it first reads the body (up
// to ReplayMaxBytes) to keep it, then hands it on unchanged.
func (h *Handler) settle(resp *http.Response) error {
	c, _ := resp.Request.Context().Value(claimedKey{}).(*claimed)
	if c == nil {
		return nil // not a claimed webhook
	}
	c.settled = true
	defer func(start time.Time) { c.wh.settling = time.Since(start) }(time.Now())
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		h.release(resp.Request.Context(), c)
		return nil
	}
	// The body's own record (rememberBody) is found by the whole
	// fingerprint, and the admin API's forget finds it from this one's.
	res := dedup.Result{Status: resp.StatusCode, FullFingerprint: h.cfg.BodyFingerprint}
	switch {
	case c.wh.body != nil:
		res.Fingerprint = fingerprint(c.wh.body)
	case c.hasher != nil:
		res.Fingerprint, _ = c.hasher.sum() // zero (unknown) if the app answered before reading it all
	}
	if h.cfg.ReplayResponse {
		kept, err := io.ReadAll(io.LimitReader(resp.Body, int64(h.cfg.ReplayMaxBytes)+1))
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(kept), resp.Body), resp.Body}
		// A body too large or cut short is not kept: duplicates then get
		// the plain duplicate answer rather than a truncated copy.
		if err == nil && len(kept) <= h.cfg.ReplayMaxBytes {
			res.ContentType = resp.Header.Get("Content-Type")
			res.Body = kept
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(resp.Request.Context()), finishTimeout)
	defer cancel()
	start := time.Now()
	err := h.cfg.Store.Complete(ctx, c.claim, res, c.wh.ext.TTL)
	h.storeFinished(opComplete, start, c.wh, err)
	if err == nil && h.cfg.BodyFingerprint && c.wh.body != nil {
		h.rememberBody(ctx, c.wh, res)
	}
	return nil
}

// release gives the claim up so that the sender's retry is forwarded.
func (h *Handler) release(ctx context.Context, c *claimed) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	start := time.Now()
	err := h.cfg.Store.Release(ctx, c.claim)
	h.storeFinished(opRelease, start, c.wh, err)
	if err == nil {
		h.m.released.Inc()
	}
}

type readCloser struct {
	io.Reader
	io.Closer
}

func (h *Handler) storeFinished(op string, start time.Time, wh *webhook, err error) {
	if errors.Is(err, dedup.ErrNotOwner) {
		h.m.observeStore(op, start, nil)
		h.m.leaseLost.Inc()
		h.log.Warn("lease expired before "+op+": the event may be forwarded again",
			zap.String("namespace", wh.ext.Namespace), zap.String("event_id", wh.id))
		return
	}
	h.m.observeStore(op, start, err)
	if err != nil {
		h.log.Error(op+" failed: the claim stays until its lease expires",
			zap.String("namespace", wh.ext.Namespace), zap.String("event_id", wh.id), zap.Error(err))
	}
}

// forwardUnchecked forwards without deduplication (no ID, handshakes, store down).
func (h *Handler) forwardUnchecked(w http.ResponseWriter, r *http.Request, wh *webhook) {
	h.forward(w, r, wh, outcomeForwardedUnchecked)
}

func (h *Handler) forward(w http.ResponseWriter, r *http.Request, wh *webhook, outcome string) {
	ex := wh.newExchange(w, outcome)
	defer func() { wh.status, wh.outcome = ex.status, ex.outcome }()
	h.exchange(ex, r, wh, nil)
}

// exchange sends r to the upstream under UpstreamTimeout and relays the
// answer. A claimed request carries c in its context, for settle.
func (h *Handler) exchange(ex *exchange, r *http.Request, wh *webhook, c *claimed) {
	bounded, cancel := context.WithTimeout(r.Context(), h.cfg.UpstreamTimeout)
	defer cancel()
	stop := context.AfterFunc(h.abandon, cancel)
	defer stop()
	ctx := bounded
	if c != nil {
		c.Context = bounded
		ctx = c
	}
	start := time.Now()
	defer func() {
		wh.upstream = time.Since(start)
		h.m.upstream.Observe(wh.upstream.Seconds())
	}()
	h.reverse.ServeHTTP(ex, r.WithContext(ctx))
}

func (h *Handler) storeUnavailable(w http.ResponseWriter, r *http.Request, wh *webhook, err error) {
	wh.err = err
	if h.cfg.OnStoreError == ForwardOnStoreError {
		h.log.Warn("store unavailable: forwarding unchecked", zap.Error(err))
		h.forwardUnchecked(w, r, wh)
		return
	}
	w.Header().Set("Retry-After", storeErrorRetryAfter)
	h.answer(w, wh, http.StatusServiceUnavailable, outcomeStoreUnavailable, "dedup store unavailable, retry later")
}

// storeFailed answers a webhook whose store call (op, begun at start)
// failed: the sender's own hang-up, which cancelled the call, or else the
// store's failure, counted as such.
func (h *Handler) storeFailed(w http.ResponseWriter, r *http.Request, wh *webhook, op string, start time.Time, err error) {
	if r.Context().Err() != nil {
		h.senderGone(w, wh, err)
		return
	}
	h.m.observeStore(op, start, err)
	h.storeUnavailable(w, r, wh, err)
}

// senderGone ends a webhook whose sender hung up while its event was being
// looked up: net/http cancelled the request's context, which interrupted
// the store call. Nothing was forwarded. The answer is for a sender that
// only half-closed its connection, if any: retry later.
func (h *Handler) senderGone(w http.ResponseWriter, wh *webhook, err error) {
	wh.err = err
	w.Header().Set("Retry-After", storeErrorRetryAfter)
	h.answer(w, wh, http.StatusServiceUnavailable, outcomeClientGone, "the sender went away")
}

// duplicate answers a duplicate of a completed event.
func (h *Handler) duplicate(w http.ResponseWriter, wh *webhook, rec dedup.Record) {
	h.checkPayload(wh, rec)
	if h.cfg.ReplayResponse && rec.Result.Status != 0 && (len(rec.Result.Body) > 0 || rec.Result.ContentType != "") {
		w.Header().Set(HeaderOutcome, outcomeDuplicate)
		if rec.Result.ContentType != "" {
			w.Header().Set("Content-Type", rec.Result.ContentType)
		}
		w.WriteHeader(rec.Result.Status)
		_, _ = w.Write(rec.Result.Body)
		wh.status, wh.outcome = rec.Result.Status, outcomeDuplicate
		return
	}
	h.answer(w, wh, http.StatusOK, outcomeDuplicate, "")
}

// checkPayload logs and counts a duplicate of a completed event whose body
// differs from the original's (in shadow mode too, where it is forwarded).
func (h *Handler) checkPayload(wh *webhook, rec dedup.Record) {
	if wh.body != nil && rec.Result.KnownBody() && !rec.Result.SameBody(fingerprint(wh.body)) {
		h.m.payloadMismatch.WithLabelValues(wh.route.Path).Inc()
		h.log.Warn("duplicate event ID with a different body: treated as a duplicate",
			zap.String("namespace", wh.ext.Namespace), zap.String("event_id", wh.id))
	}
}

// inFlight answers a duplicate whose first copy is still with the upstream.
func (h *Handler) inFlight(w http.ResponseWriter, wh *webhook, rec dedup.Record) {
	status := h.cfg.InflightStatus
	if wh.ext.InflightStatus != 0 {
		status = wh.ext.InflightStatus
	}
	secs := int64((rec.TTL + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", itoa(max(secs, 1)))
	h.answer(w, wh, status, outcomeInFlight, "the first delivery of this event is still being processed")
}

// seenBody answers a duplicate when the same body was already completed
// (DEDUP_BODY_FINGERPRINT), and reports whether it did.
func (h *Handler) seenBody(w http.ResponseWriter, r *http.Request, wh *webhook) bool {
	start := time.Now()
	rec, err := h.cfg.Store.Lookup(r.Context(), h.bodyKey(wh))
	if errors.Is(err, dedup.ErrNotFound) {
		h.m.observeStore(opLookup, start, nil)
		return false
	}
	if err != nil {
		h.storeFailed(w, r, wh, opLookup, start, err)
		return true
	}
	h.m.observeStore(opLookup, start, nil)
	if rec.State != dedup.Completed {
		return false
	}
	if h.cfg.ShadowMode {
		h.forward(w, r, wh, outcomeShadowDuplicate)
		return true
	}
	h.duplicate(w, wh, rec)
	return true
}

// rememberBody records the completed body's fingerprint under its own key.
func (h *Handler) rememberBody(ctx context.Context, wh *webhook, res dedup.Result) {
	key := h.bodyKey(wh)
	start := time.Now()
	claim, _, err := h.cfg.Store.Claim(ctx, key, h.cfg.LeaseTTL)
	h.m.observeStore(opClaim, start, err)
	if err != nil || claim.Token == "" {
		return // already recorded by another delivery, or the store failed: the ID key still holds
	}
	start = time.Now()
	res.FullFingerprint = false // its key holds the whole one
	err = h.cfg.Store.Complete(ctx, claim, res, wh.ext.TTL)
	h.storeFinished(opComplete, start, wh, err)
}

// bodyKey is the key of a body fingerprint. '#' never occurs in a route path
// or preset name, so it cannot collide with an event ID key.
func (h *Handler) bodyKey(wh *webhook) string {
	fp := fingerprint(wh.body)
	return dedup.BodyKey(h.cfg.KeyPrefix, wh.ext.Namespace, fp)
}

func (h *Handler) logWebhook(r *http.Request, wh *webhook) {
	h.m.requests.WithLabelValues(wh.route.Path, wh.outcome).Inc()
	if wh.upstream > 0 {
		h.m.added.Observe(max(time.Since(wh.start)-wh.upstream+wh.settling, 0).Seconds())
	}
	level := zap.InfoLevel
	if wh.outcome == outcomeInvalidSignature || wh.outcome == outcomeStoreUnavailable || wh.outcome == outcomeUpstreamError {
		level = zap.WarnLevel
	}
	ce := h.log.Check(level, "webhook")
	if ce == nil {
		return
	}
	buf := h.logFields.get()
	defer h.logFields.put(buf)
	fields := append(*buf,
		zap.String("route", wh.route.Path),
		zap.String("namespace", wh.ext.Namespace),
		zap.String("event_id", wh.id),
		zap.String("request_id", requestID(r, wh)),
		zap.String("outcome", wh.outcome),
		zap.Int("status", wh.status),
		zap.Duration("duration", time.Since(wh.start)),
	)
	if tp := r.Header.Get("Traceparent"); tp != "" {
		fields = append(fields, zap.String("traceparent", tp))
	}
	if wh.err != nil {
		fields = append(fields, zap.String("reason", wh.err.Error()))
	}
	*buf = fields
	ce.Write(fields...)
}

// maxRequestIDLen bounds what a sender's X-Request-Id puts in a log line.
const maxRequestIDLen = 128

// requestID names the request in the logs so that a line can be matched
// with the app's: an X-Request-Id set by the sender or an ingress, else the
// event ID, which for most presets is the provider's delivery ID
// (X-GitHub-Delivery, X-Shopify-Webhook-Id, webhook-id).
func requestID(r *http.Request, wh *webhook) string {
	if id := r.Header.Get("X-Request-Id"); id != "" {
		return id[:min(len(id), maxRequestIDLen)]
	}
	return wh.id
}
