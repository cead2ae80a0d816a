package proxy_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/providers"
	"github.com/webhook-dedup/webhook-dedup/proxy"
)

// variantPaths are spellings of /gh that app frameworks route to the
// handler of /gh.
var variantPaths = []string{"/GH", "/Gh", "/gh;jsessionid=1", "/gh.json", "//gh", "/./gh", "/x/../gh", "/gh/", "/%67h", "/x%2F..%2Fgh"}

// doMethod sends body to path with method, as written, and reads the answer.
func (f *hostile) doMethod(t *testing.T, method, path string, header http.Header, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header.Get(proxy.HeaderOutcome), string(b)}
}

// TestVariantPathsAreVerifiedAndDeduplicated: a forged delivery on a
// spelling of the route's path that frameworks route to the same handler
// is refused, and a genuine one's redelivery there is a duplicate; the
// app receives the request as sent.
func TestVariantPathsAreVerifiedAndDeduplicated(t *testing.T) {
	f, _ := signedFixture(t, proxy.Config{})
	body := `{"ref":"refs/heads/main"}`
	forged := hdr("X-GitHub-Delivery", "gh-variant", "X-Hub-Signature-256", "sha256="+hmacHex("attacker", body))
	genuine := hdr("X-GitHub-Delivery", "gh-variant", "X-Hub-Signature-256", "sha256="+hmacHex(ghSecret, body))
	for _, p := range variantPaths {
		expectReply(t, "forged POST "+p, f.doMethod(t, http.MethodPost, p, forged, body), 401, "invalid-signature")
	}
	expectReply(t, "forged post /gh", f.doMethod(t, "post", "/gh", forged, body), 401, "invalid-signature")
	f.expectUntouched(t, "forged deliveries")

	expectReply(t, "genuine delivery on /gh.json", f.doMethod(t, http.MethodPost, "/gh.json", genuine, body), 200, "forwarded")
	for _, p := range variantPaths {
		expectReply(t, "redelivery on "+p, f.doMethod(t, http.MethodPost, p, genuine, body), 200, "duplicate")
	}
	expectReply(t, "redelivery with post", f.doMethod(t, "post", "/gh", genuine, body), 200, "duplicate")
	if processed, _ := f.up.seen(); len(processed) != 1 {
		t.Errorf("the app processed %d requests, want 1", len(processed))
	}
	f.expectSettled(t)
}

// TestConnectionNamingCheckedHeader: a Connection header naming the ID's
// or the signature's header is refused before the store is touched.
func TestConnectionNamingCheckedHeader(t *testing.T) {
	f, _ := signedFixture(t, proxy.Config{})
	body := `{"ref":"refs/heads/main"}`
	for _, name := range []string{"X-GitHub-Delivery", "x-hub-signature-256", "keep-alive, X-GitHub-Delivery"} {
		h := hdr("X-GitHub-Delivery", "gh-conn", "X-Hub-Signature-256", "sha256="+hmacHex(ghSecret, body), "Connection", name)
		expectReply(t, "Connection: "+name, f.post(t, "/gh", h, body), 400, "invalid-id")
	}
	f.expectUntouched(t, "requests whose Connection names a checked header")
	h := hdr("X-GitHub-Delivery", "gh-conn", "X-Hub-Signature-256", "sha256="+hmacHex(ghSecret, body), "Connection", "keep-alive, X-GitHub-Event")
	expectReply(t, "Connection naming another header", f.post(t, "/gh", h, body), 200, "forwarded")
}

// TestPassThroughIsCounted: requests that pass through untouched are
// counted by reason.
func TestPassThroughIsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newHostile(t, "/gh=github,/auto=auto", providers.Options{}, proxy.Config{Metrics: proxy.NewMetrics(reg)})
	_ = f.doMethod(t, http.MethodGet, "/gh", nil, "")
	_ = f.doMethod(t, http.MethodPut, "/GH", nil, "x")
	_ = f.doMethod(t, http.MethodPost, "/elsewhere", nil, "x")
	_ = f.doMethod(t, http.MethodPost, "/auto", hdr("X-Unknown", "1"), "x")
	for reason, want := range map[string]float64{"not-post": 2, "no-route": 1, "not-recognised": 1} {
		if got := counterValue(t, reg, "webhook_dedup_passthrough_total", "reason", reason); got != want {
			t.Errorf("webhook_dedup_passthrough_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
}
