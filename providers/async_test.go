package providers

import (
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// everySecret configures a valid secret (and URL) for every preset that
// verifies signatures.
func everySecret() Options {
	o := Options{Secrets: map[string][]string{}, URLs: map[string]string{}}
	for _, p := range Presets() {
		if p.SecretVar != "" {
			// Valid for every scheme, Standard Webhooks' base64 included.
			o.Secrets[p.Name] = []string{"whsec_c2VjcmV0LWtleQ=="}
		}
		if p.URLVar != "" {
			o.URLs[p.Name] = "https://hooks.example.com/" + p.Name
		}
	}
	return o
}

// resigningPresets are the presets whose schemes sign a timestamp carried
// in a header (docs/delivery.md lists the same).
var resigningPresets = []string{"stripe", "gitlab", "standardwebhooks", "slack", "paddle", "twitch", "zoom", "zendesk"}

// presetsWithResigner lists, in catalog order, the presets whose
// extractor has a Resigner once their secret is set.
func presetsWithResigner(t *testing.T) []string {
	t.Helper()
	opts := everySecret()
	var got []string
	for _, p := range Presets() {
		if mustParse(t, "/", p.Name, opts).Extractor(p.Name).Resigner != nil {
			got = append(got, p.Name)
		}
	}
	return got
}

// TestResignDocMatchesCode: docs/delivery.md's table of what each preset's
// attempts carry names every preset once, and as re-signed exactly those
// the code re-signs.
func TestResignDocMatchesCode(t *testing.T) {
	doc, err := os.ReadFile("../docs/delivery.md")
	if err != nil {
		t.Fatal(err)
	}
	md := string(doc)
	i := strings.Index(md, "\n### Signed timestamps and RESIGN\n")
	if i < 0 {
		t.Fatal("docs/delivery.md has no section Signed timestamps and RESIGN")
	}
	code := regexp.MustCompile("`([a-z]+)`")
	seen := map[string]bool{}
	var resigned []string
	for line := range strings.Lines(md[i:]) {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| re-signed") && !strings.HasPrefix(line, "| forwarded unchanged") || len(cells) < 3 {
			continue
		}
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			if seen[m[1]] {
				t.Errorf("docs/delivery.md names %s twice", m[1])
			}
			seen[m[1]] = true
			if strings.HasPrefix(line, "| re-signed") {
				resigned = append(resigned, m[1])
			}
		}
	}
	for _, p := range Presets() {
		if !seen[p.Name] {
			t.Errorf("docs/delivery.md does not say what %s's attempts carry", p.Name)
		}
		delete(seen, p.Name)
	}
	for name := range seen {
		t.Errorf("docs/delivery.md names %s, which is no preset", name)
	}
	if want := presetsWithResigner(t); !slices.Equal(resigned, want) {
		t.Errorf("docs/delivery.md says %v are re-signed; the code re-signs %v", resigned, want)
	}
}

func TestResignerOfEachPreset(t *testing.T) {
	opts := everySecret()
	var got []string
	for _, p := range Presets() {
		src := mustParse(t, "/", p.Name, opts)
		e := src.Extractor(p.Name)
		if e == nil {
			t.Fatalf("%s: Extractor(%q) = nil", p.Name, p.Name)
		}
		if e.Resigner != nil {
			got = append(got, p.Name)
			if any(e.Resigner) != any(e.Verifier) {
				t.Errorf("%s: the Resigner is not the Verifier: two owners of one scheme", p.Name)
			}
		}
		// Without a secret nothing verifies, so nothing may be signed.
		if e := mustParse(t, "/", p.Name, Options{}).Extractor(p.Name); e.Resigner != nil {
			t.Errorf("%s: a Resigner without a secret", p.Name)
		}
	}
	if !slices.Equal(got, resigningPresets) {
		t.Fatalf("presets with a Resigner: %v, want %v", got, resigningPresets)
	}
}

