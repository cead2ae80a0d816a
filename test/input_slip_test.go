package test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// variantRequest is one signed attempt of ev by p, sent with method to
// path instead of p's own (as raw bytes: Go's client would not send every
// spelling), with edit applied to its headers first (nil: none).
func variantRequest(t *testing.T, px *proxy, p provider, ev event, method, path string, edit func(http.Header)) string {
	t.Helper()
	req, err := p.request(testContext(t), px.Addr, ev)
	if err != nil {
		t.Fatal(err)
	}
	req.Method = method
	req.URL.Path, req.URL.RawPath = path, ""
	markSent(req)
	if edit != nil {
		edit(req.Header)
	}
	return rawHead(req, len(ev.Body)) + string(ev.Body)
}

// githubVariants are spellings of GitHub's route that app frameworks route
// to its handler (Express folds case, servlet containers drop ';'
// parameters, Rails accepts a format suffix, most servers and proxies
// resolve dot segments and repeated slashes), with the method as sent.
var githubVariants = []struct{ method, path string }{
	{"POST", "/Webhooks/github"},
	{"POST", "/webhooks/GitHub"},
	{"POST", "/webhooks/github;jsessionid=1"},
	{"POST", "/webhooks/github.json"},
	{"POST", "//webhooks/github"},
	{"POST", "/webhooks/./github"},
	{"POST", "/webhooks/x/../github"},
	{"post", "/webhooks/github"},
}

// TestVariantPathsAreVerified: with GITHUB_WEBHOOK_SECRET set, a forged
// delivery on any variant of GitHub's path is refused 401 and never
// reaches the app; a genuine delivery's redelivery on a variant is a
// duplicate, not processed again.
func TestVariantPathsAreVerified(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, securityEnv(app, srv.URL(), "e2e-variants:", nil))
	ctx, client := testContext(t), newClient(t)

	ev := github.Event(1)
	forge := func(h http.Header) { h.Set("X-Hub-Signature-256", "sha256="+fmt.Sprintf("%064x", 1)) }
	for _, v := range githubVariants {
		a, err := rawExchange(px.Addr, variantRequest(t, px, github, ev, v.method, v.path, forge))
		if err != nil {
			t.Fatalf("%s %s: %v", v.method, v.path, err)
		}
		hostileLine(t, "forged GitHub delivery, "+v.method+" "+v.path, a.short())
		expect(t, "forged "+v.method+" "+v.path, a, 401, "invalid-signature")
	}
	if n := app.Total(); n != 0 {
		t.Fatalf("forged deliveries reached the app %d times (passed through: %q)", n, app.Passed())
	}

	expect(t, "the genuine delivery", mustSend(t, ctx, client, px, github, ev), 200, "forwarded")
	for _, v := range githubVariants {
		a, err := rawExchange(px.Addr, variantRequest(t, px, github, ev, v.method, v.path, nil))
		if err != nil {
			t.Fatalf("%s %s: %v", v.method, v.path, err)
		}
		hostileLine(t, "GitHub redelivery, "+v.method+" "+v.path, a.short())
		expect(t, "redelivery "+v.method+" "+v.path, a, 200, "duplicate")
	}
	if got := app.Effects(key(github, ev.ID)); got != 1 || app.Total() != 1 {
		t.Errorf("the app processed the event %d times and saw %d requests (passed through: %q); want once",
			got, app.Total(), app.Passed())
	}

	// A first-seen event on a variant is forwarded as it was sent: the app
	// (which routes only the exact path, so it lists it as passed) checks
	// the request target it received against the one the sender wrote.
	a, err := rawExchange(px.Addr, variantRequest(t, px, github, github.Event(2), "post", "/webhooks/./GitHub;v=1", nil))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "a first-seen event on a variant", a, 200, "forwarded")
	if passed := app.Passed(); len(passed) != 1 || !strings.HasPrefix(passed[0], "post /webhooks/./GitHub;v=1?") {
		t.Errorf("the app received %q; want the request as sent", passed)
	}
	expectNoPanic(t, px)
}

// TestConnectionNamingTheIDHeader: a request whose Connection header names
// the ID header (which a proxy removes on the way as hop-by-hop, after
// deduplicating on it) or a signature header is refused 400 invalid-id.
func TestConnectionNamingTheIDHeader(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, securityEnv(app, srv.URL(), "e2e-connection:", nil))

	for i, connection := range []string{"X-GitHub-Delivery", "keep-alive, x-github-delivery", "X-Hub-Signature-256"} {
		ev := github.Event(10 + i)
		data := variantRequest(t, px, github, ev, "POST", github.Path, func(h http.Header) { h.Set("Connection", connection) })
		a, err := rawExchange(px.Addr, data)
		if err != nil {
			t.Fatal(err)
		}
		hostileLine(t, "Connection: "+connection, a.short())
		expect(t, "Connection: "+connection, a, 400, "invalid-id")
		if n := app.Attempts(key(github, ev.ID)); n != 0 {
			t.Errorf("Connection: %s: the app received the event %d times", connection, n)
		}
	}
	if n := app.Total(); n != 0 {
		t.Errorf("the app received %d requests (passed through: %q)", n, app.Passed())
	}
	expectNoPanic(t, px)
}

// TestRepeatedIDKey: a JSON body that writes the ID's key twice, where the
// proxy would key on one value and the app's decoder read the other, is
// refused 400 invalid-id.
func TestRepeatedIDKey(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, securityEnv(app, srv.URL(), "e2e-repeated:", nil))
	ctx, client := testContext(t), newClient(t)

	for _, tc := range []struct {
		input string
		p     provider
		body  string
	}{
		{`signed Stripe body {"id":"evt_A","id":"evt_B"}`, stripe, `{"id":"evt_1E2eRepA","object":"event","id":"evt_1E2eRepB","note":"` + bodyCanary + `"}`},
		{`signed Stripe body {"id":"evt_A","ID":"evt_B"}`, stripe, `{"id":"evt_1E2eRepC","ID":"evt_1E2eRepD","note":"` + bodyCanary + `"}`},
		{"JSON route, data.object.id twice", jsonPath, `{"data":{"object":{"id":"obj_repA","id":"obj_repB"}},"note":"` + bodyCanary + `"}`},
		{"JSON route, data twice", jsonPath, `{"data":{"object":{"id":"obj_repC"}},"data":{"object":{"id":"obj_repD"}},"note":"` + bodyCanary + `"}`},
	} {
		a := mustSend(t, ctx, client, px, tc.p, event{Body: []byte(tc.body)})
		hostileLine(t, tc.input, a.short())
		expect(t, tc.input, a, 400, "invalid-id")
	}
	if n := app.Total(); n != 0 {
		t.Errorf("the app received %d requests", n)
	}
	expectNoPanic(t, px)
}
