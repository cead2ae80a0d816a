package config

import (
	"errors"
	"strings"
	"testing"
)

// TestNoUnverifiedAsync: an async route on a preset whose signatures it
// does not verify is refused at start, naming the variable to set, unless
// ALLOW_UNVERIFIED_ASYNC; the problem is reported with the others.
func TestNoUnverifiedAsync(t *testing.T) {
	allow := map[string]string{"ALLOW_UNVERIFIED_ASYNC": "true"}
	stripeSecret := map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"}
	for _, tt := range []struct {
		name   string
		routes string
		more   map[string]string
		want   []string // in the error, in order; nil: accepted
	}{
		{"a preset without its secret", "/webhooks/stripe=stripe;async", nil,
			[]string{"STRIPE_WEBHOOK_SECRET: required for the async route /webhooks/stripe: ", "ALLOW_UNVERIFIED_ASYNC=true"}},
		{"with its secret", "/webhooks/stripe=stripe;async", stripeSecret, nil},
		{"accepted by ALLOW_UNVERIFIED_ASYNC", "/webhooks/stripe=stripe;async", allow, nil},
		{"sync", "/webhooks/stripe=stripe", nil, nil},
		{"a preset whose signatures are not verified", "/webhooks/paypal=paypal;async", nil,
			[]string{"ROUTES: /webhooks/paypal=paypal on async delivery: paypal signs its webhooks", "ALLOW_UNVERIFIED_ASYNC=true"}},
		{"a generic source", "/hooks/acme=header:X-Acme-Id;async", nil, nil},
		{"auto with no secret", "/=auto;async", nil,
			[]string{"ROUTES: /=auto: ", "STRIPE_WEBHOOK_SECRET, GITHUB_WEBHOOK_SECRET", "ALLOW_UNVERIFIED_ASYNC=true"}},
		{"auto with one secret", "/=auto;async", stripeSecret, nil},
		{"auto with no secret, accepted by ALLOW_UNVERIFIED_ASYNC", "/=auto;async", allow, nil},
		{"DELIVERY=async and the default ROUTES", "", map[string]string{"DELIVERY": "async"}, []string{"ROUTES: /=auto: "}},
		{"two routes, two variables", "/a=stripe;async,/b=github;async", nil,
			[]string{"STRIPE_WEBHOOK_SECRET: required for the async route /a", "GITHUB_WEBHOOK_SECRET: required for the async route /b"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := base()
			env["REDIS_URL"] = "redis://127.0.0.1:6379"
			if tt.routes != "" {
				env["ROUTES"] = tt.routes
			}
			for k, v := range tt.more {
				env[k] = v
			}
			_, err := Load(env)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("Load = %v, want a *config.Error (exit 2)", err)
			}
			msg, at := err.Error(), 0
			for _, w := range tt.want {
				i := strings.Index(msg[at:], w)
				if i < 0 {
					t.Fatalf("error %q lacks %q (after byte %d)", msg, w, at)
				}
				at += i + len(w)
			}
		})
	}
}

func TestUnverifiedAsyncReportedWithTheOthers(t *testing.T) {
	env := base()
	env["REDIS_URL"], env["ROUTES"], env["UPSTREAM_TIMEOUT"] = "redis://127.0.0.1:6379", "/w=github;async", "abc"
	_, err := Load(env)
	for _, want := range []string{"UPSTREAM_TIMEOUT", "GITHUB_WEBHOOK_SECRET: required for the async route /w"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load = %v, want it to name %s", err, want)
		}
	}
}

func TestResignSetting(t *testing.T) {
	cfg, err := Load(base())
	if err != nil || cfg.Resign != ResignAuto {
		t.Fatalf("default RESIGN: %v, %v; want auto", cfg, err)
	}
	for value, ok := range map[string]bool{"auto": true, "off": true, "on": false, "Off": false, "": true} {
		env := base()
		env["RESIGN"] = value
		_, err := Load(env)
		if (err == nil) != ok || !ok && !strings.Contains(err.Error(), "RESIGN: must be auto or off") {
			t.Errorf("RESIGN=%q: %v", value, err)
		}
	}
}

func TestSourceOptionsVerifiedOnly(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{"ROUTES": "/=auto;async"}, true},
		{map[string]string{"ROUTES": "/=auto;async", "ALLOW_UNVERIFIED_ASYNC": "true"}, false},
		{map[string]string{"ROUTES": "/=auto"}, false},
	} {
		env := base()
		env["REDIS_URL"], env["STRIPE_WEBHOOK_SECRET"] = "redis://127.0.0.1:6379", "whsec_x"
		for k, v := range tt.env {
			env[k] = v
		}
		cfg, err := Load(env)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.SourceOptions(cfg.RouteSpecs[0]).VerifiedOnly; got != tt.want {
			t.Errorf("%v: VerifiedOnly %v, want %v", tt.env, got, tt.want)
		}
	}
}
