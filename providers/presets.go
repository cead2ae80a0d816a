package providers

import (
	"net/http"
	"net/textproto"
	"time"

	"github.com/tidwall/gjson"

	"github.com/webhook-dedup/webhook-dedup/signature"
)

// preset is one sender: its public description, where its ID is, how it
// signs and how auto recognises it. The facts come from each provider's
// own documentation; ❓ marks one it does not state clearly (the presets
// table in docs/providers.md marks the same).
type preset struct {
	Preset
	// aliases are further names for the preset in ROUTES. If nil, none.
	aliases []string
	// inflightStatus becomes Extractor.InflightStatus. If zero, the
	// configured INFLIGHT_STATUS.
	inflightStatus int
	// scheme builds the signature verifier. If nil, the preset does not
	// verify signatures (yet) and SecretVar is empty.
	scheme func(signature.Options) (signature.Verifier, error)
	// rule finds the event ID.
	rule *rule
	// detect lists header groups that identify the sender for auto: a
	// request matches when it carries every header of some group. If nil,
	// auto never picks the preset.
	detect [][]string
}

const day = 24 * time.Hour

// catalog returns every preset. Its order is the order of Presets() and the
// order in which auto tries them, so a sender whose headers could match two
// presets goes to the first: GitLab (which also sends webhook-id when a
// signing token is set) comes before standardwebhooks.
func catalog() []preset {
	return []preset{
		{
			// Stripe retries live events for up to 3 days: 4 days covers
			// them with a day's margin.
			Preset: Preset{Name: "stripe", TTL: 4 * day, SecretVar: "STRIPE_WEBHOOK_SECRET"},
			scheme: signature.Stripe,
			rule:   newRule(jsonPart("id")),
			detect: anyOf("Stripe-Signature"),
		},
		{
			// GitHub never retries by itself; a manual redelivery keeps
			// X-GitHub-Delivery and is offered for 3 days (an older docs
			// revision said 30). 4 days covers the 3.
			Preset: Preset{Name: "github", TTL: 4 * day, SecretVar: "GITHUB_WEBHOOK_SECRET"},
			scheme: signature.GitHub,
			rule:   newRule(headerPart("X-GitHub-Delivery")),
			detect: anyOf("X-GitHub-Delivery"),
		},
		{
			// X-Shopify-Webhook-Id is the per-delivery key; X-Shopify-Event-Id
			// is shared by every delivery one merchant action produces, so
			// keying on it would merge different subscriptions. Shopify
			// retries 8 times over 4 h (since 2024-09; 19 times over 48 h
			// before): 3 days covers even the old policy with a day's margin.
			Preset: Preset{Name: "shopify", TTL: 3 * day, SecretVar: "SHOPIFY_WEBHOOK_SECRET"},
			scheme: signature.Shopify,
			rule:   newRule(headerPart("X-Shopify-Webhook-Id")),
			detect: anyOf("X-Shopify-Webhook-Id", "X-Shopify-Hmac-Sha256"),
		},
		{
			// Idempotency-Key (GitLab 17.4+) is stable across retries;
			// webhook-id is sent when a signing token is set ◐. GitLab
			// documents no automatic retry schedule ◐ (it disables a hook
			// after 4 consecutive failures): 3 days, as for the senders
			// that do document one ❓.
			Preset: Preset{Name: "gitlab", TTL: 3 * day, SecretVar: "GITLAB_WEBHOOK_SECRET"},
			scheme: signature.GitLab,
			rule:   newRule(headerPart("Idempotency-Key", "Webhook-Id")),
			detect: anyOf("X-Gitlab-Event"),
		},
		{
			// Svix retries for ≈27 h 35 min; the spec's example schedule
			// runs to 75 h 35 min. 4 days covers both.
			Preset:  Preset{Name: "standardwebhooks", TTL: 4 * day, SecretVar: "STANDARD_WEBHOOKS_SECRET"},
			aliases: []string{"svix"},
			scheme:  signature.StandardWebhooks,
			rule:    newRule(headerPart("Webhook-Id", "Svix-Id")),
			detect:  anyOf("Webhook-Id", "Svix-Id"),
		},
		{
			// Slack retries up to 3 times within about 5 minutes ◐: 1 hour
			// covers them many times over. That event_id is stable across
			// retries is relied on widely but undocumented ❓.
			Preset: Preset{Name: "slack", TTL: time.Hour, SecretVar: "SLACK_WEBHOOK_SECRET"},
			scheme: signature.Slack,
			rule: withHandshake(newRule(jsonPart("event_id")),
				bodyStringIs("type", "url_verification")),
			detect: anyOf("X-Slack-Signature"),
		},
		{
			// Square retries for 24 h (current docs; 72 h in an older
			// revision): 4 days covers the longer one.
			Preset: Preset{Name: "square", TTL: 4 * day, SecretVar: "SQUARE_WEBHOOK_SECRET", URLVar: "SQUARE_WEBHOOK_URL"},
			scheme: signature.Square,
			rule:   newRule(jsonPart("event_id")),
			detect: anyOf("X-Square-Hmacsha256-Signature"),
		},
		{
			// PayPal retries up to 25 times over 3 days: 4 days. The body id
			// (WH-…), not PAYPAL-TRANSMISSION-ID, which may change per
			// attempt ❓. Its RSA/certificate signature is not verified here.
			Preset: Preset{Name: "paypal", TTL: 4 * day},
			rule:   newRule(jsonPart("id")),
			detect: anyOf("Paypal-Transmission-Id"),
		},
		{
			// Paddle retries live events up to 60 times over 3 days: 4 days.
			// event_id, not notification_id (one per destination).
			Preset: Preset{Name: "paddle", TTL: 4 * day, SecretVar: "PADDLE_WEBHOOK_SECRET"},
			scheme: signature.Paddle,
			rule:   newRule(jsonPart("event_id")),
			detect: anyOf("Paddle-Signature"),
		},
		{
			// Bitbucket retries only after a 5xx, at most twice more, within
			// its 10 s timeouts: 1 day is ample. It never retries a 409, so
			// an unresolved in-flight duplicate is answered 503. Whether
			// X-Request-UUID survives the retries is unverified ❓.
			Preset:         Preset{Name: "bitbucket", TTL: day, SecretVar: "BITBUCKET_WEBHOOK_SECRET"},
			inflightStatus: http.StatusServiceUnavailable,
			scheme:         signature.Bitbucket,
			rule:           newRule(headerPart("X-Request-UUID")),
			detect:         allOf("X-Event-Key", "X-Request-UUID"),
		},
		{
			// Jira retries up to 5 times, 5–15 min apart (≤ 75 min) ◐: 1
			// day. The identifier is unique only within one Jira tenant ◐:
			// give each tenant its own route (header: source) if several
			// share a proxy.
			Preset: Preset{Name: "jira", TTL: day, SecretVar: "JIRA_WEBHOOK_SECRET"},
			scheme: signature.Jira,
			rule:   newRule(headerPart("X-Atlassian-Webhook-Identifier")),
			detect: anyOf("X-Atlassian-Webhook-Identifier"),
		},
		{
			// Linear retries 3 times: +1 min, +1 h, +6 h (≈ 7 h): 1 day.
			// Linear-Delivery as the ID, and its stability, are ❓.
			Preset: Preset{Name: "linear", TTL: day, SecretVar: "LINEAR_WEBHOOK_SECRET"},
			scheme: signature.Linear,
			rule:   newRule(headerPart("Linear-Delivery")),
			detect: anyOf("Linear-Delivery"),
		},
		{
			// Twitch keeps the message ID on a resend, but publishes no
			// schedule ❓: 1 day. The callback verification is a handshake;
			// a revocation is a real message with its own ID and is
			// deduplicated like any other (a duplicate still gets a 2xx).
			Preset: Preset{Name: "twitch", TTL: day, SecretVar: "TWITCH_WEBHOOK_SECRET"},
			scheme: signature.Twitch,
			rule: withHandshake(newRule(headerPart("Twitch-Eventsub-Message-Id")),
				headerIs("Twitch-Eventsub-Message-Type", "webhook_callback_verification")),
			detect: anyOf("Twitch-Eventsub-Message-Id"),
		},
		{
			// Twilio retries a failed connection once by default (5 at most,
			// within seconds): 1 day is ample. I-Twilio-Idempotency-Token is
			// widely used but not officially documented ❓. Voice and SMS
			// hooks answer TwiML: enable REPLAY_RESPONSE on such routes.
			Preset: Preset{Name: "twilio", TTL: day, SecretVar: "TWILIO_WEBHOOK_SECRET", URLVar: "TWILIO_WEBHOOK_URL"},
			scheme: signature.Twilio,
			rule:   newRule(headerPart("I-Twilio-Idempotency-Token")),
			detect: anyOf("X-Twilio-Signature", "I-Twilio-Idempotency-Token"),
		},
		{
			// Zoom documents no event ID ❓. Heuristic: the event type, its
			// millisecond timestamp and the object's ID (optional: some
			// events carry no object); a retry resends the same payload.
			// Zoom retries 3 times, +5, +20 and +60 min (≈ 85 min): 1 day.
			Preset: Preset{Name: "zoom", TTL: day, SecretVar: "ZOOM_WEBHOOK_SECRET"},
			scheme: signature.Zoom,
			rule: withHandshake(newRule(jsonPart("event"), jsonPart("event_ts"), optional(jsonPart("payload.object.id"))),
				bodyStringIs("event", "endpoint.url_validation")),
			detect: anyOf("X-Zm-Signature"),
		},
		{
			// Zendesk event subscriptions send an envelope whose id names the
			// event ❓; trigger and automation webhooks send a body the admin
			// defines, usually without one (then: no ID, forwarded). Zendesk
			// retries within about a minute ◐: 1 day.
			Preset: Preset{Name: "zendesk", TTL: day, SecretVar: "ZENDESK_WEBHOOK_SECRET"},
			scheme: signature.Zendesk,
			rule:   newRule(jsonPart("id")),
			detect: anyOf("X-Zendesk-Webhook-Signature"),
		},
		{
			// Adyen has no event ID; pspReference + eventCode + success of
			// the first (usually only ❓) item identifies it ❓. Adyen
			// retries for up to 30 days: 31 days. Its per-item HMAC is not
			// verified here. No distinctive header: not auto-detected.
			Preset: Preset{Name: "adyen", TTL: 31 * day},
			rule: newRule(
				jsonPart("notificationItems.0.NotificationRequestItem.pspReference"),
				jsonPart("notificationItems.0.NotificationRequestItem.eventCode"),
				jsonPart("notificationItems.0.NotificationRequestItem.success"),
			),
		},
		{
			// Mailgun's event-data.id ❓. Mailgun retries for ≈ 8 h 15 min:
			// 1 day. Its signature is in the body and does not cover the
			// event: not verified here. No distinctive header: not
			// auto-detected.
			Preset: Preset{Name: "mailgun", TTL: day},
			rule:   newRule(jsonPart("event-data.id")),
		},
		{
			// Intercom's notification id ❓. Intercom documents no retry
			// schedule ❓ (it pauses a failing hook for 15 min): 2 days. It
			// signs with X-Hub-Signature, which Jira and Bitbucket also
			// send: not auto-detected.
			Preset: Preset{Name: "intercom", TTL: 2 * day, SecretVar: "INTERCOM_WEBHOOK_SECRET"},
			scheme: signature.Intercom,
			rule:   newRule(jsonPart("id")),
		},
	}
}

