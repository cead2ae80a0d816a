package serve

import (
	"testing"

	"github.com/webhook-dedup/webhook-dedup/config"
)

// TestResigners: a queued request finds its Resigner by the route and the
// namespace it was queued with, on the routes as configured now.
func TestResigners(t *testing.T) {
	cfg, err := config.Load(map[string]string{
		"UPSTREAM_URL": "http://127.0.0.1:3000", "DATA_DIR": t.TempDir(),
		"ROUTES":                "/webhooks/stripe=stripe;async,/webhooks/github=github;async,/hooks=auto;async,/acme=header:X-Id;async",
		"STRIPE_WEBHOOK_SECRET": "whsec_x", "GITHUB_WEBHOOK_SECRET": "gh",
	})
	if err != nil {
		t.Fatal(err)
	}
	routes, _, err := buildRoutes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	find := resigners(routes)
	for _, tt := range []struct {
		route, namespace string
		found            bool
	}{
		{"/webhooks/stripe", "stripe", true},
		{"/hooks", "stripe", true},            // auto, by the namespace it resolved to
		{"/webhooks/github", "github", false}, // GitHub signs no timestamp
		{"/hooks", "slack", false},            // no secret: auto does not recognise it here
		{"/acme", "/acme", false},             // generic source
		{"/webhooks/gone", "stripe", false},   // no such route any more
		{"/webhooks/stripe", "standardwebhooks", false},
	} {
		if got := find(tt.route, tt.namespace); (got != nil) != tt.found {
			t.Errorf("%s %s: Resigner %v, want found %v", tt.route, tt.namespace, got, tt.found)
		}
	}
}
