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

// TestConfigEveryProblemAtOnce: a configuration with several mistakes at
// once, the store checks and every bad ROUTES entry among them, is
// refused in one run, serve and check alike: exit status 2, each problem
// on a line of its own, and check's lines the same as serve's. Each case
// is a shape of the class: problems that were once reported one restart at
// a time (the async store check behind the rest, ROUTES behind its first
// bad entry).
func TestConfigEveryProblemAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string // the start of each line, one line each, in any order
	}{
		{"async route on the memory store, bad ROUTES entries, a bad duration", map[string]string{
			"UPSTREAM_TIMEOUT": "soon",
			"ROUTES":           "/a=header:X-Id;async,hooks=github,/b=stripe;later,/c=nosuchpreset,/a=github,/d",
		}, []string{
			"UPSTREAM_TIMEOUT: ",
			`ROUTES: "hooks=github": path "hooks" must start with /`,
			`ROUTES: "/b=stripe;later": the delivery mode after ';' must be sync or async`,
			"ROUTES: /c=nosuchpreset: ",
			`ROUTES: "/a=github": path "/a" appears twice`,
			`ROUTES: "/d" is not PATH=SOURCE`,
			"ROUTES: async delivery needs a store that keeps its queue: ",
		}},
		{"DELIVERY=async on DynamoDB beside another store, a bad log level, routes run together", map[string]string{
			"DELIVERY":       "async",
			"DYNAMODB_TABLE": "webhooks",
			"DATABASE_URL":   "postgres://db/x",
			"LOG_LEVEL":      "loud",
			"ROUTES":         "/x=header:X-Id /y=github,/z=stripe",
		}, []string{
			"DATABASE_URL: set together with DYNAMODB_TABLE",
			"LOG_LEVEL: ",
			`ROUTES: routes are separated by commas, not spaces: "/x=header:X-Id /y=github"`,
			"STRIPE_WEBHOOK_SECRET: required for the async route /z",
			"DELIVERY: async delivery needs a store that keeps its queue: ",
		}},
		{"route options: on a sync route, unknown, repeated, a bad rate and key, beside a bad ORDER_ON_FAILURE", map[string]string{
			"DATA_DIR":         "/nonexistent-but-unopened",
			"ORDER_ON_FAILURE": "halt",
			"ROUTES": "/s=header:X-Id;rate=5/s,/t=header:X-Id;sync;order=header:X-Key,/u=header:X-Id;async;burst=2;rate=1/s;rate=2/s," +
				"/v=header:X-Id;async;rate=5/h;order=json:a..b,/w=header:X-Id;async;order=json:customer.id;rate=20/s",
		}, []string{
			"ORDER_ON_FAILURE: ",
			"ROUTES: /s: rate=: options are for async routes",
			"ROUTES: /t: order=: options are for async routes",
			`ROUTES: "/u=header:X-Id;async;burst=2;rate=1/s;rate=2/s": unknown option "burst="`,
			`ROUTES: "/u=header:X-Id;async;burst=2;rate=1/s;rate=2/s": option rate= given twice`,
			`ROUTES: "/v=header:X-Id;async;rate=5/h;order=json:a..b": option rate=: want N/s or N/m`,
			`ROUTES: "/v=header:X-Id;async;rate=5/h;order=json:a..b": option order=: providers: key "json:a..b": want a dotted path`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"UPSTREAM_URL": "http://127.0.0.1:1"}
			for k, v := range tc.env {
				env[k] = v
			}
			var printed [2][]string
			for i, cmd := range [][]string{nil, {"check"}} {
				code, out, err := runToExit(t, env, cmd...)
				if err != nil {
					t.Fatalf("%v %v: %v: it accepted %v and kept running\n%s", binary, cmd, err, envList(env), out)
				}
				if code != 2 {
					t.Errorf("%v: exit status %d, want 2", cmd, code)
				}
				printed[i] = problemLines(t, out)
				expectLines(t, printed[i], tc.want)
			}
			if strings.Join(printed[0], "\n") != strings.Join(printed[1], "\n") {
				t.Errorf("serve and check list different problems:\nserve:\n%s\ncheck:\n%s", strings.Join(printed[0], "\n"), strings.Join(printed[1], "\n"))
			}
		})
	}
}

// problemLines returns the lines after "webhook-dedup: configuration:" in
// out, the process's whole output.
func problemLines(t *testing.T, out string) []string {
	t.Helper()
	const head = "webhook-dedup: configuration:\n"
	_, list, ok := strings.Cut(out, head)
	if !ok {
		t.Errorf("no %q in the output:\n%s", head, out)
	}
	return strings.Split(strings.TrimRight(list, "\n"), "\n")
}

// expectLines fails unless each of want starts exactly one of lines, and
// lines holds nothing else: every problem is said, once, on its own line,
// and nothing false beside.
func expectLines(t *testing.T, lines, want []string) {
	t.Helper()
	for _, w := range want {
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(l, w) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d lines start %q, want 1", n, w)
		}
	}
	if len(lines) != len(want) {
		t.Errorf("%d lines, want %d:\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
}
