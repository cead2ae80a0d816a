package config

import (
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/policy"
)

func base() map[string]string {
	return map[string]string{"UPSTREAM_URL": "http://127.0.0.1:3000"}
}

func TestDefaults(t *testing.T) {
	cfg, err := Load(base())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ListenAddr != ":8080" || cfg.AdminAddr != ":9090" || cfg.KeyPrefix != "webhook-dedup:" ||
		cfg.UpstreamTimeout != 30*time.Second || cfg.LeaseTTL != 45*time.Second || cfg.MaxBodyBytes != 10485760 ||
		cfg.OnStoreError != policy.RejectOnStoreError || cfg.OnMissingID != policy.ForwardMissingID || cfg.SignatureTolerance != 5*time.Minute ||
		cfg.InflightStatus != 409 || cfg.ReplayMaxBytes != 65536 || cfg.ShutdownTimeout != 25*time.Second {
		t.Fatalf("defaults differ from the documented ones (docs/configuration.md): %+v", cfg)
	}
	if len(cfg.RouteSpecs) != 1 || cfg.RouteSpecs[0] != (RouteSpec{Path: "/", Source: "auto"}) {
		t.Fatalf("default routes %v", cfg.RouteSpecs)
	}
}

func TestErrorsNameTheVariable(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{}, "UPSTREAM_URL"},
		{map[string]string{"UPSTREAM_URL": "not a url"}, "UPSTREAM_URL"},
		{map[string]string{"UPSTREAM_URL": "ftp://x"}, "UPSTREAM_URL"},
		{map[string]string{"UPSTREAM_TIMEOUT": "soon"}, "UPSTREAM_TIMEOUT"},
		{map[string]string{"UPSTREAM_TIMEOUT": "10s", "LEASE_TTL": "10s"}, "LEASE_TTL"},
		{map[string]string{"LEASE_TTL": "5s"}, "LEASE_TTL"},
		{map[string]string{"MAX_BODY_BYTES": "-1"}, "MAX_BODY_BYTES"},
		{map[string]string{"MAX_BODY_BYTES": "lots"}, "MAX_BODY_BYTES"},
		{map[string]string{"MAX_BUFFERED_BYTES": "-1"}, "MAX_BUFFERED_BYTES"},
		{map[string]string{"MAX_CONNECTIONS": "-1"}, "MAX_CONNECTIONS"},
		{map[string]string{"MAX_CONNECTIONS": "many"}, "MAX_CONNECTIONS"},
		{map[string]string{"MAX_BUFFERED_BYTES": "64MiB"}, "MAX_BUFFERED_BYTES"},
		{map[string]string{"MAX_BUFFERED_BYTES": "1048576"}, "MAX_BUFFERED_BYTES"}, // less than MAX_BODY_BYTES
		{map[string]string{"ON_STORE_ERROR": "ignore"}, "ON_STORE_ERROR"},
		{map[string]string{"ON_MISSING_ID": "drop"}, "ON_MISSING_ID"},
		{map[string]string{"INFLIGHT_STATUS": "200"}, "INFLIGHT_STATUS"},
		{map[string]string{"LISTEN_ADDR": "8080"}, "LISTEN_ADDR"},
		{map[string]string{"LISTEN_ADDR": ":no-such-service"}, "LISTEN_ADDR"},
		{map[string]string{"ADMIN_ADDR": "127.0.0.1:99999"}, "ADMIN_ADDR"},
		{map[string]string{"LISTEN_ADDR": ":8080", "ADMIN_ADDR": "127.0.0.1:8080"}, "ADMIN_ADDR"},
		{map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL"},
		{map[string]string{"LOG_FORMAT": "xml"}, "LOG_FORMAT"},
		{map[string]string{"REPLAY_RESPONSE": "perhaps"}, "REPLAY_RESPONSE"},
		{map[string]string{"REDIS_URL": "http://x"}, "REDIS_URL"},
		{map[string]string{"ROUTES": "/a"}, "ROUTES"},
		{map[string]string{"ROUTES": "a=github"}, "ROUTES"},
		{map[string]string{"ROUTES": "/a=github,/a=stripe"}, "ROUTES"},
		{map[string]string{"SQUARE_WEBHOOK_URL": "relative/path"}, "SQUARE_WEBHOOK_URL"},
		{map[string]string{"DEDUP_TTL": "-1h"}, "DEDUP_TTL"},
		{map[string]string{"DELIVERY": "later"}, "DELIVERY"},
		{map[string]string{"DELIVERY_CONCURRENCY": "0"}, "DELIVERY_CONCURRENCY"},
		{map[string]string{"ASYNC_STATUS": "204"}, "ASYNC_STATUS"},
		{map[string]string{"RETRY_INITIAL_INTERVAL": "0s"}, "RETRY_INITIAL_INTERVAL"},
		{map[string]string{"RETRY_INITIAL_INTERVAL": "2m", "RETRY_MAX_INTERVAL": "1m"}, "RETRY_MAX_INTERVAL"},
		{map[string]string{"RETRY_MAX_ATTEMPTS": "-1"}, "RETRY_MAX_ATTEMPTS"},
		{map[string]string{"RETRY_MAX_AGE": "-1h"}, "RETRY_MAX_AGE"},
		{map[string]string{"DEAD_LETTER_TTL": "0s"}, "DEAD_LETTER_TTL"},
	} {
		env := base()
		for k, v := range tc.env {
			env[k] = v
		}
		if len(tc.env) == 0 {
			env = map[string]string{}
		}
		_, err := Load(env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%v) = %v, want an error naming %s", tc.env, err, tc.want)
		}
	}
}

