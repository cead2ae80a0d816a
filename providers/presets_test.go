package providers

import (
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/signature"
)

func TestPresetIDs(t *testing.T) {
	for _, c := range []struct {
		preset string
		idCase
	}{
		{"stripe", idCase{name: "body id", body: `{"id":"evt_1","object":"event","data":{"object":{"id":"ch_1"}}}`, want: "evt_1"}},
		{"stripe", idCase{name: "no id", body: `{"object":"event"}`, wantErr: ErrNoID}},
		{"github", idCase{name: "delivery", h: headers("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"), want: "72d3162e-cc78-11e3-81ab-4c9367dc0958"}},
		{"github", idCase{name: "no delivery", h: headers("X-GitHub-Event", "push"), wantErr: ErrNoID}},
		{"shopify", idCase{name: "webhook id", h: headers("X-Shopify-Webhook-Id", "b54557e4", "X-Shopify-Event-Id", "98880550"), want: "b54557e4"}},
		{"shopify", idCase{name: "event id is not the key", h: headers("X-Shopify-Event-Id", "98880550"), wantErr: ErrNoID}},
		{"standardwebhooks", idCase{name: "webhook-id", h: headers("webhook-id", "msg_1"), want: "msg_1"}},
		{"standardwebhooks", idCase{name: "svix-id", h: headers("svix-id", "msg_2"), want: "msg_2"}},
		{"standardwebhooks", idCase{name: "webhook-id first", h: headers("svix-id", "msg_2", "webhook-id", "msg_1"), want: "msg_1"}},
		{"standardwebhooks", idCase{name: "empty webhook-id falls back", h: headers("webhook-id", " ", "svix-id", "msg_2"), want: "msg_2"}},
		{"standardwebhooks", idCase{name: "neither", h: headers("webhook-timestamp", "1"), wantErr: ErrNoID}},
		{"svix", idCase{name: "alias", h: headers("svix-id", "msg_2"), want: "msg_2"}},
		{"slack", idCase{name: "event_id", body: `{"type":"event_callback","event_id":"Ev01"}`, want: "Ev01"}},
		{"slack", idCase{name: "url_verification", body: `{"type":"url_verification","challenge":"c","token":"t"}`, wantErr: ErrNotEvent}},
		{"slack", idCase{name: "form body", body: `payload=%7B%7D`, wantErr: ErrNoID}},
		{"square", idCase{name: "event_id", body: `{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f"}`, want: "ac3ac95b-f97d-458c-a6e6-18981597e05f"}},
		{"paypal", idCase{name: "body id", h: headers("Paypal-Transmission-Id", "t1"), body: `{"id":"WH-1","event_type":"PAYMENT.CAPTURE.COMPLETED"}`, want: "WH-1"}},
		{"paddle", idCase{name: "event_id not notification_id", body: `{"event_id":"evt_01","notification_id":"ntf_01"}`, want: "evt_01"}},
		{"gitlab", idCase{name: "Idempotency-Key", h: headers("Idempotency-Key", "k1", "webhook-id", "w1"), want: "k1"}},
		{"gitlab", idCase{name: "webhook-id", h: headers("webhook-id", "w1"), want: "w1"}},
		{"gitlab", idCase{name: "event UUID is not the key", h: headers("X-Gitlab-Event-UUID", "u1"), wantErr: ErrNoID}},
		{"bitbucket", idCase{name: "request UUID", h: headers("X-Request-UUID", "{r1}", "X-Hook-UUID", "{h1}"), want: "{r1}"}},
		{"jira", idCase{name: "identifier", h: headers("X-Atlassian-Webhook-Identifier", "12345"), want: "12345"}},
		{"linear", idCase{name: "delivery", h: headers("Linear-Delivery", "d1"), want: "d1"}},
		{"twitch", idCase{name: "notification", h: headers("Twitch-Eventsub-Message-Id", "m1", "Twitch-Eventsub-Message-Type", "notification"), want: "m1"}},
		{"twitch", idCase{name: "revocation is deduplicated", h: headers("Twitch-Eventsub-Message-Id", "m2", "Twitch-Eventsub-Message-Type", "revocation"), want: "m2"}},
		{"twitch", idCase{name: "callback verification", h: headers("Twitch-Eventsub-Message-Id", "m3", "Twitch-Eventsub-Message-Type", "webhook_callback_verification"), wantErr: ErrNotEvent}},
		{"twilio", idCase{name: "idempotency token", h: headers("I-Twilio-Idempotency-Token", "tok1", "X-Twilio-Signature", "sig"), want: "tok1"}},
		{"adyen", idCase{name: "composite", body: `{"live":"false","notificationItems":[{"NotificationRequestItem":{"pspReference":"7914073381342284","eventCode":"AUTHORISATION","success":"true"}}]}`, want: "7914073381342284+AUTHORISATION+true"}},
		{"adyen", idCase{name: "no eventCode", body: `{"notificationItems":[{"NotificationRequestItem":{"pspReference":"7914073381342284","success":"true"}}]}`, wantErr: ErrNoID}},
		{"adyen", idCase{name: "no items", body: `{"notificationItems":[]}`, wantErr: ErrNoID}},
		{"mailgun", idCase{name: "event-data.id", body: `{"signature":{"token":"t"},"event-data":{"id":"CPgfbmQMTCKtHW6uIWtuVe","event":"delivered"}}`, want: "CPgfbmQMTCKtHW6uIWtuVe"}},
		{"intercom", idCase{name: "notification id", body: `{"type":"notification_event","id":"notif_1","topic":"conversation.user.created"}`, want: "notif_1"}},
		{"zoom", idCase{name: "with object", body: `{"event":"meeting.started","event_ts":1626230691572,"payload":{"account_id":"a","object":{"id":85369521765,"uuid":"u"}}}`, want: "meeting.started+1626230691572+85369521765"}},
		{"zoom", idCase{name: "without object", body: `{"event":"app_deauthorized","event_ts":1626230691572,"payload":{"user_id":"u"}}`, want: "app_deauthorized+1626230691572+"}},
		{"zoom", idCase{name: "no timestamp", body: `{"event":"meeting.started","payload":{"object":{"id":1}}}`, wantErr: ErrNoID}},
		{"zoom", idCase{name: "url validation", body: `{"event":"endpoint.url_validation","event_ts":1654503849680,"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"}}`, wantErr: ErrNotEvent}},
		{"zoom", idCase{name: "invalid object id", body: `{"event":"e","event_ts":1,"payload":{"object":{"id":"a\u0007"}}}`, wantErr: ErrInvalidID}},
		{"zendesk", idCase{name: "envelope id", body: `{"type":"zen:event-type:ticket.created","account_id":1,"id":"cbe4028c-7239-495d-b020-f22348516046","detail":{}}`, want: "cbe4028c-7239-495d-b020-f22348516046"}},
		{"zendesk", idCase{name: "trigger body without id", body: `{"ticket":"123"}`, wantErr: ErrNoID}},
	} {
		t.Run(c.preset+"/"+c.name, func(t *testing.T) {
			src := mustParse(t, "/ignored", c.preset, Options{})
			c.check(t, src.Resolve(c.h))
		})
	}
}