// withoutPreset explains why a sender has no preset and what to do instead.
// ok is false for names that are not such senders.
func withoutPreset(name string) (why string, ok bool) {
	switch name {
	case "woocommerce":
		return "WooCommerce sends no stable event ID: X-WC-Webhook-Delivery-ID is generated anew for every delivery, so a retry never matches. " +
			"Leave the route out of ROUTES (no deduplication), or choose a heuristic knowingly, " +
			"e.g. header:X-WC-Webhook-Topic+json:id+json:date_modified_gmt (same resource, same change)", true
	case "lemonsqueezy", "lemon-squeezy":
		return "Lemon Squeezy documents no event ID: X-Event-Name and data.id name the event type and the resource, not one delivery. " +
			"Leave the route out of ROUTES (no deduplication), or choose a heuristic knowingly, " +
			"e.g. json:meta.event_name+json:data.id+json:data.attributes.updated_at", true
	case "sendgrid":
		return "SendGrid posts batches: one request carries many events, each with its own sg_event_id, and no request-level ID. " +
			"Leave the route out of ROUTES and deduplicate per event (sg_event_id) in the application", true
	case "hubspot":
		return "HubSpot posts batches of up to 100 events, each with its own eventId, and no request-level ID. " +
			"Leave the route out of ROUTES and deduplicate per event (eventId) in the application", true
	case "discord":
		return "Discord never retries an interaction and its answer is the interaction's reply: deduplication adds nothing. " +
			"Leave the route out of ROUTES", true
	}
	return "", false
}

