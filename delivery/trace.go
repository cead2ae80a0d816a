package delivery

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/internal/tracing"
)

// attemptSpan is one delivery attempt's span. Every method does nothing
// when tracing is off (span nil), before building any attribute: off
// costs nothing per attempt.
type attemptSpan struct{ span trace.Span }

// startAttempt begins d's attempt span, the root of a trace of its own
// (an attempt may come hours after the accept, from another replica),
// linked to the span that accepted the event when the queued request
// kept its traceparent. The context it returns carries the span to the
// attempt's request to the app (whose traceparent becomes this trace's)
// and to its store calls.
func (w *Workers) startAttempt(ctx context.Context, d dedup.Delivery) (context.Context, attemptSpan) {
	if w.tracer == nil {
		return ctx, attemptSpan{}
	}
	r := d.Request
	opts := []trace.SpanStartOption{
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(semconv.HTTPRoute(r.Route), tracing.Namespace.String(r.Namespace), tracing.Attempt.Int(d.Attempt)),
	}
	if r.Namespace != "" {
		opts = append(opts, trace.WithAttributes(tracing.EventID.String(strings.TrimPrefix(d.Claim.Key, dedup.EventKey(w.cfg.KeyPrefix, r.Namespace, "")))))
	}
	if sc := tracing.SpanContext(r.TraceParent); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	name := "deliver"
	if r.Route != "" {
		name += " " + r.Route
	}
	ctx, span := w.tracer.Start(ctx, name, opts...)
	return ctx, attemptSpan{span}
}

// answered notes the app's answer to the attempt.
func (a attemptSpan) answered(o *outcome) {
	if a.span == nil {
		return
	}
	if o.status != 0 {
		a.span.SetAttributes(semconv.HTTPResponseStatusCode(o.status))
	}
	if o.err != nil {
		a.span.RecordError(o.err)
	}
}

// settled notes what became of the attempt: succeeded, or else (retry,
// dead-lettered) an error, for why.
func (a attemptSpan) settled(result, reason string) {
	if a.span == nil {
		return
	}
	a.span.SetAttributes(tracing.Result.String(result))
	if result != resultSucceeded {
		a.span.SetStatus(codes.Error, reason)
	}
}

// end ends the span.
func (a attemptSpan) end() {
	if a.span != nil {
		a.span.End()
	}
}