// TestPresetExtractors checks what every preset's extractor carries.
func TestPresetExtractors(t *testing.T) {
	bodyPresets := []string{"stripe", "slack", "square", "paypal", "paddle", "adyen", "mailgun", "intercom", "zoom", "zendesk"}
	for _, p := range Presets() {
		t.Run(p.Name, func(t *testing.T) {
			src := mustParse(t, "/webhooks/x", p.Name, Options{})
			e := src.Resolve(http.Header{})
			if e == nil {
				t.Fatal("Resolve = nil for a preset")
			}
			if e.Namespace != p.Name {
				t.Errorf("Namespace = %q; want the preset name", e.Namespace)
			}
			if e.TTL != p.TTL {
				t.Errorf("TTL = %v; want the preset's %v", e.TTL, p.TTL)
			}
			if want := slices.Contains(bodyPresets, p.Name); e.NeedsBody != want {
				t.Errorf("NeedsBody = %v; want %v", e.NeedsBody, want)
			}
			if e.Verifier != nil {
				t.Errorf("Verifier set without a secret")
			}
			wantStatus := 0
			if p.Name == "bitbucket" {
				wantStatus = http.StatusServiceUnavailable
			}
			if e.InflightStatus != wantStatus {
				t.Errorf("InflightStatus = %d; want %d", e.InflightStatus, wantStatus)
			}
			if got := src.PresetNames(); !slices.Equal(got, []string{p.Name}) {
				t.Errorf("PresetNames = %v; want [%s]", got, p.Name)
			}
			if src.Resolve(http.Header{}) != e {
				t.Errorf("Resolve built a new extractor; want the one built by ParseSource")
			}
		})
	}
}

