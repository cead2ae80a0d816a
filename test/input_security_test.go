package test

import (
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// securityEnv verifies Stripe, GitHub and Standard Webhooks signatures, on
// a real Redis whose keys start with prefix.
func securityEnv(app *upstream, redisURL, prefix string, more map[string]string) map[string]string {
	env := proxyEnv(app, map[string]string{
		"REDIS_URL":                redisURL,
		"KEY_PREFIX":               prefix,
		"STANDARD_WEBHOOKS_SECRET": standardSecret,
	})
	for k, v := range more {
		env[k] = v
	}
	return env
}

// standardSignature is webhook-signature for id, ts and body under key.
func standardSignature(key, id, ts string, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id+"."+ts+"."+string(body)))
}

// signedAt re-signs a Standard Webhooks request as if sent at t.
func signedAt(ev event, t time.Time) func(h http.Header) {
	return func(h http.Header) {
		ts := strconv.FormatInt(t.Unix(), 10)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", standardSignature(standardKey(), ev.ID, ts, ev.Body))
	}
}

// sendEdited sends one signed attempt of ev by p after edit changed its headers.
func sendEdited(t *testing.T, px *proxy, client *http.Client, p provider, ev event, edit func(h http.Header)) answer {
	t.Helper()
	req, err := p.request(testContext(t), px.Addr, ev)
	if err != nil {
		t.Fatal(err)
	}
	edit(req.Header)
	a, err := do(client, req)
	if err != nil {
		t.Fatalf("POST %s (%s): %v", p.Path, ev.ID, err)
	}
	return a
}

// TestSecurityForgedDeliveryDoesNotPoison: a forged delivery carrying a
// real event's ID is refused with 401 before the store is touched, so the
// genuine delivery that follows is forwarded, not answered "duplicate".
func TestSecurityForgedDeliveryDoesNotPoison(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, securityEnv(app, srv.URL(), "e2e-forged:", nil))
	ctx, client := testContext(t), newClient(t)

	st, gh, sw := stripe.Event(1), github.Event(1), standardWebhooks.Event(1)
	tampered := func(ev event) event {
		ev.Body = []byte(strings.Replace(string(ev.Body), "note", "NOTE", 1))
		return ev
	}
	for _, tc := range []struct {
		input string
		p     provider
		ev    event
		edit  func(h http.Header)
	}{
		{"Stripe signed with another secret", stripe, st, func(h http.Header) {
			h.Set("Stripe-Signature", stripeSignature("whsec_attacker", time.Now(), st.Body))
		}},
		{"Stripe: genuine signature, tampered body", stripe, tampered(st), func(h http.Header) {
			h.Set("Stripe-Signature", stripeSignature(stripeSecret, time.Now(), st.Body))
		}},
		{"Stripe without Stripe-Signature", stripe, st, func(h http.Header) { h.Del("Stripe-Signature") }},
		{"Stripe-Signature that does not parse", stripe, st, func(h http.Header) { h.Set("Stripe-Signature", "t=now,v1=zz") }},
		{"GitHub signed with another secret", github, gh, func(h http.Header) {
			h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac("attacker", string(gh.Body))))
		}},
		{"GitHub: genuine signature, tampered body", github, tampered(gh), func(h http.Header) {
			h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac(githubSecret, string(gh.Body))))
		}},
		{"GitHub without X-Hub-Signature-256", github, gh, func(h http.Header) { h.Del("X-Hub-Signature-256") }},
		{"Standard Webhooks signed with another key", standardWebhooks, sw, func(h http.Header) {
			h.Set("webhook-signature", standardSignature("attacker", sw.ID, h.Get("webhook-timestamp"), sw.Body))
		}},
		{"Standard Webhooks: signature of another webhook-id", standardWebhooks, sw, func(h http.Header) {
			h.Set("webhook-signature", standardSignature(standardKey(), "msg_other", h.Get("webhook-timestamp"), sw.Body))
		}},
		{"Standard Webhooks without webhook-signature", standardWebhooks, sw, func(h http.Header) { h.Del("webhook-signature") }},
	} {
		a := sendEdited(t, px, client, tc.p, tc.ev, tc.edit)
		hostileLine(t, "forged: "+tc.input, a.short())
		expect(t, tc.input, a, http.StatusUnauthorized, "invalid-signature")
	}
	if n := app.Total(); n != 0 {
		t.Errorf("%d forged deliveries reached the app, want none", n)
	}
	// The proxy's own data-loss marker and rollback clock are there from
	// the start.
	keys := strings.Fields(redisKeys(srv.Addr))
	slices.Sort(keys)
	if strings.Join(keys, " ") != "e2e-forged:clock e2e-forged:marker" {
		t.Errorf("forged deliveries left keys in Redis: %s", keys)
	}

	for _, p := range []provider{stripe, github, standardWebhooks} {
		ev := p.Event(1)
		a := mustSend(t, ctx, client, px, p, ev)
		hostileLine(t, "genuine "+p.Name+" delivery after the forgeries of its ID", a.short())
		expect(t, "genuine "+p.Name+" delivery after forgeries", a, 200, "forwarded")
		expect(t, "its redelivery", settledSend(t, ctx, client, px, p, ev), 200, "duplicate")
		if n := app.Effects(key(p, ev.ID)); n != 1 {
			t.Errorf("%s: took effect %d times, want 1", p.Name, n)
		}
	}
	// Refused deliveries are logged with their outcome and reason.
	px.awaitLog(t, `"outcome":"invalid-signature"`, 1)
	px.awaitLog(t, `"reason":"signature: `, 1)
	checkLogs(t, px.Logs())
}

