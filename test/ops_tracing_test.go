package test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/otlptest"
)

// traceApp is an app that answers 200 and records the traceparent each
// request brought, by path.
type traceApp struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string][]string
}

func newTraceApp(t *testing.T) *traceApp {
	a := &traceApp{seen: map[string][]string{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen[r.URL.Path] = append(a.seen[r.URL.Path], r.Header.Get("Traceparent"))
		a.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *traceApp) traceparents(path string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.seen[path]...)
}

// traceSend posts one webhook with the sender's traceparent and returns
// the answer.
func traceSend(t *testing.T, px *proxy, path, id, traceparent string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(testContext(t), http.MethodPost, px.URL(path), strings.NewReader(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Event-Id", id)
	req.Header.Set("Traceparent", traceparent)
	a, err := do(newClient(t), req)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// findSpan is the first span that matches, or nil.
func findSpan(spans []otlptest.Span, match func(otlptest.Span) bool) *otlptest.Span {
	for i := range spans {
		if match(spans[i]) {
			return &spans[i]
		}
	}
	return nil
}

// childOf matches a span named name (a prefix of it, with a trailing
// space) whose parent is parent.
func childOf(parent otlptest.Span, name string) func(otlptest.Span) bool {
	return func(s otlptest.Span) bool {
		return s.TraceID() == parent.TraceID() && s.ParentID() == parent.SpanID() &&
			(s.GetName() == name || strings.HasSuffix(name, " ") && strings.HasPrefix(s.GetName(), name))
	}
}

// TestTracing: the binary with OTEL_EXPORTER_OTLP_ENDPOINT set exports
// its spans over OTLP/HTTP to that endpoint. On a sync route, the
// webhook's server span continues the sender's trace and names the
// route, the outcome and the event ID; a store call and the upstream
// request are its children, and the app receives the upstream span's
// traceparent, in the sender's trace. On an async route, the delivery
// attempt's span links to the span that accepted the event, and the app
// receives the attempt's trace.
func TestTracing(t *testing.T) {
	t.Parallel()
	rcv := otlptest.New(t)
	app := newTraceApp(t)
	env := map[string]string{
		"UPSTREAM_URL":                app.URL,
		"ROUTES":                      "/hooks/sync=header:X-Event-Id,/hooks/async=header:X-Event-Id;async",
		"DATA_DIR":                    t.TempDir(),
		"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY":     "50",
	}
	px := startProxy(t, env)
	px.awaitReady(t)

	const (
		syncTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
		asyncTrace = "0af7651916cd43dd8448eb211c80319c"
		senderSpan = "00f067aa0ba902b7"
	)
	expect(t, "sync webhook", traceSend(t, px, "/hooks/sync", "evt-sync", "00-"+syncTrace+"-"+senderSpan+"-01"), http.StatusOK, "forwarded")
	expect(t, "async webhook", traceSend(t, px, "/hooks/async", "evt-async", "00-"+asyncTrace+"-"+senderSpan+"-01"), http.StatusAccepted, "queued")

	isWebhook := func(trace string) func(otlptest.Span) bool {
		return func(s otlptest.Span) bool {
			return s.GetKind() == tracepb.Span_SPAN_KIND_SERVER && s.TraceID() == trace
		}
	}
	isAttempt := func(s otlptest.Span) bool { return s.GetKind() == tracepb.Span_SPAN_KIND_CONSUMER }
	// Exported every 50ms (OTEL_BSP_SCHEDULE_DELAY) once the delivery
	// attempt has ended.
	spans := rcv.Await(t, "webhook spans and the delivery attempt's upstream span", px.bounds().delivered(1), func(spans []otlptest.Span) bool {
		hook, attempt := findSpan(spans, isWebhook(syncTrace)), findSpan(spans, isAttempt)
		return hook != nil && findSpan(spans, childOf(*hook, "upstream")) != nil &&
			findSpan(spans, isWebhook(asyncTrace)) != nil &&
			attempt != nil && findSpan(spans, childOf(*attempt, "upstream")) != nil
	})

	t.Run("sync", func(t *testing.T) {
		hook := findSpan(spans, isWebhook(syncTrace))
		if hook.ParentID() != senderSpan {
			t.Errorf("webhook span %s: parent %s, want the sender's span %s", hook, hook.ParentID(), senderSpan)
		}
		for k, want := range map[string]string{"http.route": "/hooks/sync", "webhook.outcome": "forwarded", "webhook.event_id": "evt-sync", "http.response.status_code": "200"} {
			if got := hook.Attr(k); got != want {
				t.Errorf("webhook span %s: %s = %q, want %q", hook, k, got, want)
			}
		}
		if hook.Resource["service.name"] != "webhook-dedup" {
			t.Errorf("service.name %q, want webhook-dedup", hook.Resource["service.name"])
		}
		if store := findSpan(spans, childOf(*hook, "store ")); store == nil {
			t.Errorf("no store span under the webhook span %s; spans: %v", hook, spans)
		}
		up := findSpan(spans, childOf(*hook, "upstream"))
		got := app.traceparents("/hooks/sync")
		if want := "00-" + syncTrace + "-" + up.SpanID() + "-01"; len(got) != 1 || got[0] != want {
			t.Errorf("the app got traceparent %q, want the upstream span's %s", got, want)
		}
	})
	t.Run("async", func(t *testing.T) {
		accept := findSpan(spans, isWebhook(asyncTrace))
		if got := accept.Attr("webhook.outcome"); got != "queued" {
			t.Errorf("accepting span %s: outcome %q, want queued", accept, got)
		}
		attempt := findSpan(spans, isAttempt)
		links := attempt.GetLinks()
		if len(links) != 1 || otlptest.HexID(links[0].GetTraceId()) != asyncTrace || otlptest.HexID(links[0].GetSpanId()) != accept.SpanID() {
			t.Errorf("attempt span %s: links %v, want the accepting span %s", attempt, links, accept)
		}
		if got := attempt.Attr("webhook.delivery.result"); got != "succeeded" {
			t.Errorf("attempt span %s: result %q, want succeeded", attempt, got)
		}
		up := findSpan(spans, childOf(*attempt, "upstream"))
		got := app.traceparents("/hooks/async")
		if want := "00-" + attempt.TraceID() + "-" + up.SpanID() + "-01"; len(got) != 1 || got[0] != want {
			t.Errorf("the app got traceparent %q, want the attempt's upstream span's %s", got, want)
		}
	})
}