func TestPresetAliasesAndCase(t *testing.T) {
	for spec, want := range map[string]string{
		"svix":             "standardwebhooks",
		"SVIX":             "standardwebhooks",
		"standardwebhooks": "standardwebhooks",
		"Stripe":           "stripe",
		" github ":         "github",
	} {
		src := mustParse(t, "/", spec, Options{})
		if e := src.Resolve(nil); e.Namespace != want {
			t.Errorf("%q: Namespace = %q; want %q", spec, e.Namespace, want)
		}
		if names := src.PresetNames(); !slices.Equal(names, []string{want}) {
			t.Errorf("%q: PresetNames = %v; want [%s]", spec, names, want)
		}
	}
}

func TestPresetTTLOverride(t *testing.T) {
	for _, spec := range []string{"stripe", "adyen", "auto"} {
		src := mustParse(t, "/", spec, Options{TTL: 2 * time.Hour})
		e := src.Resolve(headers("Stripe-Signature", "t=1,v1=00"))
		if e.TTL != 2*time.Hour {
			t.Errorf("%s: TTL = %v; want the override 2h", spec, e.TTL)
		}
	}
}

// TestPresetTTLsCoverRetryWindows pins each preset's documented retry
// window (as its provider documents it) and checks that its default TTL outlives it
// with a margin.
func TestPresetTTLsCoverRetryWindows(t *testing.T) {
	windows := map[string]time.Duration{
		"stripe":           3 * day,                       // live retries
		"github":           3 * day,                       // manual redelivery offered
		"shopify":          48 * time.Hour,                // pre-2024 policy; now 4 h
		"gitlab":           2 * day,                       // undocumented; providers.md suggests 2–3 d
		"standardwebhooks": 75*time.Hour + 35*time.Minute, // spec example; Svix ≈ 27 h 35 m
		"slack":            6 * time.Minute,               // 3 retries within ~5 min
		"square":           72 * time.Hour,                // older docs; now 24 h
		"paypal":           3 * day,                       // 25 retries
		"paddle":           3 * day,                       // 60 retries
		"bitbucket":        time.Minute,                   // 2 more attempts on 5xx
		"jira":             75 * time.Minute,              // 5 retries, 5–15 min apart
		"linear":           7*time.Hour + time.Minute,     // +1 min, +1 h, +6 h
		"twitch":           time.Hour,                     // unpublished
		"twilio":           5 * time.Minute,               // up to 5 connection retries
		"zoom":             85 * time.Minute,              // +5, +20, +60 min
		"zendesk":          5 * time.Minute,               // retries within ~1 min
		"adyen":            30 * day,                      // retry queue
		"mailgun":          8*time.Hour + 15*time.Minute,  // 10 m … 4 h
		"intercom":         day,                           // undocumented
	}
	// The margin is 20 % of the window, or a day for windows longer than 5 days.
	margin := func(w time.Duration) time.Duration { return min(w/5, day) }
	presets := Presets()
	if len(presets) != len(windows) {
		t.Fatalf("%d presets, %d retry windows: pin every preset's window here", len(presets), len(windows))
	}
	for _, p := range presets {
		w, ok := windows[p.Name]
		if !ok {
			t.Errorf("%s: no retry window pinned", p.Name)
			continue
		}
		if p.TTL < w+margin(w) {
			t.Errorf("%s: TTL %v does not cover its %v retry window with a margin", p.Name, p.TTL, w)
		}
	}
}

