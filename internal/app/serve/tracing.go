package serve

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// serviceName is the service.name of the spans unless OTEL_SERVICE_NAME
// (or service.name in OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const serviceName = "webhook-dedup"

// tracingShutdownTimeout bounds flushing the spans still batched at exit.
const tracingShutdownTimeout = 5 * time.Second

// tracingOn reports whether environ asks for traces: OTEL_TRACES_EXPORTER
// set to an exporter other than none, or, with OTEL_TRACES_EXPORTER unset,
// an OTLP endpoint set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). OTEL_SDK_DISABLED=true turns it off
// whatever else is set. Off is the default: a sidecar without a collector
// pays nothing for tracing.
func tracingOn(environ map[string]string) bool {
	if strings.EqualFold(strings.TrimSpace(environ["OTEL_SDK_DISABLED"]), "true") {
		return false
	}
	if exp := strings.TrimSpace(environ["OTEL_TRACES_EXPORTER"]); exp != "" {
		return exp != "none"
	}
	return environ["OTEL_EXPORTER_OTLP_ENDPOINT"] != "" || environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] != ""
}

// setupTracing returns the TracerProvider the proxy and the workers trace
// with, and how to flush and stop it; a nil provider (and a no-op stop)
// when tracing is off (tracingOn). The SDK configures itself from the
// standard OTEL_* variables of the process's environment: the exporter
// (autoexport: OTEL_TRACES_EXPORTER, otlp by default, over
// OTEL_EXPORTER_OTLP_PROTOCOL, http/protobuf by default, to
// OTEL_EXPORTER_OTLP_ENDPOINT, with its headers, timeout, compression and
// certificates), the batching (OTEL_BSP_*), the sampler
// (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG; parent-based by default,
// so a sender's sampling decision holds), the span limits and the resource
// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, over service.name
// webhook-dedup and service.version version). A value the SDK refuses is
// an error naming its variable.
//
// What the SDK reports of itself goes to log: OpenTelemetry's global error
// handler and logger are the one place it says that an export failed or a
// variable was malformed, and their default writes plain text to stderr,
// among JSON lines. They are set only when tracing is on.
func setupTracing(ctx context.Context, environ map[string]string, version string, log *zap.Logger) (trace.TracerProvider, func(), error) {
	if !tracingOn(environ) {
		return nil, func() {}, nil
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("the tracing SDK failed: spans may be lost", zap.Error(err))
	}))
	otel.SetLogger(logr.New(zapSink{log}))
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", exporterVariables(environ), err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(serviceName), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // last, so that the operator's values win
	)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("flushing the last spans failed", zap.Error(err))
		}
	}
	return tp, stop, nil
}

// exporterVariables names the variables that choose the exporter, with
// their values where set, for the error of an exporter the SDK refused.
func exporterVariables(environ map[string]string) string {
	names := []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"}
	for i, name := range names {
		if v, ok := environ[name]; ok {
			names[i] = fmt.Sprintf("%s=%q", name, v)
		}
	}
	return strings.Join(names, ", ")
}

// zapSink is the SDK's logger (a logr.Logger) writing to the process's
// log. The SDK says warnings at V(1) (a malformed OTEL_* value, spans
// dropped at a limit) and chatter at V(4) and beyond: V(0) and V(1) are
// warnings here, the rest debug.
type zapSink struct{ log *zap.Logger }

func (zapSink) Init(logr.RuntimeInfo) {}

func (s zapSink) Enabled(level int) bool {
	return level <= 1 || s.log.Core().Enabled(zap.DebugLevel)
}

func (s zapSink) Info(level int, msg string, kv ...any) {
	lvl := zap.WarnLevel
	if level > 1 {
		lvl = zap.DebugLevel
	}
	if ce := s.log.Check(lvl, msg); ce != nil {
		ce.Write(zapFields(kv)...)
	}
}

func (s zapSink) Error(err error, msg string, kv ...any) {
	s.log.Error(msg, append(zapFields(kv), zap.Error(err))...)
}

func (s zapSink) WithValues(kv ...any) logr.LogSink { return zapSink{s.log.With(zapFields(kv)...)} }

func (s zapSink) WithName(name string) logr.LogSink { return zapSink{s.log.Named(name)} }

// zapFields are logr's alternating keys and values as zap fields.
func zapFields(kv []any) []zap.Field {
	fields := make([]zap.Field, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		fields = append(fields, zap.Any(fmt.Sprint(kv[i]), kv[i+1]))
	}
	return fields
}
