package tracing_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/diskstore"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/tracing"
)

// recorder is an SDK tracer provider whose ended spans the test reads.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

// attr is the value of key on s, and whether s has it.
func attr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func TestTraceParentRoundTrip(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc := tracing.SpanContext(tp)
	if !sc.IsValid() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsSampled() {
		t.Fatalf("SpanContext(%q) = %+v", tp, sc)
	}
	if got := tracing.TraceParent(sc); got != tp {
		t.Errorf("TraceParent = %q, want %q", got, tp)
	}
	for _, bad := range []string{"", "00-zz-00f067aa0ba902b7-01", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if sc := tracing.SpanContext(bad); sc.IsValid() {
			t.Errorf("SpanContext(%q) = %+v, want none", bad, sc)
		}
	}
	if got := tracing.TraceParent(trace.SpanContext{}); got != "" {
		t.Errorf("TraceParent of no span = %q, want empty", got)
	}
}

// TestBackendSpans: the store's operations within a span are its
// children, named by operation; outside any span, none is made. A record
// not found, and a claim lost, are answers, not errors.
func TestBackendSpans(t *testing.T) {
	tp, sr := recorder(t)
	d, err := diskstore.Open(diskstore.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	b := tracing.Backend(d.Backend(), tp, "disk")
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()

	// Outside a span: no spans at all.
	storetest.MustClaim(t, b.Store, "outside", storetest.Lease)
	if _, err := b.Queue.Take(ctx, dedup.AllRoutes, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := len(sr.Ended()); n != 0 {
		t.Fatalf("%d spans outside any span, want none", n)
	}

	ctx, parent := tp.Tracer("test").Start(ctx, "webhook")
	c, _, err := b.Store.Claim(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Store.Claim(ctx, "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Store.Lookup(ctx, "absent"); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("lookup: %v", err)
	}
	if err := b.Store.Complete(ctx, c, dedup.Result{Status: 200}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if won, _, err := b.Queue.Enqueue(ctx, "q", storetest.Request, 0); err != nil || !won {
		t.Fatalf("enqueue: %v, %v", won, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Store.Lookup(cancelled, "k"); err == nil {
		t.Fatal("lookup on a cancelled context succeeded")
	}
	parent.End()

	type want struct {
		name    string
		claimed string // the webhook.claimed attribute; "" for none
		state   string // the webhook.record.state attribute; "" for none
		failed  bool
	}
	wants := []want{
		{"store claim", "true", "", false},
		{"store claim", "false", "in-flight", false},
		{"store lookup", "", "absent", false},
		{"store complete", "", "", false},
		{"store enqueue", "true", "", false},
		{"store lookup", "", "absent", true},
	}
	spans := sr.Ended()
	if len(spans) != len(wants)+1 {
		t.Fatalf("%d spans, want %d and the parent", len(spans), len(wants))
	}
	for i, w := range wants {
		s := spans[i]
		if s.Name() != w.name || s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanKind() != trace.SpanKindClient {
			t.Errorf("span %d: %s (kind %s, parent %s), want %s, a client child of the webhook's", i, s.Name(), s.SpanKind(), s.Parent().SpanID(), w.name)
		}
		if v, _ := attr(s, "db.system.name"); v.AsString() != "webhook-dedup.disk" {
			t.Errorf("%s: db.system.name %q", s.Name(), v.String())
		}
		if v, ok := attr(s, tracing.Claimed); (w.claimed == "") == ok || (ok && v.String() != w.claimed) {
			t.Errorf("%s: webhook.claimed %q (set: %v), want %q", s.Name(), v.String(), ok, w.claimed)
		}
		if v, ok := attr(s, tracing.State); (w.state == "") == ok || (ok && v.AsString() != w.state) {
			t.Errorf("%s: webhook.record.state %q (set: %v), want %q", s.Name(), v.String(), ok, w.state)
		}
		if failed := s.Status().Code == codes.Error; failed != w.failed {
			t.Errorf("%s: status %v, want failed %v", s.Name(), s.Status(), w.failed)
		}
	}
}

// app records the headers of the requests it gets.
type app struct {
	*httptest.Server
	mu      sync.Mutex
	headers []http.Header
}

func newApp(t *testing.T) *app {
	a := &app{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.headers = append(a.headers, r.Header.Clone())
		a.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *app) last() http.Header {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.headers[len(a.headers)-1]
}

const senderTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// get sends a GET through rt on ctx, with the sender's trace headers,
// reads the answer and returns it with the header as it was sent.
func get(t *testing.T, rt http.RoundTripper, ctx context.Context, url string) (*http.Response, *http.Request) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Traceparent", senderTraceParent)
	req.Header.Set("Tracestate", "sender=1")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp, req
}

// TestTransport: a request within a span gets an upstream client span,
// its child, whose trace context replaces the sender's in the request the
// app receives (the sender's tracestate with it); the caller's request is
// left as it was, and is the answer's. Outside a span, the request is sent
// untouched.
func TestTransport(t *testing.T) {
	tp, sr := recorder(t)
	a := newApp(t)
	inner := &http.Transport{}
	t.Cleanup(inner.CloseIdleConnections)
	rt := tracing.Transport(inner, tp, nil)

	resp, _ := get(t, rt, context.Background(), a.URL)
	if got := a.last(); got.Get("Traceparent") != senderTraceParent || got.Get("Tracestate") != "sender=1" {
		t.Errorf("outside a span, the app got traceparent %q, tracestate %q: want the sender's, untouched", got.Get("Traceparent"), got.Get("Tracestate"))
	}
	if resp.StatusCode != 200 || len(sr.Ended()) != 0 {
		t.Fatalf("outside a span: %d, %d spans; want 200 and none", resp.StatusCode, len(sr.Ended()))
	}

	ctx, parent := tp.Tracer("test").Start(context.Background(), "webhook")
	resp, req := get(t, rt, ctx, a.URL)
	parent.End()
	if resp.Request != req || req.Header.Get("Traceparent") != senderTraceParent {
		t.Errorf("the caller's request was changed, or is not the answer's")
	}
	spans := sr.Ended()
	if len(spans) != 2 || spans[0].Name() != "upstream" {
		t.Fatalf("%d spans, want the upstream span, ended with its body, and the parent", len(spans))
	}
	up := spans[0]
	if up.SpanKind() != trace.SpanKindClient || up.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("upstream span: kind %s, parent %s; want a client child of the webhook span", up.SpanKind(), up.Parent().SpanID())
	}
	if v, _ := attr(up, "http.response.status_code"); v.AsInt64() != 200 {
		t.Errorf("upstream span: status %v, want 200", v.String())
	}
	if v, _ := attr(up, "http.request.method"); v.AsString() != "GET" {
		t.Errorf("upstream span: method %v, want GET", v.String())
	}
	got := a.last()
	sc := tracing.SpanContext(got.Get("Traceparent"))
	if sc.TraceID() != parent.SpanContext().TraceID() || sc.SpanID() != up.SpanContext().SpanID() {
		t.Errorf("the app got traceparent %q; want the upstream span's (trace %s, span %s)", got.Get("Traceparent"), up.SpanContext().TraceID(), up.SpanContext().SpanID())
	}
	if ts := got.Values("Tracestate"); len(ts) != 0 {
		t.Errorf("the app got the sender's tracestate %q beside the proxy's traceparent", ts)
	}
}

// TestTransportError: a request that gets no answer ends its span as an
// error.
func TestTransportError(t *testing.T) {
	tp, sr := recorder(t)
	a := newApp(t)
	a.Close() // nothing listens any more
	rt := tracing.Transport(&http.Transport{}, tp, nil)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "webhook")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.URL, strings.NewReader("x"))
	if _, err := rt.RoundTrip(req); err == nil {
		t.Fatal("no error from a closed app")
	}
	parent.End()
	if s := sr.Ended(); len(s) != 2 || s[0].Status().Code != codes.Error {
		t.Fatalf("spans %d; want the upstream span, failed, and the parent", len(s))
	}
}