func TestPresetCatalog(t *testing.T) {
	schemes := map[string]func(signature.Options) (signature.Verifier, error){
		"stripe":           signature.Stripe,
		"github":           signature.GitHub,
		"shopify":          signature.Shopify,
		"standardwebhooks": signature.StandardWebhooks,
		"slack":            signature.Slack,
		"paddle":           signature.Paddle,
		"linear":           signature.Linear,
		"twitch":           signature.Twitch,
		"zoom":             signature.Zoom,
		"gitlab":           signature.GitLab,
		"bitbucket":        signature.Bitbucket,
		"jira":             signature.Jira,
		"intercom":         signature.Intercom,
		"zendesk":          signature.Zendesk,
		"square":           signature.Square,
		"twilio":           signature.Twilio,
	}
	urlVars := map[string]string{"square": "SQUARE_WEBHOOK_URL", "twilio": "TWILIO_WEBHOOK_URL"}
	seen := map[string]bool{}
	for _, p := range catalog() {
		for _, name := range append([]string{p.Name}, p.aliases...) {
			if seen[name] {
				t.Errorf("name %q used twice", name)
			}
			seen[name] = true
			if _, ok := withoutPreset(name); ok {
				t.Errorf("%s is both a preset and a sender without one", name)
			}
		}
		if p.TTL <= 0 {
			t.Errorf("%s: TTL %v", p.Name, p.TTL)
		}
		want, signs := schemes[p.Name]
		switch {
		case signs && p.scheme == nil:
			t.Errorf("%s: no signature scheme", p.Name)
		case signs && reflect.ValueOf(p.scheme).Pointer() != reflect.ValueOf(want).Pointer():
			t.Errorf("%s: wrong signature scheme", p.Name)
		case !signs && p.scheme != nil:
			t.Errorf("%s: unexpected signature scheme", p.Name)
		}
		wantVar := ""
		if signs {
			wantVar = strings.ToUpper(p.Name) + "_WEBHOOK_SECRET"
			if p.Name == "standardwebhooks" {
				wantVar = "STANDARD_WEBHOOKS_SECRET"
			}
		}
		if p.SecretVar != wantVar {
			t.Errorf("%s: SecretVar = %q; want %q", p.Name, p.SecretVar, wantVar)
		}
		if p.URLVar != urlVars[p.Name] {
			t.Errorf("%s: URLVar = %q; want %q", p.Name, p.URLVar, urlVars[p.Name])
		}
	}
	if !slices.Equal(Presets()[0:1], []Preset{catalog()[0].Preset}) {
		t.Error("Presets is not in catalog order")
	}
}

func TestPresetsReturnsACopy(t *testing.T) {
	a := Presets()
	a[0].Name = "changed"
	if Presets()[0].Name == "changed" {
		t.Fatal("Presets shares its slice between calls")
	}
}