func TestSourceExtractorByNamespace(t *testing.T) {
	opts := everySecret()
	auto := mustParse(t, "/", "auto", opts)
	stripe := auto.Resolve(headers("Stripe-Signature", "t=1,v1=00"))
	if got := auto.Extractor("stripe"); got == nil || got != stripe {
		t.Fatalf("auto: Extractor(stripe) = %v, want the extractor a Stripe request resolves to", got)
	}
	if got := auto.Extractor("github"); got == nil || got.Namespace != "github" {
		t.Fatalf("auto: Extractor(github) = %v", got)
	}
	for _, tt := range []struct {
		src       *Source
		namespace string
		found     bool
	}{
		{auto, "adyen", false}, // not auto-detected
		{auto, "/", false},
		{mustParse(t, "/hooks/gh", "github", opts), "github", true},
		{mustParse(t, "/hooks/gh", "github", opts), "stripe", false},
		{mustParse(t, "/hooks/acme", "header:X-Acme-Id", opts), "/hooks/acme", true},
		{mustParse(t, "/hooks/acme", "header:X-Acme-Id", opts), "acme", false},
	} {
		if got := tt.src.Extractor(tt.namespace); (got != nil) != tt.found || got != nil && got.Namespace != tt.namespace {
			t.Errorf("%v: Extractor(%q) = %v, want found %v", tt.src.PresetNames(), tt.namespace, got, tt.found)
		}
	}
}

func TestUnverified(t *testing.T) {
	stripeOnly := Options{Secrets: map[string][]string{"stripe": {"whsec_x"}}}
	names := func(ps []Preset) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	for _, tt := range []struct {
		name, spec string
		opts       Options
		want       []string
	}{
		{"preset with its secret", "stripe", stripeOnly, nil},
		{"preset without", "github", stripeOnly, []string{"github"}},
		{"preset whose signatures are not checked", "paypal", everySecret(), []string{"paypal"}},
		{"generic source", "header:X-Id", Options{}, nil},
		{"auto: the detected presets without a secret", "auto", stripeOnly, []string{"github", "shopify", "gitlab",
			"standardwebhooks", "slack", "square", "paypal", "paddle", "bitbucket", "jira", "linear", "twitch", "twilio", "zoom", "zendesk"}},
		{"auto, VerifiedOnly", "auto", Options{Secrets: stripeOnly.Secrets, VerifiedOnly: true}, nil},
		{"named preset, VerifiedOnly", "github", Options{Secrets: stripeOnly.Secrets, VerifiedOnly: true}, []string{"github"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := names(mustParse(t, "/", tt.spec, tt.opts).Unverified()); !slices.Equal(got, tt.want) {
				t.Fatalf("Unverified = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAutoVerifiedOnly(t *testing.T) {
	src := mustParse(t, "/", "auto", Options{Secrets: map[string][]string{"stripe": {"whsec_x"}}, VerifiedOnly: true})
	if got := src.PresetNames(); !slices.Equal(got, []string{"stripe"}) {
		t.Fatalf("PresetNames = %v, want [stripe]", got)
	}
	if e := src.Resolve(headers("Stripe-Signature", "t=1,v1=00")); e == nil || e.Verifier == nil {
		t.Fatalf("a Stripe request resolves to %v, want the verifying stripe extractor", e)
	}
	// A sender whose signatures are not verified passes through, unqueued.
	if e := src.Resolve(headers("X-GitHub-Delivery", "d")); e != nil {
		t.Fatalf("a GitHub request resolves to %s, want nil (passed through)", e.Namespace)
	}

	_, err := ParseSource("/", "auto", Options{VerifiedOnly: true})
	if !errors.Is(err, ErrNothingVerified) {
		t.Fatalf("auto, VerifiedOnly, no secret: %v, want ErrNothingVerified", err)
	}
	for _, v := range []string{"STRIPE_WEBHOOK_SECRET", "GITHUB_WEBHOOK_SECRET", "STANDARD_WEBHOOKS_SECRET", "ZENDESK_WEBHOOK_SECRET"} {
		if !strings.Contains(err.Error(), v) {
			t.Errorf("the error does not name %s: %v", v, err)
		}
	}
}
