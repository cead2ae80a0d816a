package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestUnknownVariables(t *testing.T) {
	environ := map[string]string{
		"ROUTE":                     "/=stripe",       // ROUTES
		"REDIS_ULR":                 "redis://r:6379", // REDIS_URL
		"REDIS_TIMEOUTS":            "1s",             // REDIS_TIMEOUT
		"REDIS_FLAVOUR":             "x",              // our prefix, nothing close
		"ACME_WEBHOOK_SECRET":       "s",              // no such preset
		"UPSTREAM_URL":              "http://a:1",     // known
		"STRIPE_WEBHOOK_SECRET":     "whsec_x",        // known
		"HOME":                      "/root",          // not ours
		"KUBERNETES_SERVICE_HOST":   "10.0.0.1",       // not ours
		"REDIS_SERVICE_HOST":        "10.0.0.2",       // a Service named redis
		"REDIS_PORT":                "tcp://10.0.0.2:6379",
		"REDIS_PORT_6379_TCP_ADDR":  "10.0.0.2",
		"REDIS_SERVICE_PORT_CLIENT": "6379",
	}
	got := UnknownVariables(environ)
	want := []Unknown{
		{Name: "ACME_WEBHOOK_SECRET", Suggestion: ""},
		{Name: "REDIS_FLAVOUR", Suggestion: ""},
		{Name: "REDIS_TIMEOUTS", Suggestion: "REDIS_TIMEOUT"},
		{Name: "REDIS_ULR", Suggestion: "REDIS_URL"},
		{Name: "ROUTE", Suggestion: "ROUTES"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("UnknownVariables = %+v\nwant %+v", got, want)
	}
}

// TestUnknownVariablesBySynonym: the names apps and providers' docs give a
// signing secret are a word or more from ours, too far for the edit
// distance, and get a suggestion all the same.
func TestUnknownVariablesBySynonym(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		also       map[string]string
	}{
		{name: "STRIPE_SIGNING_SECRET", want: "STRIPE_WEBHOOK_SECRET"},
		{name: "STRIPE_ENDPOINT_SECRET", want: "STRIPE_WEBHOOK_SECRET"},
		{name: "STRIPE_WEBHOOK_SIGNING_SECRET", want: "STRIPE_WEBHOOK_SECRET"},
		{name: "SLACK_SIGNING_SECRET", want: "SLACK_WEBHOOK_SECRET"},
		{name: "ZOOM_WEBHOOK_SECRET_TOKEN", want: "ZOOM_WEBHOOK_SECRET"},
		{name: "GITHUB_WEBHOOKS_SECRET", want: "GITHUB_WEBHOOK_SECRET"},
		{name: "SVIX_WEBHOOK_SECRET", want: "STANDARD_WEBHOOKS_SECRET"},
		{name: "CLERK_WEBHOOK_SIGNING_SECRET", want: "STANDARD_WEBHOOKS_SECRET"},
		{name: "SQUARE_NOTIFICATION_URL", want: "SQUARE_WEBHOOK_URL"},
		// The app's own name beside ours: the app's business.
		{name: "STRIPE_SIGNING_SECRET", want: "-", also: map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_x"}},
		// API keys and unknown senders are no signing secret of ours.
		{name: "STRIPE_SECRET_KEY", want: "-"},
		{name: "STRIPE_API_KEY", want: "-"},
		{name: "ACME_SIGNING_SECRET", want: "-"},
	} {
		environ := map[string]string{tc.name: "x"}
		for k, v := range tc.also {
			environ[k] = v
		}
		got := "-"
		for _, u := range UnknownVariables(environ) {
			if u.Name == tc.name {
				got = u.Suggestion
			}
		}
		if got != tc.want {
			t.Errorf("%s (with %v): suggestion %q, want %q", tc.name, tc.also, got, tc.want)
		}
	}
}

// TestLoadErrorsCarryHints: a configuration that fails never gets to log
// its warnings, so the misspelling that may be its cause goes with the
// error: on the misspelt variable's own problem, or on a line of its own.
func TestLoadErrorsCarryHints(t *testing.T) {
	_, err := Load(map[string]string{"UPSTREAM_ULR": "http://127.0.0.1:3000"})
	if err == nil {
		t.Fatal("Load accepted a configuration without UPSTREAM_URL")
	}
	want := "UPSTREAM_URL: required (the app's URL, e.g. http://127.0.0.1:3000); UPSTREAM_ULR is set: did you mean UPSTREAM_URL?"
	if err.Error() != want {
		t.Errorf("error:\n%s\nwant:\n%s", err, want)
	}

	_, err = Load(map[string]string{"ROUTE": "/=stripe", "STRIPE_SIGNING_SECRET": "whsec_x", "REDIS_FLAVOUR": "x"})
	if err == nil {
		t.Fatal("Load accepted a configuration without UPSTREAM_URL")
	}
	lines := strings.Split(err.Error(), "\n")
	for _, want := range []string{
		"ROUTE: not a variable of webhook-dedup, ignored: did you mean ROUTES?",
		"STRIPE_SIGNING_SECRET: not a variable of webhook-dedup, ignored: did you mean STRIPE_WEBHOOK_SECRET?",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("error:\n%s\nhas no line %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "REDIS_FLAVOUR") {
		t.Errorf("error names REDIS_FLAVOUR, which resembles nothing: %s", err)
	}

	// Hints never make an error of their own.
	if _, err := Load(map[string]string{"UPSTREAM_URL": "http://127.0.0.1:3000", "ROUTE": "/=stripe"}); err != nil {
		t.Errorf("a misspelt variable beside a valid configuration: %v", err)
	}
}
