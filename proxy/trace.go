package proxy

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/webhook-dedup/webhook-dedup/internal/tracing"
)

// startSpan begins the webhook's server span, a child of the sender's
// trace context when its request carries one, and returns the request
// carrying the span: every call made for the webhook (the store's, the
// upstream's) is then its child. Only called when tracing is on.
func (h *Handler) startSpan(r *http.Request, wh *webhook) *http.Request {
	ctx := h.cfg.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, wh.span = h.tracer.Start(ctx, r.Method+" "+wh.route.Path, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			semconv.HTTPRequestMethodKey.String(r.Method),
			semconv.HTTPRoute(wh.route.Path),
			semconv.URLPath(r.URL.Path),
			tracing.Namespace.String(wh.ext.Namespace),
		))
	return r.WithContext(ctx)
}

// endSpan ends the webhook's span with what became of it: the outcome
// (the X-Webhook-Dedup value), the status the sender got, and the event
// ID, the one its log line names. A 5xx, or an answer cut off, is an
// error, as the semantic conventions have it for a server; a 4xx is the
// sender's.
func (h *Handler) endSpan(r *http.Request, wh *webhook, res result) {
	span := wh.span
	span.SetAttributes(tracing.Outcome.String(res.outcome), semconv.HTTPResponseStatusCode(res.status))
	if id := loggedID(r, wh); id != "" {
		span.SetAttributes(tracing.EventID.String(id))
	}
	if res.status >= 500 || res.aborted {
		msg := http.StatusText(res.status)
		if res.err != nil {
			msg = res.err.Error()
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}

// storeCtx is the context of the store calls that must outlive the
// sender (the claim, the enqueue: see leases.claim): the Handler's own,
// carrying the webhook's span when it has one, so that their spans are
// its children.
func (h *Handler) storeCtx(wh *webhook) context.Context {
	if wh.span == nil {
		return h.abandon
	}
	return trace.ContextWithSpan(h.abandon, wh.span)
}

// traceParent is the webhook span's W3C traceparent, which a queued
// request keeps for its delivery attempts' spans to link to; "" when
// tracing is off.
func (wh *webhook) traceParent() string {
	if wh.span == nil {
		return ""
	}
	return tracing.TraceParent(wh.span.SpanContext())
}