// withHandshake sets the rule's handshake test.
func withHandshake(r *rule, handshake func(h http.Header, doc string) bool) *rule {
	r.handshake = handshake
	return r
}

// optional makes p's absence an empty part.
func optional(p part) part {
	p.optional = true
	return p
}

// bodyStringIs reports whether the JSON string at path equals want. path is
// a plain key, needing no escaping.
func bodyStringIs(path, want string) func(http.Header, string) bool {
	return func(_ http.Header, doc string) bool {
		res := gjson.Get(doc, path)
		return res.Type == gjson.String && res.Str == want
	}
}

// headerIs reports whether the header's first value equals want.
func headerIs(name, want string) func(http.Header, string) bool {
	name = textproto.CanonicalMIMEHeaderKey(name)
	return func(h http.Header, _ string) bool {
		vs := h[name]
		return len(vs) > 0 && vs[0] == want
	}
}

// anyOf detects a sender by any one of the headers.
func anyOf(names ...string) [][]string {
	groups := make([][]string, len(names))
	for i, n := range names {
		groups[i] = []string{textproto.CanonicalMIMEHeaderKey(n)}
	}
	return groups
}

// allOf detects a sender by all the headers together.
func allOf(names ...string) [][]string {
	group := make([]string, len(names))
	for i, n := range names {
		group[i] = textproto.CanonicalMIMEHeaderKey(n)
	}
	return [][]string{group}
}

// matches reports whether h carries every header of some group.
func matches(groups [][]string, h http.Header) bool {
	for _, group := range groups {
		all := true
		for _, name := range group {
			if len(h[name]) == 0 {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}