func TestAllProblemsReportedAtOnce(t *testing.T) {
	_, err := Load(map[string]string{"UPSTREAM_TIMEOUT": "x", "ON_STORE_ERROR": "y"})
	for _, name := range []string{"UPSTREAM_URL", "UPSTREAM_TIMEOUT", "ON_STORE_ERROR"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("error %v does not name %s", err, name)
		}
	}
}

func TestSecretsAreSplitPerPreset(t *testing.T) {
	env := base()
	env["STRIPE_WEBHOOK_SECRET"] = "whsec_a, whsec_b,"
	env["STANDARD_WEBHOOKS_SECRET"] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	cfg, err := Load(env)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Secrets["stripe"]; len(got) != 2 || got[0] != "whsec_a" || got[1] != "whsec_b" {
		t.Fatalf("stripe secrets %q", got)
	}
	if got := cfg.Secrets["standardwebhooks"]; len(got) != 1 {
		t.Fatalf("standardwebhooks secrets %q", got)
	}
}

func TestParseRoutes(t *testing.T) {
	got, err := ParseRoutes(" /webhooks/stripe = stripe , /hooks/acme/=header:X-Acme-Event-Id,/=auto")
	if err != nil {
		t.Fatal(err)
	}
	want := []RouteSpec{{Path: "/webhooks/stripe", Source: "stripe"}, {Path: "/hooks/acme", Source: "header:X-Acme-Event-Id"}, {Path: "/", Source: "auto"}}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	for _, bad := range []string{"", ",", "/a", "=github", "a=github", "/a=", "/a b=github", "/a#b=github", "/a//b=github", "/a=x,/a/=y", "/a=github;", "/a=github;later", "/a=;async", "/a=github;async;sync"} {
		if _, err := ParseRoutes(bad); err == nil {
			t.Errorf("ParseRoutes(%q) accepted", bad)
		}
	}
}

func TestRouteDeliveryModes(t *testing.T) {
	for _, tc := range []struct {
		name, delivery, routes string
		want                   []policy.DeliveryMode
	}{
		{"default sync", "", "/a=github,/b=stripe", []policy.DeliveryMode{policy.SyncDelivery, policy.SyncDelivery}},
		{"async under a sync default", "sync", "/a=github;async,/b=stripe", []policy.DeliveryMode{policy.AsyncDelivery, policy.SyncDelivery}},
		{"sync under an async default", "async", "/a=github ; sync,/b=stripe", []policy.DeliveryMode{policy.SyncDelivery, policy.AsyncDelivery}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := base()
			env["ROUTES"], env["REDIS_URL"] = tc.routes, "redis://127.0.0.1:6379"
			// An async route verifies its preset's signatures.
			env["GITHUB_WEBHOOK_SECRET"], env["STRIPE_WEBHOOK_SECRET"] = "gh", "whsec_x"
			if tc.delivery != "" {
				env["DELIVERY"] = tc.delivery
			}
			cfg, err := Load(env)
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range tc.want {
				if got := cfg.RouteSpecs[i]; got.Delivery != want || got.Source == "" || strings.Contains(got.Source, ";") {
					t.Errorf("route %d: %+v, want delivery %s", i, got, want)
				}
			}
		})
	}
}

