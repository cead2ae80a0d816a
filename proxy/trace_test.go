package proxy_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"
	"github.com/webhook-dedup/webhook-dedup/internal/tracing"
	"github.com/webhook-dedup/webhook-dedup/proxy"
)

// The sender's trace context, as a sender that traces sends it.
const (
	senderTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	senderSpanID      = "00f067aa0ba902b7"
	senderTraceParent = "00-" + senderTraceID + "-" + senderSpanID + "-01"
)

// traced is tracing on as serve wires it: an SDK provider (here recording
// the spans for the test) handed to the proxy, and the store traced.
type traced struct {
	tp *sdktrace.TracerProvider
	sr *tracetest.SpanRecorder
}

func newTraced(t *testing.T) *traced {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &traced{tp: tp, sr: sr}
}

// memoryStore is an embedded store whose calls are traced.
func (tr *traced) memoryStore(t *testing.T) proxy.Store {
	m := memstore.New()
	t.Cleanup(func() { m.Close() })
	return tracing.Backend(m.Backend(), tr.tp, "memory").Store
}

// awaitServerSpans waits until n server spans (one a webhook) have ended,
// and returns every span ended by then. The proxy ends a webhook's span
// once it has answered, so the sender may have its answer first.
func (tr *traced) awaitServerSpans(t *testing.T, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(loadMargin)
	for {
		spans := tr.sr.Ended()
		servers := 0
		for _, s := range spans {
			if s.SpanKind() == trace.SpanKindServer {
				servers++
			}
		}
		if servers >= n {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d webhook spans after %s, want %d", servers, loadMargin, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// spanAttrs are a span's attributes by key, as text.
func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.String()
	}
	return m
}

// children are the names of the spans whose parent is parent, in the
// order they ended.
func children(spans []sdktrace.ReadOnlySpan, parent trace.SpanContext) []string {
	var names []string
	for _, s := range spans {
		if s.Parent().SpanID() == parent.SpanID() && s.Parent().TraceID() == parent.TraceID() {
			names = append(names, s.Name())
		}
	}
	return names
}

// TestTracingWebhook: with tracing on, a webhook gets a server span that
// continues the sender's trace when it sends one (a new trace when not),
// named by its route and carrying its outcome and event ID, with its
// store calls and its upstream request as children; the app receives the
// upstream span's traceparent in place of the sender's. A 5xx from the
// app is the span's error.
func TestTracingWebhook(t *testing.T) {
	for _, tc := range []struct {
		name        string
		traceparent string // the sender's; "" for none
		appStatus   int
	}{
		{"the sender's trace continued", senderTraceParent, http.StatusOK},
		{"a new trace", "", http.StatusOK},
		{"the app failing", senderTraceParent, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTraced(t)
			f := newFixture(t, "/hooks=header:X-Id", proxy.Config{Store: tr.memoryStore(t), TracerProvider: tr.tp})
			f.up.setAnswer(func(w http.ResponseWriter, _ *http.Request, _ []byte) { w.WriteHeader(tc.appStatus) })
			header := map[string]string{"X-Id": "e1", "Tracestate": "sender=1"}
			if tc.traceparent != "" {
				header["Traceparent"] = tc.traceparent
			}
			if resp := f.post(t, "/hooks/x", header, "{}"); resp.StatusCode != tc.appStatus {
				t.Fatalf("answered %d, want the app's %d", resp.StatusCode, tc.appStatus)
			}
			spans := tr.awaitServerSpans(t, 1)
			var hook sdktrace.ReadOnlySpan
			for _, s := range spans {
				if s.SpanKind() == trace.SpanKindServer {
					hook = s
				}
			}
			sc := hook.SpanContext()
			if tc.traceparent != "" {
				if sc.TraceID().String() != senderTraceID || hook.Parent().SpanID().String() != senderSpanID || !hook.Parent().IsRemote() {
					t.Errorf("webhook span in trace %s, parent %s; want the sender's trace %s, parent %s", sc.TraceID(), hook.Parent().SpanID(), senderTraceID, senderSpanID)
				}
			} else if hook.Parent().IsValid() || sc.TraceID().String() == senderTraceID {
				t.Errorf("webhook span with parent %s in trace %s, want a new root", hook.Parent().SpanID(), sc.TraceID())
			}
			if hook.Name() != "POST /hooks" {
				t.Errorf("webhook span named %q, want POST /hooks", hook.Name())
			}
			a := spanAttrs(hook)
			for k, want := range map[attribute.Key]string{
				"http.route": "/hooks", "http.request.method": "POST", "url.path": "/hooks/x",
				"http.response.status_code": strconv.Itoa(tc.appStatus),
				tracing.Outcome:             "forwarded", tracing.EventID: "e1", tracing.Namespace: "/hooks",
			} {
				if a[k] != want {
					t.Errorf("webhook span's %s = %q, want %q", k, a[k], want)
				}
			}
			if failed := hook.Status().Code == codes.Error; failed != (tc.appStatus >= 500) {
				t.Errorf("webhook span status %v after the app's %d", hook.Status(), tc.appStatus)
			}
			// In the order they ended: a release ends before the upstream
			// request (before the sender's answer), a completion after it.
			want := []string{"store claim", "store release", "upstream"}
			if tc.appStatus < 300 {
				want = []string{"store claim", "upstream", "store complete"}
			}
			if kids := children(spans, sc); !slices.Equal(kids, want) {
				t.Errorf("the webhook span's children: %q; want %q", kids, want)
			}
			var up sdktrace.ReadOnlySpan
			for _, s := range spans {
				if s.Name() == "upstream" {
					up = s
				}
			}
			got := f.up.last(t).header
			if p := tracing.SpanContext(got.Get("Traceparent")); p.TraceID() != sc.TraceID() || p.SpanID() != up.SpanContext().SpanID() {
				t.Errorf("the app got traceparent %q; want the upstream span's, %s-%s", got.Get("Traceparent"), sc.TraceID(), up.SpanContext().SpanID())
			}
			if ts := got.Get("Tracestate"); tc.traceparent == "" && ts != "" {
				t.Errorf("the app got the sender's tracestate %q with the proxy's own trace", ts)
			}
		})
	}
}

