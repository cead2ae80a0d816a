package tracing

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Transport returns next with a client span, "upstream", around each
// request made within a span (a webhook's, a delivery attempt's), from
// the request until the app's answer is read or closed. The request
// carries that span's trace context to the app: prop writes it into its
// traceparent (and tracestate), in place of the sender's, so that the
// app continues the proxy's trace, the sender's own when it sent one. A
// request made outside any span (one passed through) is sent untouched.
// If prop is nil, W3C trace context.
func Transport(next http.RoundTripper, tp trace.TracerProvider, prop propagation.TextMapPropagator) http.RoundTripper {
	if prop == nil {
		prop = traceContext
	}
	return &transport{next: next, tracer: tp.Tracer(Scope), prop: prop}
}

type transport struct {
	next   http.RoundTripper
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// RoundTrip sends a copy of req whose header carries the upstream span's
// trace context, and returns the answer with req as its Request: the
// hooks that look at the answer's request find the caller's context (its
// span, the proxy's own values), not the upstream span's.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if !within(ctx) {
		return t.next.RoundTrip(req)
	}
	ctx, span := t.tracer.Start(ctx, "upstream", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.HTTPRequestMethodKey.String(req.Method)))
	if host, port, err := net.SplitHostPort(req.URL.Host); err == nil {
		n, _ := strconv.Atoi(port)
		span.SetAttributes(semconv.ServerAddress(host), semconv.ServerPort(n))
	}
	out := req.WithContext(ctx)
	out.Header = req.Header.Clone()
	// The sender's tracestate belongs with its traceparent: a propagator
	// that writes none must not leave the sender's beside its own.
	out.Header.Del("Traceparent")
	out.Header.Del("Tracestate")
	t.prop.Inject(ctx, propagation.HeaderCarrier(out.Header))
	resp, err := t.next.RoundTrip(out)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.End()
		return nil, err
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetStatus(codes.Error, "")
	}
	resp.Request = req
	if _, rw := resp.Body.(io.ReadWriteCloser); rw || resp.Body == nil {
		// A switched protocol's body is the connection itself, which
		// ReverseProxy needs whole: the span ends with the headers.
		span.End()
		return resp, nil
	}
	resp.Body = &spanBody{ReadCloser: resp.Body, span: span}
	return resp, nil
}

// spanBody is the app's answer, whose span ends once it is read to its end
// or closed, whichever comes first.
type spanBody struct {
	io.ReadCloser
	span trace.Span
	once sync.Once
}

func (b *spanBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		if err != io.EOF {
			b.span.RecordError(err)
			b.span.SetStatus(codes.Error, err.Error())
		}
		b.end()
	}
	return n, err
}

func (b *spanBody) Close() error {
	err := b.ReadCloser.Close()
	b.end()
	return err
}

func (b *spanBody) end() { b.once.Do(func() { b.span.End() }) }