func TestAutoDetection(t *testing.T) {
	src := mustParse(t, "/", "auto", Options{})
	for _, c := range []struct {
		name string
		h    http.Header
		want string // preset; empty: not recognised
	}{
		{"stripe", headers("Stripe-Signature", "t=1,v1=00"), "stripe"},
		{"github", headers("X-GitHub-Delivery", "d"), "github"},
		{"gitea speaks github", headers("X-GitHub-Delivery", "d", "X-Gitea-Delivery", "d"), "github"},
		{"shopify webhook id", headers("X-Shopify-Webhook-Id", "w"), "shopify"},
		{"shopify hmac", headers("X-Shopify-Hmac-Sha256", "h"), "shopify"},
		{"gitlab", headers("X-Gitlab-Event", "Push Hook"), "gitlab"},
		{"gitlab before standardwebhooks", headers("X-Gitlab-Event", "Push Hook", "webhook-id", "w"), "gitlab"},
		{"standardwebhooks", headers("webhook-id", "msg"), "standardwebhooks"},
		{"svix", headers("svix-id", "msg"), "standardwebhooks"},
		{"slack", headers("X-Slack-Signature", "v0=00"), "slack"},
		{"square", headers("X-Square-Hmacsha256-Signature", "s"), "square"},
		{"paypal", headers("PAYPAL-TRANSMISSION-ID", "t"), "paypal"},
		{"paddle", headers("Paddle-Signature", "ts=1;h1=00"), "paddle"},
		{"bitbucket", headers("X-Event-Key", "repo:push", "X-Request-UUID", "r"), "bitbucket"},
		{"bitbucket needs both: request UUID", headers("X-Request-UUID", "r"), ""},
		{"bitbucket needs both: event key", headers("X-Event-Key", "repo:push"), ""},
		{"jira", headers("X-Atlassian-Webhook-Identifier", "1"), "jira"},
		{"linear", headers("Linear-Delivery", "d"), "linear"},
		{"twitch", headers("Twitch-Eventsub-Message-Id", "m"), "twitch"},
		{"twilio signature", headers("X-Twilio-Signature", "s"), "twilio"},
		{"twilio token", headers("I-Twilio-Idempotency-Token", "t"), "twilio"},
		{"sendgrid is not twilio", headers("X-Twilio-Email-Event-Webhook-Signature", "s"), ""},
		{"zoom", headers("x-zm-signature", "v0=00"), "zoom"},
		{"zendesk", headers("X-Zendesk-Webhook-Signature", "s"), "zendesk"},
		{"intercom is not detected", headers("X-Hub-Signature", "sha1=00"), ""},
		{"woocommerce is not detected", headers("X-WC-Webhook-Delivery-ID", "d"), ""},
		{"empty header value", headers("Stripe-Signature", ""), "stripe"},
		{"nothing", headers("Content-Type", "application/json"), ""},
		{"no headers", nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := src.Resolve(c.h)
			switch {
			case c.want == "" && e != nil:
				t.Fatalf("Resolve = %s; want nil", e.Namespace)
			case c.want != "" && e == nil:
				t.Fatalf("Resolve = nil; want %s", c.want)
			case c.want != "" && e.Namespace != c.want:
				t.Fatalf("Resolve = %s; want %s", e.Namespace, c.want)
			}
		})
	}
}

// TestAutoExtractsLikeThePreset checks that auto's extractor finds the ID
// where the preset does, handshakes included.
func TestAutoExtractsLikeThePreset(t *testing.T) {
	src := mustParse(t, "/", "auto", Options{})
	for _, c := range []idCase{
		{name: "stripe", h: headers("Stripe-Signature", "t=1,v1=00"), body: `{"id":"evt_1"}`, want: "evt_1"},
		{name: "slack handshake", h: headers("X-Slack-Signature", "v0=00"), body: `{"type":"url_verification","challenge":"c"}`, wantErr: ErrNotEvent},
		{name: "gitlab", h: headers("X-Gitlab-Event", "Push Hook", "Idempotency-Key", "k"), want: "k"},
		{name: "twitch handshake", h: headers("Twitch-Eventsub-Message-Id", "m", "Twitch-Eventsub-Message-Type", "webhook_callback_verification"), wantErr: ErrNotEvent},
	} {
		t.Run(c.name, func(t *testing.T) { c.check(t, src.Resolve(c.h)) })
	}
}

func TestAutoPresetNames(t *testing.T) {
	src := mustParse(t, "/", "auto", Options{})
	want := []string{"stripe", "github", "shopify", "gitlab", "standardwebhooks", "slack", "square", "paypal",
		"paddle", "bitbucket", "jira", "linear", "twitch", "twilio", "zoom", "zendesk"}
	got := src.PresetNames()
	if !slices.Equal(got, want) {
		t.Fatalf("PresetNames = %v; want %v", got, want)
	}
	got[0] = "changed"
	if src.PresetNames()[0] != "stripe" {
		t.Fatal("PresetNames shares its slice with the source")
	}
}