// TestTracingDuplicate: a duplicate's span says so, and has no upstream
// child: the app is not contacted.
func TestTracingDuplicate(t *testing.T) {
	tr := newTraced(t)
	f := newFixture(t, "/hooks=header:X-Id", proxy.Config{Store: tr.memoryStore(t), TracerProvider: tr.tp})
	f.post(t, "/hooks/x", map[string]string{"X-Id": "e1"}, "{}")
	f.post(t, "/hooks/x", map[string]string{"X-Id": "e1", "Traceparent": senderTraceParent}, "{}")
	spans := tr.awaitServerSpans(t, 2)
	for _, s := range spans {
		if s.SpanKind() != trace.SpanKindServer || s.SpanContext().TraceID().String() != senderTraceID {
			continue
		}
		if a := spanAttrs(s); a[tracing.Outcome] != "duplicate" || a[tracing.EventID] != "e1" {
			t.Errorf("the duplicate's span: outcome %q, event %q", a[tracing.Outcome], a[tracing.EventID])
		}
		// A second claim when the first copy was still being completed
		// (answered first, completed right after): it waited, then claimed again.
		if kids := children(spans, s.SpanContext()); len(kids) == 0 || len(kids) > 2 || slices.ContainsFunc(kids, func(k string) bool { return k != "store claim" }) {
			t.Errorf("the duplicate's span's children: %q, want only its claims", kids)
		}
		return
	}
	t.Fatal("no span for the duplicate in the sender's trace")
}

// TestTracingUntouched: what is not a webhook (here a GET on a dedup
// route, and a POST on no route) gets no span and reaches the app with
// the sender's trace headers as sent; with tracing off, so does a
// webhook.
func TestTracingUntouched(t *testing.T) {
	for _, tc := range []struct {
		name    string
		on      bool
		method  string
		path    string
		webhook bool
	}{
		{"a GET, tracing on", true, http.MethodGet, "/hooks/x", false},
		{"no route, tracing on", true, http.MethodPost, "/elsewhere", false},
		{"a webhook, tracing off", false, http.MethodPost, "/hooks/x", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTraced(t)
			cfg := proxy.Config{}
			if tc.on {
				cfg = proxy.Config{Store: tr.memoryStore(t), TracerProvider: tr.tp}
			}
			f := newFixture(t, "/hooks=header:X-Id", cfg)
			req, err := http.NewRequest(tc.method, f.srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header["Traceparent"] = []string{senderTraceParent}
			req.Header["Tracestate"] = []string{"sender=1", "more=2"}
			req.Header.Set("X-Id", "e1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get(proxy.HeaderOutcome) != ""; got != tc.webhook {
				t.Fatalf("X-Webhook-Dedup %q: the request was not what the case is about", resp.Header.Get(proxy.HeaderOutcome))
			}
			got := f.up.last(t).header
			if tp, ts := got.Values("Traceparent"), got.Values("Tracestate"); len(tp) != 1 || tp[0] != senderTraceParent || len(ts) != 2 || ts[0] != "sender=1" || ts[1] != "more=2" {
				t.Errorf("the app got traceparent %q, tracestate %q: want the sender's, untouched", tp, ts)
			}
			if n := len(tr.sr.Ended()); n != 0 {
				t.Errorf("%d spans, want none", n)
			}
		})
	}
}

// TestTracingAccept: an async route's queued request keeps the webhook
// span's traceparent, for the delivery attempts' spans to link to; the
// enqueue is the span's child.
func TestTracingAccept(t *testing.T) {
	tr := newTraced(t)
	q := newQueueStore(t)
	b := tracing.Backend(q.Store.Backend(), tr.tp, "disk")
	f := newFixture(t, "/hooks=header:X-Id;async", proxy.Config{Store: b.Store, Queue: b.Queue, TracerProvider: tr.tp})
	if resp := f.post(t, "/hooks/x", map[string]string{"X-Id": "e1", "Traceparent": senderTraceParent}, "{}"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("answered %d, want 202", resp.StatusCode)
	}
	spans := tr.awaitServerSpans(t, 1)
	var hook sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.SpanKind() == trace.SpanKindServer {
			hook = s
		}
	}
	if a := spanAttrs(hook); a[tracing.Outcome] != "queued" {
		t.Errorf("webhook span outcome %q, want queued", a[tracing.Outcome])
	}
	if kids := children(spans, hook.SpanContext()); len(kids) != 1 || kids[0] != "store enqueue" {
		t.Errorf("the webhook span's children: %q, want the enqueue", kids)
	}
	ds, err := q.Take(context.Background(), dedup.AllRoutes, 1, time.Minute)
	if err != nil || len(ds) != 1 {
		t.Fatalf("take: %d, %v", len(ds), err)
	}
	if got, want := ds[0].Request.TraceParent, tracing.TraceParent(hook.SpanContext()); got != want || want == "" {
		t.Errorf("queued with traceparent %q, want the webhook span's %q", got, want)
	}
	if got := ds[0].Request.Header.Get("Traceparent"); got != senderTraceParent {
		t.Errorf("queued with the header traceparent %q, want the sender's, as sent", got)
	}
}
