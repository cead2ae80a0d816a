// Package otlptest is an OTLP/HTTP trace receiver for tests: what a
// collector would receive from the proxy at /v1/traces, decoded from its
// protobuf (ExportTraceServiceRequest), for a test to look at.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Receiver is an OTLP/HTTP endpoint on a loopback port: its URL is what
// OTEL_EXPORTER_OTLP_ENDPOINT names. It keeps every span it receives.
type Receiver struct {
	*httptest.Server
	t     testing.TB
	mu    sync.Mutex
	spans []Span
}

// Span is one span received, with the attributes of the resource that
// sent it.
type Span struct {
	*tracepb.Span
	// Resource are the sender's resource attributes (service.name, …).
	Resource map[string]string
}

// New starts a receiver, closed when the test ends. A request it cannot
// decode fails the test.
func New(t testing.TB) *Receiver {
	r := &Receiver{t: t}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		r.t.Errorf("otlptest: %s %s, want POST /v1/traces", req.Method, req.URL.Path)
		http.NotFound(w, req)
		return
	}
	body := req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			r.fail(w, "gzip: %v", err)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		r.fail(w, "read: %v", err)
		return
	}
	var export coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &export); err != nil {
		r.fail(w, "decode %s body: %v", req.Header.Get("Content-Type"), err)
		return
	}
	r.mu.Lock()
	for _, rs := range export.GetResourceSpans() {
		res := Attributes(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, Span{Span: s, Resource: res})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *Receiver) fail(w http.ResponseWriter, format string, args ...any) {
	r.t.Errorf("otlptest: "+format, args...)
	http.Error(w, fmt.Sprintf(format, args...), http.StatusBadRequest)
}

// Spans are the spans received so far, in the order they arrived.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Await polls until found, given the spans received so far, reports true,
// and returns those spans; it fails the test after deadline, saying what
// it waited for.
func (r *Receiver) Await(t testing.TB, what string, deadline time.Duration, found func([]Span) bool) []Span {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		spans := r.Spans()
		if found(spans) {
			return spans
		}
		if time.Now().After(end) {
			t.Fatalf("otlptest: no %s within %s; received %d spans: %v", what, deadline, len(spans), spans)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Attr is the value of the span's attribute key as text ("" if unset).
func (s Span) Attr(key string) string { return Attributes(s.GetAttributes())[key] }

// TraceID, SpanID and ParentID are the span's IDs in hex, as a
// traceparent writes them ("" for no parent).
func (s Span) TraceID() string  { return HexID(s.GetTraceId()) }
func (s Span) SpanID() string   { return HexID(s.GetSpanId()) }
func (s Span) ParentID() string { return HexID(s.GetParentSpanId()) }

// HexID is a trace or span ID (a link's, say) as a traceparent writes it.
func HexID(id []byte) string { return hex.EncodeToString(id) }

func (s Span) String() string {
	return fmt.Sprintf("%s (%s, trace %s, span %s, parent %s)", s.GetName(), s.GetKind(), s.TraceID(), s.SpanID(), s.ParentID())
}

// Attributes are OTLP key-values as text: strings as they are, numbers
// and booleans as Go formats them.
func Attributes(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(x.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = strconv.FormatBool(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}