// TestSecurityStaleTimestamps: a signed timestamp older or further in the
// future than SIGNATURE_TOLERANCE is refused, however valid the signature.
func TestSecurityStaleTimestamps(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, securityEnv(app, srv.URL(), "e2e-stale:", map[string]string{"SIGNATURE_TOLERANCE": "2m"}))
	ctx, client := testContext(t), newClient(t)

	now := time.Now()
	for i, tc := range []struct {
		input string
		at    time.Time
		want  int
	}{
		{"signed 3 minutes ago (SIGNATURE_TOLERANCE=2m)", now.Add(-3 * time.Minute), 401},
		{"signed 3 minutes ahead", now.Add(3 * time.Minute), 401},
		{"signed a week ago (a captured delivery replayed)", now.Add(-7 * 24 * time.Hour), 401},
		{"signed 1 minute ago", now.Add(-time.Minute), 200},
	} {
		st := stripe.Event(10 + i)
		a := sendEdited(t, px, client, stripe, st, func(h http.Header) { h.Set("Stripe-Signature", stripeSignature(stripeSecret, tc.at, st.Body)) })
		hostileLine(t, "Stripe "+tc.input, a.short())
		sw := standardWebhooks.Event(10 + i)
		b := sendEdited(t, px, client, standardWebhooks, sw, signedAt(sw, tc.at))
		hostileLine(t, "Standard Webhooks "+tc.input, b.short())
		if tc.want == 401 {
			expect(t, "Stripe "+tc.input, a, 401, "invalid-signature")
			expect(t, "Standard Webhooks "+tc.input, b, 401, "invalid-signature")
		} else {
			expect(t, "Stripe "+tc.input, a, 200, "forwarded")
			expect(t, "Standard Webhooks "+tc.input, b, 200, "forwarded")
		}
	}
	if n := app.Total(); n != 2 {
		t.Errorf("%d deliveries reached the app, want the 2 within tolerance", n)
	}
	// The refused events are not poisoned: their fresh deliveries pass.
	for i := range 3 {
		expect(t, "fresh Stripe delivery of a refused event", mustSend(t, ctx, client, px, stripe, stripe.Event(10+i)), 200, "forwarded")
	}
}

// TestSecurityRotation: with two comma-separated secrets (a rotation) a
// delivery signed with either passes, and one signed with neither is
// refused. The app holds only the new secrets, so deliveries signed with
// an old one go to a route the app passes through.
func TestSecurityRotation(t *testing.T) {
	t.Parallel()
	const (
		oldStripe = "whsec_e2e_previous_stripe_secret"
		oldGitHub = "previous GitHub secret"
	)
	srv := redistest.New(t)
	app := newUpstream(t)
	stripeOld, githubOld := stripe, github
	stripeOld.Path = "/webhooks/stripe-previous"
	stripeOld.Sign = func(ev event, now time.Time, h http.Header) {
		h.Set("Content-Type", "application/json")
		h.Set("Stripe-Signature", stripeSignature(oldStripe, now, ev.Body))
	}
	githubOld.Path = "/webhooks/github-previous"
	githubOld.Sign = func(ev event, now time.Time, h http.Header) {
		github.Sign(ev, now, h)
		h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac(oldGitHub, string(ev.Body))))
	}
	px := startProxy(t, securityEnv(app, srv.URL(), "e2e-rotation:", map[string]string{
		"ROUTES":                routes(append([]provider{stripeOld, githubOld}, allProviders...)...),
		"STRIPE_WEBHOOK_SECRET": oldStripe + "," + stripeSecret,
		"GITHUB_WEBHOOK_SECRET": oldGitHub + ", " + githubSecret,
	}))
	ctx, client := testContext(t), newClient(t)

	for _, tc := range []struct {
		input string
		p     provider
		ev    event
	}{
		{"Stripe signed with the new of two secrets", stripe, stripe.Event(20)},
		{"Stripe signed with the old of two secrets", stripeOld, stripe.Event(21)},
		{"GitHub signed with the new of two secrets", github, github.Event(20)},
		{"GitHub signed with the old of two secrets", githubOld, github.Event(21)},
	} {
		a := mustSend(t, ctx, client, px, tc.p, tc.ev)
		hostileLine(t, "rotation: "+tc.input, a.short())
		expect(t, tc.input, a, 200, "forwarded")
		expect(t, tc.input+", redelivered", settledSend(t, ctx, client, px, tc.p, tc.ev), 200, "duplicate")
	}
	if got := len(app.Passed()); got != 2 {
		t.Errorf("the app saw %d deliveries signed with an old secret, want 2: %q", got, app.Passed())
	}
	st := stripe.Event(22)
	a := sendEdited(t, px, client, stripe, st, func(h http.Header) {
		h.Set("Stripe-Signature", stripeSignature("whsec_retired", time.Now(), st.Body))
	})
	hostileLine(t, "rotation: Stripe signed with a retired secret", a.short())
	expect(t, "Stripe signed with a retired secret", a, 401, "invalid-signature")
	gh := github.Event(22)
	a = sendEdited(t, px, client, github, gh, func(h http.Header) {
		h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac("retired", string(gh.Body))))
	})
	expect(t, "GitHub signed with a retired secret", a, 401, "invalid-signature")
}
