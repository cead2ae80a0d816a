package signature_test

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/webhook-dedup/webhook-dedup/signature"
)

// Each test here delivers a request its sender signed 10 minutes ago, past
// the 5-minute tolerance of the provider's library, as an async retry
// would: the library refuses it as it is, and accepts it once the proxy's
// verifier has signed it again (Resign) — the app is unmodified and keeps
// the library's default tolerance.

const age = 10 * time.Minute

func resigner(t *testing.T, ctor func(signature.Options) (signature.Verifier, error), secrets ...string) signature.Resigner {
	t.Helper()
	r, ok := mustNew(t, ctor, signature.Options{Secrets: secrets}).(signature.Resigner)
	if !ok {
		t.Fatal("the verifier is not a Resigner")
	}
	return r
}

func TestResignedStripeEventPassesConstructEvent(t *testing.T) {
	// ConstructEvent also insists on the account's API version.
	body := []byte(fmt.Sprintf(`{"id":"evt_resign","object":"event","api_version":%q,"type":"invoice.paid"}`, stripe.APIVersion))
	const rolled = "whsec_rolled_secret"
	for _, tt := range []struct {
		name     string
		signedBy string   // the secret the sender signed with
		secrets  []string // STRIPE_WEBHOOK_SECRET
		app      string   // the app's secret
	}{
		{"one secret", stripeSecret, []string{stripeSecret}, stripeSecret},
		// A roll: the app already has the new secret, the first configured;
		// the event was signed with the old one.
		{"signed with the old secret, the app has the new", stripeSecret, []string{rolled, stripeSecret}, rolled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := header("Stripe-Signature", stripeHeader(tt.signedBy, time.Now().Add(-age), body))
			if _, err := webhook.ConstructEvent(body, h.Get("Stripe-Signature"), tt.signedBy); !errors.Is(err, webhook.ErrTooOld) {
				t.Fatalf("stripe-go on the original: %v, want ErrTooOld", err)
			}
			if err := resigner(t, signature.Stripe, tt.secrets...).Resign(h, body, time.Now()); err != nil {
				t.Fatalf("Resign: %v", err)
			}
			ev, err := webhook.ConstructEvent(body, h.Get("Stripe-Signature"), tt.app)
			if err != nil {
				t.Fatalf("stripe-go refuses the re-signed event: %v", err)
			}
			if ev.ID != "evt_resign" {
				t.Fatalf("event %q", ev.ID)
			}
		})
	}
}

func TestResignedStandardWebhookPassesTheReferenceLibrary(t *testing.T) {
	ref, err := standardwebhooks.NewWebhook(swSecret)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(swPayload)
	old := time.Now().Add(-age)
	sig, err := ref.Sign(swID, old, body)
	if err != nil {
		t.Fatal(err)
	}
	h := header("webhook-id", swID, "webhook-timestamp", strconv.FormatInt(old.Unix(), 10), "webhook-signature", sig)
	if err := ref.Verify(body, h); err == nil {
		t.Fatal("the reference library accepts a 10-minute-old timestamp: this test proves nothing")
	}
	if err := resigner(t, signature.StandardWebhooks, swSecret).Resign(h, body, time.Now()); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	if err := ref.Verify(body, h); err != nil {
		t.Fatalf("the reference library refuses the re-signed request: %v", err)
	}
}

func TestResignedSlackRequestPassesSecretsVerifier(t *testing.T) {
	// Slack's docs example secret and body (providers.md §2.5).
	const secret = "8f742231b10e8888abcd99yyyzzz85a5"
	body := []byte("token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&command=%2Fwebhook-collect&text=")
	ts := strconv.FormatInt(time.Now().Add(-age).Unix(), 10)
	h := header("X-Slack-Request-Timestamp", ts, "X-Slack-Signature", "v0="+fmt.Sprintf("%x", mac([]byte(secret), "v0:"+ts+":"+string(body))))
	if _, err := slackVerify(h, body, secret); !errors.Is(err, slack.ErrExpiredTimestamp) {
		t.Fatalf("slack-go on the original: %v, want ErrExpiredTimestamp", err)
	}
	if err := resigner(t, signature.Slack, secret).Resign(h, body, time.Now()); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	if stage, err := slackVerify(h, body, secret); err != nil {
		t.Fatalf("slack-go refuses the re-signed request (%s): %v", stage, err)
	}
}

// slackVerify checks a request as a slack-go app does.
func slackVerify(h http.Header, body []byte, secret string) (stage string, err error) {
	sv, err := slack.NewSecretsVerifier(h, secret)
	if err != nil {
		return "NewSecretsVerifier", err
	}
	if _, err := sv.Write(body); err != nil {
		return "Write", err
	}
	return "Ensure", sv.Ensure()
}

// TestStripeSDKRoundTrip: what stripe-go signs we verify, and what we
// sign stripe-go verifies.
func TestStripeSDKRoundTrip(t *testing.T) {
	v := mustNew(t, signature.Stripe, signature.Options{Secrets: []string{stripeSecret}})
	at := time.Unix(1732960800, 0)
	h := header("Stripe-Signature", stripeHeader(stripeSecret, at, stripeBody))
	if err := v.Verify(h, stripeBody, at); err != nil {
		t.Fatalf("we refuse stripe-go's header: %v", err)
	}
	if err := v.Verify(h, stripeBody, at.Add(301*time.Second)); !errors.Is(err, signature.ErrStale) {
		t.Fatalf("301 s later: %v, want ErrStale (stripe-go's 300 s)", err)
	}
	// Upper-case hex, which stripe-go's hex.DecodeString accepts.
	upper := "t=" + strconv.FormatInt(at.Unix(), 10) + ",v1=" + strings.ToUpper(fmt.Sprintf("%x", webhook.ComputeSignature(at, stripeBody, stripeSecret)))
	if err := webhook.ValidatePayloadIgnoringTolerance(stripeBody, upper, stripeSecret); err != nil {
		t.Fatalf("stripe-go refuses upper-case hex: %v", err)
	}
	if err := v.Verify(header("Stripe-Signature", upper), stripeBody, at); err != nil {
		t.Fatalf("we refuse upper-case hex: %v", err)
	}
}

// TestStandardWebhooksReferenceRoundTrip: what the reference library signs
// we verify, and what we re-sign it verifies.
func TestStandardWebhooksReferenceRoundTrip(t *testing.T) {
	ref, err := standardwebhooks.NewWebhook(swSecret)
	if err != nil {
		t.Fatal(err)
	}
	v := mustNew(t, signature.StandardWebhooks, signature.Options{Secrets: []string{swSecret}})
	body := []byte(`{"type":"invoice.paid","data":{"id":"in_1"}}`)
	at := time.Unix(1732960800, 0)
	sig, err := ref.Sign("msg_1", at, body)
	if err != nil {
		t.Fatal(err)
	}
	h := header("webhook-id", "msg_1", "webhook-timestamp", strconv.FormatInt(at.Unix(), 10), "webhook-signature", sig)
	if err := v.Verify(h, body, at); err != nil {
		t.Fatalf("we refuse the reference library's signature: %v", err)
	}
}
