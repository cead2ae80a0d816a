package serve

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/otlptest"
)

func TestTracingOn(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, false},
		{map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false},
		{map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
	} {
		if got := tracingOn(tc.env); got != tc.want {
			t.Errorf("tracingOn(%v) = %v, want %v", tc.env, got, tc.want)
		}
	}
}

// setenv sets the process's environment for the SDK, which reads it
// there, and returns the same as the map Run is given.
func setenv(t *testing.T, env map[string]string) map[string]string {
	for k, v := range env {
		t.Setenv(k, v)
	}
	return env
}

// TestSetupTracingRefuses: an exporter or a protocol the SDK does not
// know stops the start, naming the variables.
func TestSetupTracingRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"an unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin-of-my-own"}},
		{"an unknown protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, _, err := setupTracing(context.Background(), setenv(t, tc.env), "v1", zap.NewNop())
			if err == nil || tp != nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") {
				t.Errorf("setupTracing = %v, %v; want an error naming the variables", tp, err)
			}
		})
	}
}

// TestSetupTracingExports: with an OTLP endpoint set, spans reach it over
// OTLP/HTTP, as service webhook-dedup at this version unless the
// operator's OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES say otherwise;
// stopping flushes the spans still batched. What the SDK says of itself
// (here a malformed OTEL_EXPORTER_OTLP_HEADERS) is in the process's log.
func TestSetupTracingExports(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		service string
	}{
		{"defaults", nil, "webhook-dedup"},
		{"the operator's name", map[string]string{"OTEL_SERVICE_NAME": "billing-hooks"}, "billing-hooks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcv := otlptest.New(t)
			env := map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL,
				"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment.name=test",
				"OTEL_EXPORTER_OTLP_HEADERS":  "no-equals-sign",
				"OTEL_BSP_SCHEDULE_DELAY":     "3600000", // only stop flushes
			}
			for k, v := range tc.env {
				env[k] = v
			}
			core, logs := observer.New(zap.DebugLevel)
			tp, stop, err := setupTracing(context.Background(), setenv(t, env), "v1.2.3", zap.New(core))
			if err != nil {
				t.Fatal(err)
			}
			_, span := tp.Tracer("test").Start(context.Background(), "a span")
			span.End()
			stop()
			spans := rcv.Await(t, "span", 5*time.Second, func(s []otlptest.Span) bool { return len(s) > 0 })
			if len(spans) != 1 || spans[0].GetName() != "a span" {
				t.Fatalf("received %v, want the one span", spans)
			}
			res := spans[0].Resource
			if res["service.name"] != tc.service || res["service.version"] != "v1.2.3" || res["deployment.environment.name"] != "test" || res["telemetry.sdk.language"] != "go" {
				t.Errorf("resource %v; want service %s, version v1.2.3, the operator's attributes, the SDK's", res, tc.service)
			}
			if n := logs.FilterMessageSnippet("parse headers").Len(); n == 0 {
				t.Errorf("the SDK's complaint about OTEL_EXPORTER_OTLP_HEADERS is not in the log: %v", logs.All())
			}
		})
	}
}
