package proxy

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/providers"
)

// logWebhook counts a webhook and writes its one log line: what became of
// it, and every reason why, each error once.
func (h *Handler) logWebhook(r *http.Request, wh *webhook, res result) {
	h.m.countRequest(wh.route.Path, res.outcome)
	if res.upstream > 0 {
		answered := res.answered
		if answered == 0 {
			answered = time.Since(wh.start)
		}
		h.m.added.Observe(max(answered-res.upstream+res.settling, 0).Seconds())
	}
	ce := h.log.Check(logLevel(res), "webhook")
	if ce == nil {
		return
	}
	id := loggedID(r, wh)
	buf := h.logFields.get()
	defer h.logFields.put(buf)
	fields := append(*buf,
		zap.String("route", wh.route.Path),
		zap.String("namespace", wh.ext.Namespace),
		zap.String("event_id", id),
		zap.String("request_id", requestID(r, id)),
		zap.String("outcome", res.outcome),
		zap.Int("status", res.status),
		zap.Duration("duration", time.Since(wh.start)),
	)
	if tp := r.Header.Get("Traceparent"); tp != "" {
		fields = append(fields, zap.String("traceparent", tp))
	}
	if res.err != nil {
		fields = append(fields, zap.String("reason", res.err.Error()))
	}
	if res.settleErr != nil {
		fields = append(fields, zap.String("settle_error", res.settleErr.Error()))
	}
	if res.mismatch {
		fields = append(fields, zap.String("payload", "duplicate event ID with a different body: treated as a duplicate"))
	}
	*buf = fields
	ce.Write(fields...)
}

// logLevel is error when a lease could not be settled (its claim stays
// until its lease expires), warn for what an operator should look at (the
// app failing among it: no answer, or a 5xx relayed from it), info for
// the rest.
func logLevel(res result) zapcore.Level {
	switch {
	case res.settleErr != nil && !errors.Is(res.settleErr, dedup.ErrNotOwner):
		return zap.ErrorLevel
	case res.settleErr != nil, res.mismatch,
		res.outcome == outcomeInvalidSignature, res.outcome == outcomeStoreUnavailable, res.outcome == outcomeUpstreamError,
		res.outcome == outcomeForwardedUnchecked && res.err != nil && !errors.Is(res.err, providers.ErrNoID),
		res.status >= 500 && relayed(res.outcome):
		return zap.WarnLevel
	}
	return zap.InfoLevel
}

// relayed reports whether a webhook with outcome was answered with the
// upstream's own response, rather than one the proxy wrote.
func relayed(outcome string) bool {
	return outcome == outcomeForwarded || outcome == outcomeForwardedUnchecked || outcome == outcomeShadowDuplicate
}

// loggedID is the event ID the log line names: the one claimed for or, for
// a webhook refused before its ID was taken (a bad signature, a body too
// large, a Connection header naming the ID), the ID its headers carry, so
// an operator sees which event a forger targeted. The body is not read
// for it: by now it may be back in its pool.
func loggedID(r *http.Request, wh *webhook) string {
	if wh.id != "" {
		return wh.id
	}
	id, err := wh.ext.EventID(r.Header, nil)
	if err != nil {
		return ""
	}
	return id
}

// maxRequestIDLen bounds what a sender's X-Request-Id puts in a log line.
const maxRequestIDLen = 128

// requestID names the request in the logs so that a line can be matched
// with the app's: an X-Request-Id set by the sender or an ingress, else the
// event ID, which for most presets is the provider's delivery ID
// (X-GitHub-Delivery, X-Shopify-Webhook-Id, webhook-id).
func requestID(r *http.Request, eventID string) string {
	if id := r.Header.Get("X-Request-Id"); id != "" {
		return id[:min(len(id), maxRequestIDLen)]
	}
	return eventID
}

// fieldPool recycles the fields of the per-webhook log line, about half a
// kilobyte a request: zap encodes them before Write returns, and its cores
// copy what they keep.
type fieldPool struct{ p sync.Pool }

// logLineFields is the most fields a webhook's log line has.
const logLineFields = 11

func (f *fieldPool) get() *[]zap.Field {
	if s, ok := f.p.Get().(*[]zap.Field); ok {
		return s
	}
	s := make([]zap.Field, 0, logLineFields)
	return &s
}

func (f *fieldPool) put(s *[]zap.Field) {
	if cap(*s) > logLineFields {
		return
	}
	clear(*s) // drop the references to this request's strings
	*s = (*s)[:0]
	f.p.Put(s)
}
