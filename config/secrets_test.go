package config

import (
	"reflect"
	"strings"
	"testing"
)

// TestStripeAPIKeyRefused: an API key where the webhook signing secret
// belongs can never verify a webhook; the error names the variable and the
// key's kind, never the key.
func TestStripeAPIKeyRefused(t *testing.T) {
	for _, tc := range []struct {
		secret, want string
	}{
		{"sk_live_51Habc", "the value is a Stripe API key (sk_live_…)"},
		{"sk_test_51Habc", "the value is a Stripe API key (sk_test_…)"},
		{"rk_live_51Habc", "the value is a Stripe API key (rk_live_…)"},
		{"pk_test_51Habc", "the value is a Stripe API key (pk_test_…)"},
		{"whsec_ok,sk_test_51Habc", "value 2 of 2 is a Stripe API key (sk_test_…)"},
	} {
		env := base()
		env["STRIPE_WEBHOOK_SECRET"] = tc.secret
		_, err := Load(env)
		if err == nil {
			t.Errorf("STRIPE_WEBHOOK_SECRET=%s accepted", tc.secret)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "STRIPE_WEBHOOK_SECRET: "+tc.want) || strings.Contains(msg, "51Habc") {
			t.Errorf("STRIPE_WEBHOOK_SECRET=%s: error %q, want it to say %q and not quote the key", tc.secret, msg, tc.want)
		}
	}
	env := base()
	env["STRIPE_WEBHOOK_SECRET"] = "whsec_a,whsec_b"
	if _, err := Load(env); err != nil {
		t.Errorf("signing secrets refused: %v", err)
	}
}

func TestWarnings(t *testing.T) {
	environ := map[string]string{
		"UPSTREAM_URL":          "http://127.0.0.1:3000",
		"STRIPE_WEBHOOK_SECRET": "whsec_ok, my-own-secret",
		"ROUTE":                 "/=stripe",
		"SLACK_SIGNING_SECRET":  "8f742231b10e8888abcd99yyyzzz85a5",
	}
	got := Warnings(environ)
	want := []Warning{
		{Variable: "ROUTE", Message: "unknown variable, ignored: is it misspelt?", Suggestion: "ROUTES"},
		{Variable: "SLACK_SIGNING_SECRET", Message: "unknown variable, ignored: is it misspelt?", Suggestion: "SLACK_WEBHOOK_SECRET"},
		{Variable: "STRIPE_WEBHOOK_SECRET", Message: "value 2 of 2 does not start with whsec_, as every Stripe webhook signing secret does: webhooks signed by Stripe will not verify with it"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Warnings =\n%+v\nwant\n%+v", got, want)
	}
	// A warning is no error.
	if _, err := Load(environ); err != nil {
		t.Errorf("Load: %v", err)
	}
	if w := Warnings(base()); len(w) != 0 {
		t.Errorf("Warnings of a clean environment: %+v", w)
	}
}
