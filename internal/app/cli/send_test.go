package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/providers"
)

// sampleSecret is a secret each scheme accepts: Standard Webhooks (and
// GitLab's signing tokens) want whsec_ and base64.
func sampleSecret(preset string) string {
	if preset == "standardwebhooks" || preset == "gitlab" {
		return "whsec_c2VuZCB0ZXN0IHNpZ25pbmcga2V5IQ=="
	}
	return "send-test-secret-" + preset
}

// TestSendSamples: every preset's sample, and a generic source's, passes
// the route's own check as the proxy runs it (the verifier of signature,
// independent of send's signing) and carries an event ID, new each time.
// A preset without a configured secret sends unsigned; GitLab's legacy
// token is sent as it is.
func TestSendSamples(t *testing.T) {
	now := time.Now()
	type route struct {
		name, spec string
		secret     string // "" for none
	}
	var routes []route
	for _, p := range providers.Presets() {
		secret := ""
		if p.SecretVar != "" {
			secret = sampleSecret(p.Name)
		}
		routes = append(routes, route{p.Name, p.Name, secret})
		if p.SecretVar != "" {
			routes = append(routes, route{p.Name + " unsigned", p.Name, ""})
		}
	}
	routes = append(routes,
		route{"gitlab legacy token", "gitlab", "a-plain-token"},
		route{"auto", "auto", sampleSecret("stripe")},
		route{"header", "header:X-Acme-Id", ""},
		route{"json", "json:data.object.id", ""},
		route{"composite", "header:X-Acme-Topic+json:event.id", ""},
	)
	for _, r := range routes {
		t.Run(r.name, func(t *testing.T) {
			opts := providers.Options{Secrets: map[string][]string{}, URLs: map[string]string{
				"square": "https://hooks.example.com/square", "twilio": "https://hooks.example.com/twilio?x=1#rc=3",
			}}
			src0, err := providers.ParseSource("/hooks", r.spec, opts)
			if err != nil {
				t.Fatal(err)
			}
			if r.secret != "" {
				for _, n := range src0.PresetNames() {
					opts.Secrets[n] = []string{r.secret}
				}
				if r.spec == "auto" {
					opts.Secrets = map[string][]string{"stripe": {r.secret}}
				}
			}
			src, err := providers.ParseSource("/hooks", r.spec, opts)
			if err != nil {
				t.Fatal(err)
			}
			cfg := &config.Config{Secrets: opts.Secrets, URLs: opts.URLs}
			preset := samplePreset(src.PresetNames(), cfg.Secrets)
			ids := map[string]bool{}
			for range 2 {
				s, err := newSample(preset, r.spec, cfg, now)
				if err != nil {
					t.Fatal(err)
				}
				ext := src.Resolve(s.header)
				if ext == nil {
					t.Fatalf("the route does not recognise the sample: %v", s.header)
				}
				if (ext.Verifier != nil) != (r.secret != "") {
					t.Fatalf("verifier %v with secret %q", ext.Verifier, r.secret)
				}
				if ext.Verifier != nil {
					if err := ext.Verifier.Verify(s.header, s.body, now); err != nil {
						t.Fatalf("the sample fails the route's check: %v\n%v\n%s", err, s.header, s.body)
					}
				}
				id, err := ext.EventID(s.header, s.body)
				if err != nil || id == "" {
					t.Fatalf("the sample has no event ID: %q %v\n%v\n%s", id, err, s.header, s.body)
				}
				ids[id] = true
			}
			if len(ids) != 2 {
				t.Errorf("two samples carry the same event ID: %v", ids)
			}
		})
	}
}

// TestSendSampleIsTheSenders: the sample is signed for the route's
// preset, in the header the sender uses, not merely for some verifier.
func TestSendSampleIsTheSenders(t *testing.T) {
	cfg := &config.Config{Secrets: map[string][]string{"stripe": {"whsec_x"}, "github": {"y"}}}
	for preset, header := range map[string]string{"stripe": "Stripe-Signature", "github": "X-Hub-Signature-256"} {
		s, err := newSample(preset, preset, cfg, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if s.header.Get(header) == "" || s.header.Get("Content-Type") != "application/json" || !strings.HasPrefix(string(s.body), "{") {
			t.Errorf("%s sample: %v %s; want %s and a JSON body", preset, s.header, s.body, header)
		}
	}
	if _, err := newSample("nosuch", "nosuch", cfg, time.Now()); err == nil {
		t.Error("a sample of an unknown preset")
	}
}
