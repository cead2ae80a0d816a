package test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAsyncRefusesUnverified: an async route on a preset whose signing
// secret is not set is refused at start (exit 2), naming the variable:
// a forged POST carrying a real event ID would be queued, and the genuine
// event answered as a duplicate the app never sees. ALLOW_UNVERIFIED_ASYNC
// accepts the risk, and the start-up log says so at warn.
func TestAsyncRefusesUnverified(t *testing.T) {
	t.Parallel()
	env := map[string]string{"UPSTREAM_URL": "http://127.0.0.1:1", "ROUTES": "/webhooks/stripe=stripe;async", "DATA_DIR": t.TempDir()}
	code, logs, err := runToExit(t, env)
	if err != nil || code != 2 || !strings.Contains(logs, "STRIPE_WEBHOOK_SECRET: required for the async route /webhooks/stripe") {
		t.Errorf("exit %d (%v), output %q; want exit 2 naming STRIPE_WEBHOOK_SECRET and the route", code, err, logs)
	}
	env["ALLOW_UNVERIFIED_ASYNC"] = "true"
	px := startProxy(t, env)
	px.Stop()
	if logs := px.Logs(); !strings.Contains(logs, `"level":"warn"`) || !strings.Contains(logs, `without verifying their signatures: stripe:`) || !strings.Contains(logs, `"variable":"ALLOW_UNVERIFIED_ASYNC"`) {
		t.Errorf("with ALLOW_UNVERIFIED_ASYNC=true, no warning naming the unverified preset:\n%s", logs)
	}
}

// TestAsyncForgedEventIsRefused: on an async route that verifies, a
// forged POST carrying a real event ID is answered 401 and queues nothing,
// so the genuine event is still queued and reaches the app.
func TestAsyncForgedEventIsRefused(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	px := startProxy(t, asyncEnv(app.URL, diskStore.env(t)))
	ctx, client := testContext(t), newClient(t)
	forger := stripe
	forger.Sign = func(ev event, now time.Time, h http.Header) {
		h.Set("Content-Type", "application/json")
		h.Set("Stripe-Signature", stripeSignature("whsec_not_the_endpoints_secret", now, ev.Body))
	}
	ev := stripe.Event(42)
	expect(t, "forged", mustSend(t, ctx, client, px, forger, ev), http.StatusUnauthorized, "invalid-signature")
	expect(t, "genuine", mustSend(t, ctx, client, px, stripe, ev), http.StatusAccepted, "queued")
	px.awaitState(t, stripe, ev.ID, "completed", px.bounds().delivered(1))
	if n := app.Effects(key(stripe, ev.ID)); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
}
