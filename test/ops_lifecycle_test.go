package test

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestInvalidSignature: with a secret configured, a forged or stale
// delivery is refused with 401 invalid-signature before the store is
// touched, so the genuine delivery is still forwarded.
func TestInvalidSignature(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, nil))
	ctx, client := testContext(t), newClient(t)

	ev := stripe.Event(1)
	for _, tc := range []struct {
		name string
		p    provider
		ev   event
		sign func(h http.Header)
	}{
		{"Stripe signed with another secret", stripe, ev, func(h http.Header) {
			h.Set("Stripe-Signature", stripeSignature("whsec_not_the_secret", time.Now(), ev.Body))
		}},
		{"Stripe signed 10 minutes ago", stripe, ev, func(h http.Header) {
			h.Set("Stripe-Signature", stripeSignature(stripeSecret, time.Now().Add(-10*time.Minute), ev.Body))
		}},
		{"Stripe without a signature", stripe, ev, func(h http.Header) { h.Del("Stripe-Signature") }},
		{"GitHub signed with another secret", github, github.Event(1), func(h http.Header) {
			h.Set("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
		}},
	} {
		req, err := tc.p.request(ctx, px.Addr, tc.ev)
		if err != nil {
			t.Fatal(err)
		}
		tc.sign(req.Header)
		a, err := do(client, req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		expect(t, tc.name, a, http.StatusUnauthorized, "invalid-signature")
	}
	if n := app.Total(); n != 0 {
		t.Errorf("%d forged deliveries reached the app, want none", n)
	}
	expect(t, "genuine Stripe delivery after forgeries", mustSend(t, ctx, client, px, stripe, ev), 200, "forwarded")
	expect(t, "genuine GitHub delivery after a forgery", mustSend(t, ctx, client, px, github, github.Event(1)), 200, "forwarded")
}

// TestGracefulShutdown: on SIGTERM /readyz turns 503 while the listener
// keeps serving for SHUTDOWN_DELAY, a request already at the app finishes
// and is answered, and the process exits 0.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	const shutdownDelay = 5 * time.Second
	px := startProxy(t, proxyEnv(app, map[string]string{"SHUTDOWN_DELAY": shutdownDelay.String(), "SHUTDOWN_TIMEOUT": "10s"}))
	ctx, client := testContext(t), newClient(t)

	ev := stripe.Event(1)
	release := app.Hold()
	t.Cleanup(release)
	answered := make(chan answer, 1)
	go func() {
		a, err := stripe.send(ctx, client, px.Addr, ev)
		if err != nil {
			a = answer{Status: -1, Body: []byte(err.Error())}
		}
		answered <- a
	}()
	app.awaitEntered(t, key(stripe, ev.ID), px.bounds().claimed())

	px.Terminate()
	// A 503 seen well within SHUTDOWN_DELAY came at once, not when the
	// delay ended (pollAdmin may overrun its bound by one GET's 1 s
	// timeout); the delay is long enough for a loaded machine to deliver
	// the signal and answer a GET meanwhile.
	if err := px.pollAdmin("/readyz", http.StatusServiceUnavailable, shutdownDelay-2*time.Second); err != nil {
		t.Errorf("readyz after SIGTERM: %v", err)
	}
	release()
	expect(t, "the delivery at the app during shutdown", <-answered, 200, "forwarded")
	if code := px.waitExit(px.bounds().exited()); code != 0 {
		t.Errorf("exit status after SIGTERM: %s, want 0", strconv.Itoa(code))
	}
}