func TestResolveDoesNotAllocate(t *testing.T) {
	auto := mustParse(t, "/", "auto", Options{})
	fixed := mustParse(t, "/", "github", Options{})
	miss := headers("Content-Type", "application/json")
	zendesk := headers("X-Zendesk-Webhook-Signature", "s")
	allocs := testing.AllocsPerRun(100, func() {
		_ = auto.Resolve(miss)
		_ = auto.Resolve(zendesk)
		_ = fixed.Resolve(miss)
	})
	if allocs != 0 {
		t.Fatalf("Resolve allocates %v times per call; want 0", allocs)
	}
}

// fakeScheme records the options it was built with.
type fakeScheme struct {
	got signature.Options
	err error
}

type fakeVerifier struct{}

func (fakeVerifier) Verify(http.Header, []byte, time.Time) error { return nil }
func (fakeVerifier) Headers() []string                           { return []string{"X-Fake-Signature"} }

func (f *fakeScheme) build(o signature.Options) (signature.Verifier, error) {
	f.got = o
	if f.err != nil {
		return nil, f.err
	}
	return fakeVerifier{}, nil
}

// presetWithFake returns the named preset, signing with a fake.
func presetWithFake(t *testing.T, name string, f *fakeScheme) *preset {
	t.Helper()
	p, ok := findPreset(catalog(), name)
	if !ok {
		t.Fatalf("no preset %s", name)
	}
	p.scheme = f.build
	return p
}

func TestVerifierWiring(t *testing.T) {
	f := &fakeScheme{}
	p := presetWithFake(t, "square", f)
	opts := Options{
		Secrets:   map[string][]string{"square": {"k1", "k2"}, "stripe": {"other"}},
		URLs:      map[string]string{"square": "https://example.com/hooks/square"},
		Tolerance: 42 * time.Second,
	}
	e, err := presetExtractor(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	if e.Verifier == nil || !e.NeedsBody {
		t.Fatalf("extractor = %+v; want a verifier and NeedsBody", e)
	}
	want := signature.Options{Secrets: []string{"k1", "k2"}, Tolerance: 42 * time.Second, URL: "https://example.com/hooks/square"}
	if !reflect.DeepEqual(f.got, want) {
		t.Fatalf("scheme built with %+v; want %+v", f.got, want)
	}
}

func TestVerifierMakesHeaderPresetReadBody(t *testing.T) {
	p := presetWithFake(t, "github", &fakeScheme{})
	e, err := presetExtractor(p, Options{Secrets: map[string][]string{"github": {"s"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !e.NeedsBody {
		t.Fatal("a header preset with a verifier must read the body")
	}
}

func TestVerifierErrorNamesTheVariable(t *testing.T) {
	cause := errors.New("signature: no URL")
	for name, mention := range map[string][]string{
		"square":           {"SQUARE_WEBHOOK_SECRET", "SQUARE_WEBHOOK_URL"},
		"standardwebhooks": {"STANDARD_WEBHOOKS_SECRET"},
	} {
		p := presetWithFake(t, name, &fakeScheme{err: cause})
		_, err := presetExtractor(p, Options{Secrets: map[string][]string{name: {"bad"}}})
		if !errors.Is(err, cause) {
			t.Fatalf("%s: error = %v; want it to wrap the constructor's", name, err)
		}
		for _, m := range mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: error %q does not name %s", name, err, m)
			}
		}
	}
}

func TestEmptySecretsBuildNoVerifier(t *testing.T) {
	// Empty lists and secrets for other presets never reach the (stub)
	// constructors: ParseSource would panic here if they did.
	opts := Options{Secrets: map[string][]string{"stripe": nil, "github": {}}}
	for _, spec := range []string{"stripe", "github", "auto"} {
		src := mustParse(t, "/", spec, opts)
		if e := src.Resolve(headers("Stripe-Signature", "x")); e.Verifier != nil {
			t.Errorf("%s: Verifier set without a secret", spec)
		}
	}
}

func TestSecretForPresetThatDoesNotSign(t *testing.T) {
	_, err := ParseSource("/", "paypal", Options{Secrets: map[string][]string{"paypal": {"s"}}})
	if err == nil || !strings.Contains(err.Error(), "does not verify signatures") {
		t.Fatalf("error = %v; want one saying paypal does not verify signatures", err)
	}
}
