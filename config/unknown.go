package config

import (
	"regexp"
	"slices"
	"strings"

	"github.com/webhook-dedup/webhook-dedup/providers"
)

// Unknown is an environment variable that looks meant for webhook-dedup
// but is not one of its variables: most likely a misspelling, which would
// otherwise be ignored in silence.
type Unknown struct {
	Name string
	// Suggestion is the known variable it most resembles; empty if none
	// is close.
	Suggestion string
}

// serviceLink matches the variables Kubernetes sets for every Service in
// the namespace (REDIS_SERVICE_HOST, REDIS_PORT_6379_TCP_ADDR, …): a
// Service named "redis" is no misspelling of ours.
var serviceLink = regexp.MustCompile(`_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_[A-Z]+)?)?)$`)

// UnknownVariables lists the variables of environ that start like one of
// ours (REDIS_…, DATABASE_…, …_WEBHOOK_SECRET) or are a letter or two away
// from one, but are none of them, sorted by name.
func UnknownVariables(environ map[string]string) []Unknown {
	known := map[string]bool{}
	prefixes := map[string]bool{}
	var names []string
	for _, v := range Variables() {
		known[v.Name] = true
		names = append(names, v.Name)
		if head, _, ok := strings.Cut(v.Name, "_"); ok && !strings.HasSuffix(v.Name, "_WEBHOOK_SECRET") && !strings.HasSuffix(v.Name, "_WEBHOOK_URL") {
			prefixes[head+"_"] = true
		}
	}
	var out []Unknown
	for name := range environ {
		if known[name] || serviceLink.MatchString(name) {
			continue
		}
		suggestion, distance := closest(name, names)
		ours := strings.HasSuffix(name, "_WEBHOOK_SECRET") || strings.HasSuffix(name, "_WEBHOOK_URL")
		for p := range prefixes {
			ours = ours || strings.HasPrefix(name, p)
		}
		if distance > 2 {
			suggestion = ""
		}
		if suggestion == "" {
			// The variable an app calls by another name is meant for
			// the proxy only if the proxy's own is not set: an app's
			// STRIPE_SIGNING_SECRET beside STRIPE_WEBHOOK_SECRET is the
			// app's business.
			if s := synonym(name); s != "" && environ[s] == "" {
				suggestion = s
			}
		}
		if ours || suggestion != "" {
			out = append(out, Unknown{Name: name, Suggestion: suggestion})
		}
	}
	slices.SortFunc(out, func(a, b Unknown) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// secretWords are the ends of the names apps and providers' docs give a
// signing secret (Slack's and Stripe's "signing secret", Stripe's
// "endpoint secret", Zoom's "secret token", …), longest first. Each is a
// whole word or more away from _WEBHOOK_SECRET, too far for the edit
// distance to suggest it.
var secretWords = []string{
	"_WEBHOOK_SIGNING_SECRET", "_WEBHOOK_SECRET_TOKEN", "_WEBHOOK_SIGNING_KEY",
	"_SIGNING_SECRET", "_ENDPOINT_SECRET", "_WEBHOOKS_SECRET", "_WEBHOOK_SECRET",
	"_WEBHOOK_TOKEN", "_SIGNING_KEY", "_HOOK_SECRET", "_WEBHOOK_KEY", "_WH_SECRET",
}

// urlWords are the same for the public URL a preset signs (Square calls it
// the notification URL).
var urlWords = []string{"_NOTIFICATION_URL", "_WEBHOOKS_URL", "_ENDPOINT_URL", "_CALLBACK_URL"}

// senderAliases are senders whose webhooks a preset of another name
// verifies: Svix is Standard Webhooks' reference sender, and Clerk and
// Resend send through Svix.
var senderAliases = map[string]string{
	"SVIX": "standardwebhooks", "CLERK": "standardwebhooks", "RESEND": "standardwebhooks",
	"STANDARDWEBHOOKS": "standardwebhooks", "STANDARD_WEBHOOKS": "standardwebhooks",
}

// synonym returns the preset variable that name means under another
// name (STRIPE_SIGNING_SECRET: STRIPE_WEBHOOK_SECRET; SVIX_WEBHOOK_SECRET:
// STANDARD_WEBHOOKS_SECRET), or "".
func synonym(name string) string {
	for _, kind := range []struct {
		words []string
		get   func(providers.Preset) string
	}{
		{secretWords, func(p providers.Preset) string { return p.SecretVar }},
		{urlWords, func(p providers.Preset) string { return p.URLVar }},
	} {
		for _, w := range kind.words {
			sender, ok := strings.CutSuffix(name, w)
			if !ok || sender == "" {
				continue
			}
			for _, p := range providers.Presets() {
				if v := kind.get(p); v != "" && v != name &&
					(strings.ToUpper(p.Name) == sender || senderAliases[sender] == p.Name) {
					return v
				}
			}
			break
		}
	}
	return ""
}

// closest returns the name nearest to s by edit distance, and the distance.
func closest(s string, names []string) (string, int) {
	best, bestDist := "", len(s)+1
	for _, n := range names {
		if d := editDistance(s, n); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best, bestDist
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
