package test

import (
	"strings"
	"testing"
)

// TestConfigErrors: a bad configuration stops the process at start with
// exit status 2 and a message naming the variable.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	const upstream = "http://127.0.0.1:1"
	for _, tc := range []struct {
		name  string
		env   map[string]string
		names string // the variable the message must name
	}{
		{"missing UPSTREAM_URL", map[string]string{}, "UPSTREAM_URL"},
		{"UPSTREAM_URL without a scheme", map[string]string{"UPSTREAM_URL": "127.0.0.1:3000"}, "UPSTREAM_URL"},
		{"UPSTREAM_URL not a URL", map[string]string{"UPSTREAM_URL": "not a url"}, "UPSTREAM_URL"},
		{"UPSTREAM_URL unparsable", map[string]string{"UPSTREAM_URL": "http://[::1"}, "UPSTREAM_URL"},
		{"bad duration", map[string]string{"UPSTREAM_URL": upstream, "UPSTREAM_TIMEOUT": "ten seconds"}, "UPSTREAM_TIMEOUT"},
		{"bad LEASE_TTL", map[string]string{"UPSTREAM_URL": upstream, "LEASE_TTL": "5"}, "LEASE_TTL"},
		{"LEASE_TTL equal to UPSTREAM_TIMEOUT", map[string]string{"UPSTREAM_URL": upstream, "UPSTREAM_TIMEOUT": "5s", "LEASE_TTL": "5s"}, "LEASE_TTL"},
		{"LEASE_TTL below the default UPSTREAM_TIMEOUT", map[string]string{"UPSTREAM_URL": upstream, "LEASE_TTL": "10s"}, "LEASE_TTL"},
		{"unknown preset", map[string]string{"UPSTREAM_URL": upstream, "ROUTES": "/webhooks/x=nosuchprovider"}, "ROUTES"},
		{"unknown source kind", map[string]string{"UPSTREAM_URL": upstream, "ROUTES": "/hooks=query:id"}, "ROUTES"},
		{"route without a source", map[string]string{"UPSTREAM_URL": upstream, "ROUTES": "/webhooks/stripe"}, "ROUTES"},
		{"route with an empty header name", map[string]string{"UPSTREAM_URL": upstream, "ROUTES": "/hooks=header:"}, "ROUTES"},
		{"route path not absolute", map[string]string{"UPSTREAM_URL": upstream, "ROUTES": "webhooks=stripe"}, "ROUTES"},
		{"two routes with the same path", map[string]string{"UPSTREAM_URL": upstream, "ROUTES": "/w=stripe,/w=github"}, "ROUTES"},
		{"bad REDIS_URL scheme", map[string]string{"UPSTREAM_URL": upstream, "REDIS_URL": "http://127.0.0.1:6379"}, "REDIS_URL"},
		{"REDIS_URL and DATABASE_URL", map[string]string{"UPSTREAM_URL": upstream, "REDIS_URL": "redis://127.0.0.1:6379", "DATABASE_URL": "postgres://127.0.0.1:5432/x"}, "DATABASE_URL: set together with REDIS_URL"},
		{"bad DATABASE_URL scheme", map[string]string{"UPSTREAM_URL": upstream, "DATABASE_URL": "mysql://127.0.0.1/x"}, "DATABASE_URL"},
		{"bad DATABASE_URL option", map[string]string{"UPSTREAM_URL": upstream, "DATABASE_URL": "postgres://u:s3cret@127.0.0.1:5432/x?pool_max_conns=many"}, "DATABASE_URL"},
		{"bad DATABASE_TABLE_PREFIX", map[string]string{"UPSTREAM_URL": upstream, "DATABASE_URL": "postgres://127.0.0.1:5432/x", "DATABASE_TABLE_PREFIX": "web-hooks"}, "DATABASE_TABLE_PREFIX"},
		{"bad MAX_BODY_BYTES", map[string]string{"UPSTREAM_URL": upstream, "MAX_BODY_BYTES": "lots"}, "MAX_BODY_BYTES"},
		{"bad ON_STORE_ERROR", map[string]string{"UPSTREAM_URL": upstream, "ON_STORE_ERROR": "ignore"}, "ON_STORE_ERROR"},
		{"bad ON_MISSING_ID", map[string]string{"UPSTREAM_URL": upstream, "ON_MISSING_ID": "drop"}, "ON_MISSING_ID"},
		{"bad INFLIGHT_STATUS", map[string]string{"UPSTREAM_URL": upstream, "INFLIGHT_STATUS": "200"}, "INFLIGHT_STATUS"},
		{"bad LOG_LEVEL", map[string]string{"UPSTREAM_URL": upstream, "LOG_LEVEL": "chatty"}, "LOG_LEVEL"},
		{"bad LOG_FORMAT", map[string]string{"UPSTREAM_URL": upstream, "LOG_FORMAT": "xml"}, "LOG_FORMAT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, err := runToExit(t, tc.env)
			if err != nil {
				t.Fatalf("%v: it accepted %v and kept running; want exit status 2 naming %s\n%s", err, envList(tc.env), tc.names, out)
			}
			if code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			if !strings.Contains(out, tc.names) {
				t.Errorf("the message does not name %s:\n%s", tc.names, out)
			}
		})
	}
}

// TestHelp: -h exits 0 and lists every variable with its default.
func TestHelp(t *testing.T) {
	t.Parallel()
	code, out, err := runToExit(t, nil, "-h")
	if err != nil {
		t.Fatalf("-h: %v\n%s", err, out)
	}
	if code != 0 {
		t.Errorf("-h: exit status %d, want 0", code)
	}
	for _, name := range []string{
		"UPSTREAM_URL", "LISTEN_ADDR", "ADMIN_ADDR", "ROUTES", "REDIS_URL", "KEY_PREFIX", "DEDUP_TTL",
		"UPSTREAM_TIMEOUT", "LEASE_TTL", "MAX_BODY_BYTES", "ON_STORE_ERROR", "ON_MISSING_ID",
		"INFLIGHT_WAIT", "INFLIGHT_STATUS", "LOG_LEVEL", "LOG_FORMAT",
		"STRIPE_WEBHOOK_SECRET", "GITHUB_WEBHOOK_SECRET",
	} {
		if !strings.Contains(out, name) {
			t.Errorf("-h does not list %s", name)
		}
	}
	// The defaults SPEC fixes.
	for _, def := range []string{":8080", ":9090", "/=auto", "webhook-dedup:", "30s", "10485760", "reject", "forward", "409", "info", "json"} {
		if !strings.Contains(out, def) {
			t.Errorf("-h does not show the default %q", def)
		}
	}
	if t.Failed() {
		t.Logf("-h printed:\n%s", out)
	}
}
