package delivery

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/internal/tracing"
)

// acceptTraceParent is the traceparent of the span that accepted the
// event, as the proxy queues it.
const acceptTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestAttemptSpans: with tracing on, each attempt is a span of its own
// trace, linked to the accepting span, carrying the attempt's number and
// result, with its request to the app and its settling as children; the
// app receives the attempt's upstream span's traceparent in place of the
// sender's.
func TestAttemptSpans(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	a := newApp(t, func(attempt string) (int, string) {
		if attempt == "1" {
			return http.StatusServiceUnavailable, ""
		}
		return http.StatusOK, ""
	})
	q := newQueue(t)
	req := webhookRequest("{}")
	req.Route, req.Namespace, req.TTL, req.TraceParent = "/hooks", "github", time.Hour, acceptTraceParent
	req.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	q.enqueue(t, "p:github:d-1", req)
	traced := tracing.Backend(dedup.Backend{Store: q, Queue: q}, tp, "disk")
	stop := run(t, Config{Queue: traced.Queue, Upstream: mustURL(t, a.URL), KeyPrefix: "p:", TracerProvider: tp,
		InitialInterval: time.Millisecond, PollInterval: 5 * time.Millisecond})
	await(t, "completion", func() bool { return q.record(t, "p:github:d-1").State == dedup.Completed })
	stop() // every attempt has ended, and its span with it

	spans := sr.Ended()
	var attempts []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.SpanKind() == trace.SpanKindConsumer {
			attempts = append(attempts, s)
		}
	}
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(attempts))
	}
	received := a.requests()
	for i, s := range attempts {
		if s.Name() != "deliver /hooks" || s.Parent().IsValid() {
			t.Errorf("attempt %d: span %q with parent %s, want deliver /hooks, a root", i+1, s.Name(), s.Parent().SpanID())
		}
		if l := s.Links(); len(l) != 1 || tracing.TraceParent(l[0].SpanContext) != acceptTraceParent {
			t.Errorf("attempt %d: links %+v, want the accepting span %s", i+1, l, acceptTraceParent)
		}
		want := map[attribute.Key]string{tracing.Attempt: strconv.Itoa(i + 1), tracing.EventID: "d-1", tracing.Namespace: "github", "http.route": "/hooks"}
		if i == 0 {
			want[tracing.Result], want["http.response.status_code"] = "retry", "503"
		} else {
			want[tracing.Result], want["http.response.status_code"] = "succeeded", "200"
		}
		for _, kv := range s.Attributes() {
			if w, ok := want[kv.Key]; ok && kv.Value.String() == w {
				delete(want, kv.Key)
			}
		}
		if len(want) > 0 {
			t.Errorf("attempt %d: attributes %v lack %v", i+1, s.Attributes(), want)
		}
		if failed := s.Status().Code == codes.Error; failed != (i == 0) {
			t.Errorf("attempt %d: status %v", i+1, s.Status())
		}
		var kids []string
		var up trace.SpanContext
		for _, c := range spans {
			if c.Parent().SpanID() == s.SpanContext().SpanID() {
				kids = append(kids, c.Name())
				if c.Name() == "upstream" {
					up = c.SpanContext()
				}
			}
		}
		settle := map[int]string{0: "store retry", 1: "store succeed"}[i]
		if len(kids) != 2 || kids[0] != "upstream" || kids[1] != settle {
			t.Errorf("attempt %d: children %q, want the upstream request, then %s", i+1, kids, settle)
		}
		if got := received[i].header.Get("Traceparent"); !tracing.SpanContext(got).Equal(up.WithRemote(true)) {
			t.Errorf("attempt %d: the app got traceparent %q, want the attempt's upstream span's %s", i+1, got, tracing.TraceParent(up))
		}
	}
}

// TestAttemptUntraced: with tracing off, the app gets the sender's
// traceparent as queued.
func TestAttemptUntraced(t *testing.T) {
	a := newApp(t, nil)
	q := newQueue(t)
	req := webhookRequest("{}")
	req.TraceParent = acceptTraceParent
	req.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	q.enqueue(t, "k", req)
	run(t, Config{Queue: q, Upstream: mustURL(t, a.URL)})
	await(t, "completion", func() bool { return q.record(t, "k").State == dedup.Completed })
	if got := a.requests()[0].header.Get("Traceparent"); got != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Errorf("the app got traceparent %q, want the sender's", got)
	}
}
