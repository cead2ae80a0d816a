// Package tracing is what the proxy, the delivery workers and the
// composition root share of OpenTelemetry tracing, on the API alone (the
// SDK is set up in internal/app/serve): the attribute names of webhook spans,
// the W3C traceparent a queued request keeps, the spans around the store's
// operations (Backend) and around each request to the app, which carries
// the trace on to the app (Transport).
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of every span webhook-dedup makes.
const Scope = "github.com/webhook-dedup/webhook-dedup"

// Attributes of webhook-dedup's own, beside the semantic conventions'
// (http.*, db.*, server.*).
const (
	// EventID is the event ID a webhook was claimed for.
	EventID = attribute.Key("webhook.event_id")
	// Namespace is the event ID's namespace: the preset's name, or a
	// generic route's path.
	Namespace = attribute.Key("webhook.namespace")
	// Outcome is the X-Webhook-Dedup value the sender got.
	Outcome = attribute.Key("webhook.outcome")
	// Attempt is a background delivery attempt's number: 1 for the first.
	Attempt = attribute.Key("webhook.delivery.attempt")
	// Result is what became of a delivery attempt: succeeded, retry or
	// dead-lettered.
	Result = attribute.Key("webhook.delivery.result")
)

// traceContext is the W3C format of TraceParent, whatever propagator the
// requests use: what a queue keeps must read back the same in every
// version.
var traceContext propagation.TraceContext

// TraceParent is sc as a W3C traceparent header value ("" if sc is not
// valid): what a queued request keeps of the span that accepted it.
func TraceParent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	return c["traceparent"]
}

// SpanContext reads a TraceParent back; the zero SpanContext (not valid)
// if s is empty or malformed.
func SpanContext(s string) trace.SpanContext {
	if s == "" {
		return trace.SpanContext{}
	}
	ctx := traceContext.Extract(context.Background(), propagation.MapCarrier{"traceparent": s})
	return trace.SpanContextFromContext(ctx)
}

// within reports whether ctx carries a span: only then do the store and
// the transport make spans of their own, so that what runs outside a
// webhook or a delivery attempt (the workers' polling, readiness checks,
// the admin API, requests passed through) adds nothing to the traces and
// leaves every header as it was.
func within(ctx context.Context) bool {
	return trace.SpanContextFromContext(ctx).IsValid()
}