func TestAsyncDefaults(t *testing.T) {
	cfg, err := Load(base())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Delivery != policy.SyncDelivery || cfg.DeliveryConcurrency != 16 || cfg.AsyncStatus != 202 ||
		cfg.RetryInitialInterval != time.Second || cfg.RetryMaxInterval != 10*time.Minute || cfg.RetryMaxAttempts != 0 ||
		cfg.RetryMaxAge != 72*time.Hour || cfg.DeadLetterTTL != 168*time.Hour {
		t.Fatalf("async defaults differ from the documented ones (docs/configuration.md): %+v", cfg)
	}
}

func FuzzParseRoutes(f *testing.F) {
	for _, s := range []string{"/=auto", "/a=github,/b=header:X-Id", "/a=json:a.b+json:c", ",,", "/a=x,/a=y", "/%=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// The entries kept beside an error are as valid as those of a
		// ROUTES without one: their sources are checked next.
		specs, _ := ParseRoutes(s)
		seen := map[string]bool{}
		for _, r := range specs {
			if !strings.HasPrefix(r.Path, "/") || r.Source == "" || strings.Contains(r.Source, ";") || seen[r.Path] {
				t.Fatalf("ParseRoutes(%q) returned invalid %v", s, specs)
			}
			seen[r.Path] = true
		}
	})
}

// TestEveryProblemOnce: a route's unknown source is
// reported with the other problems, not after they are fixed, and a value
// that failed to parse is not reported a second time as its zero value.
func TestEveryProblemOnce(t *testing.T) {
	_, err := Load(map[string]string{"LEASE_TTL": "1s", "ROUTES": "/x=nonsense", "UPSTREAM_TIMEOUT": "abc"})
	if err == nil {
		t.Fatal("Load accepted it")
	}
	msg := err.Error()
	for _, want := range []string{"UPSTREAM_URL", "ROUTES: /x=nonsense", "UPSTREAM_TIMEOUT: unable to parse"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if n := strings.Count(msg, "UPSTREAM_TIMEOUT:"); n != 1 {
		t.Errorf("UPSTREAM_TIMEOUT reported %d times, want once:\n%s", n, msg)
	}
	_, err = Load(map[string]string{"UPSTREAM_URL": "http://a:1", "STANDARD_WEBHOOKS_SECRET": "not-a-secret"})
	if err == nil || !strings.Contains(err.Error(), "ROUTES: /=auto") || !strings.Contains(err.Error(), "STANDARD_WEBHOOKS_SECRET") {
		t.Errorf("a malformed secret on the default route: %v", err)
	}
}

func TestMaxBufferedBytes(t *testing.T) {
	for _, tc := range []struct {
		set  map[string]string
		want int64
	}{
		{nil, 0}, // derived from the memory limit when serving
		{map[string]string{"MAX_BUFFERED_BYTES": "10485760"}, 10 << 20},
		{map[string]string{"MAX_BUFFERED_BYTES": "4096", "MAX_BODY_BYTES": "4096"}, 4096},
	} {
		env := base()
		for k, v := range tc.set {
			env[k] = v
		}
		cfg, err := Load(env)
		if err != nil {
			t.Errorf("Load(%v): %v", tc.set, err)
		} else if cfg.MaxBufferedBytes != tc.want {
			t.Errorf("Load(%v): MaxBufferedBytes = %d, want %d", tc.set, cfg.MaxBufferedBytes, tc.want)
		}
	}
}

// TestListenAddresses: what net.Listen takes is accepted, two listeners on
// port 0 or on ports of their own included.
func TestListenAddresses(t *testing.T) {
	for _, addrs := range [][2]string{
		{":8080", ":9090"}, {"127.0.0.1:0", "127.0.0.1:0"}, {"[::1]:8080", "localhost:9090"},
		{":http", "127.0.0.1:9090"}, {"10.0.0.1:8080", "10.0.0.2:8080"},
	} {
		env := base()
		env["LISTEN_ADDR"], env["ADMIN_ADDR"] = addrs[0], addrs[1]
		if _, err := Load(env); err != nil {
			t.Errorf("LISTEN_ADDR=%s ADMIN_ADDR=%s: %v", addrs[0], addrs[1], err)
		}
	}
}
