package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/webhook-dedup/webhook-dedup/providers"
)

// Warning is something in the environment that does not stop the proxy
// but is most likely a mistake, to be logged at start.
type Warning struct {
	// Variable is the environment variable it is about.
	Variable string
	// Message says what is wrong. It never quotes a value, which may be
	// a secret.
	Message string
	// Suggestion is the variable most likely meant, for a variable that
	// is none of ours; empty otherwise, or if none is close.
	Suggestion string
}

// Warnings lists what the proxy should log at warn when it starts, sorted
// by variable: every variable UnknownVariables reports (Message "unknown
// variable, ignored: is it misspelt?", with its Suggestion), and each
// preset secret that does not look like what its provider issues. Load
// refuses the configuration outright where the value cannot be right.
func Warnings(environ map[string]string) []Warning {
	var out []Warning
	for _, p := range providers.Presets() {
		if p.SecretVar == "" {
			continue
		}
		for _, msg := range secretFormat(p.SecretVar, splitList(environ[p.SecretVar])).warnings {
			out = append(out, Warning{Variable: p.SecretVar, Message: msg})
		}
	}
	for _, u := range UnknownVariables(environ) {
		out = append(out, Warning{Variable: u.Name, Message: "unknown variable, ignored: is it misspelt?", Suggestion: u.Suggestion})
	}
	slices.SortStableFunc(out, func(a, b Warning) int { return strings.Compare(a.Variable, b.Variable) })
	return out
}

// formatProblems is what secretFormat found: errors refuse the
// configuration, warnings are logged.
type formatProblems struct {
	errors, warnings []string
}

// stripeKeyPrefixes start Stripe's API keys: secret, restricted and
// publishable, live or test. None is a webhook signing secret.
var stripeKeyPrefixes = []string{"sk_", "rk_", "pk_"}

// secretFormat checks the values of variable against the format its
// provider documents for a webhook signing secret. Only Stripe's is
// checked here: every Stripe signing secret is "whsec_…" (the whole string
// is the HMAC key). Standard Webhooks' "whsec_<base64>" is checked where it
// is decoded, by the signature package; the other providers' secrets have
// no documented shape.
func secretFormat(variable string, secrets []string) formatProblems {
	var fp formatProblems
	if variable != "STRIPE_WEBHOOK_SECRET" {
		return fp
	}
	for i, s := range secrets {
		which := "the value"
		if len(secrets) > 1 {
			which = fmt.Sprintf("value %d of %d", i+1, len(secrets))
		}
		switch {
		case strings.HasPrefix(s, "whsec_"):
		case hasAnyPrefix(s, stripeKeyPrefixes):
			// Always wrong: Stripe signs webhooks with the endpoint's
			// signing secret, so every genuine webhook would be refused
			// (401) until it is fixed, and an API key has no business
			// in the proxy.
			fp.errors = append(fp.errors, fmt.Sprintf("%s is a Stripe API key (%s…), not a webhook signing secret (whsec_…, on the webhook endpoint's page in the Stripe Dashboard, or printed by stripe listen): every webhook's signature check would fail", which, stripeKeyKind(s)))
		default:
			fp.warnings = append(fp.warnings, fmt.Sprintf("%s does not start with whsec_, as every Stripe webhook signing secret does: webhooks signed by Stripe will not verify with it", which))
		}
	}
	return fp
}

// stripeKeyKind returns the non-secret start of a Stripe API key: "sk_live_",
// "rk_test_", or else its first three characters.
func stripeKeyKind(key string) string {
	for _, mode := range []string{"live_", "test_"} {
		if strings.HasPrefix(key[3:], mode) {
			return key[:3] + mode
		}
	}
	return key[:3]
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
