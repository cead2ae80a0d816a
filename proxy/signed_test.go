package proxy_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/webhook-dedup/webhook-dedup/providers"
	"github.com/webhook-dedup/webhook-dedup/proxy"
)

const (
	oldSecret = "whsec_old_unit_secret"
	newSecret = "whsec_new_unit_secret"
	ghSecret  = "gh-unit-secret"
)

func hmacHex(secret, msg string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

func stripeSig(secret string, at time.Time, body string) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	return "t=" + ts + ",v1=" + hmacHex(secret, ts+"."+body)
}

// signedFixture verifies Stripe with the old and the new secret (a
// rotation) and GitHub with one, at a fixed clock.
func signedFixture(t *testing.T, cfg proxy.Config) (*hostile, time.Time) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cfg.Now = func() time.Time { return now }
	opts := providers.Options{Secrets: map[string][]string{"stripe": {oldSecret, newSecret}, "github": {ghSecret}}}
	return newHostile(t, "/stripe=stripe,/gh=github", opts, cfg), now
}

// TestForgedSignatureDoesNotPoison: a forged delivery carrying a real
// event's ID is refused before the store is touched, so the genuine one
// is still forwarded.
func TestForgedSignatureDoesNotPoison(t *testing.T) {
	f, now := signedFixture(t, proxy.Config{})
	body := `{"id":"evt_target","type":"invoice.paid"}`
	ghBody := `{"ref":"refs/heads/main"}`
	for _, tc := range []struct {
		name, path string
		header     http.Header
		body       string
	}{
		{"Stripe signed with another secret", "/stripe", hdr("Stripe-Signature", stripeSig("whsec_attacker", now, body)), body},
		{"Stripe signature of another body", "/stripe", hdr("Stripe-Signature", stripeSig(newSecret, now, `{"id":"evt_other"}`)), body},
		{"Stripe without a signature", "/stripe", nil, body},
		{"Stripe with a malformed signature", "/stripe", hdr("Stripe-Signature", "garbage"), body},
		{"Stripe with a v0 signature only", "/stripe", hdr("Stripe-Signature", "t=1,v0="+hmacHex(newSecret, "1."+body)), body},
		{"GitHub signed with another secret", "/gh", hdr("X-GitHub-Delivery", "gh-target", "X-Hub-Signature-256", "sha256="+hmacHex("attacker", ghBody)), ghBody},
		{"GitHub with a SHA-1 signature only", "/gh", hdr("X-GitHub-Delivery", "gh-target", "X-Hub-Signature", "sha1=0000"), ghBody},
	} {
		expectReply(t, tc.name, f.post(t, tc.path, tc.header, tc.body), 401, "invalid-signature")
	}
	f.expectUntouched(t, "forged deliveries")
	if processed, readErrors := f.up.seen(); len(processed)+readErrors != 0 {
		t.Fatalf("forged deliveries reached the app: %q", processed)
	}
	warned := f.logs.FilterMessage("webhook").FilterField(zap.String("outcome", "invalid-signature")).All()
	if len(warned) != 7 {
		t.Errorf("%d invalid-signature log lines, want 7", len(warned))
	}
	for _, e := range warned {
		if e.Level != zapcore.WarnLevel || e.ContextMap()["reason"] == nil {
			t.Errorf("invalid-signature logged at %v with reason %v; want warn with a reason", e.Level, e.ContextMap()["reason"])
		}
	}
	for _, e := range f.logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		for _, secret := range []string{oldSecret, newSecret, ghSecret, "invoice.paid", "refs/heads/main"} {
			if strings.Contains(line, secret) {
				t.Errorf("a log line carries a secret or the body: %s", line)
			}
		}
	}

	expectReply(t, "genuine Stripe delivery", f.post(t, "/stripe", hdr("Stripe-Signature", stripeSig(newSecret, now, body)), body), 200, "forwarded")
	expectReply(t, "genuine GitHub delivery", f.post(t, "/gh", hdr("X-GitHub-Delivery", "gh-target", "X-Hub-Signature-256", "sha256="+hmacHex(ghSecret, ghBody)), ghBody), 200, "forwarded")
	expectReply(t, "its redelivery", f.post(t, "/stripe", hdr("Stripe-Signature", stripeSig(newSecret, now, body)), body), 200, "duplicate")
	f.expectSettled(t)
}

func TestStaleAndFutureTimestamps(t *testing.T) {
	f, now := signedFixture(t, proxy.Config{})
	for i, tc := range []struct {
		name    string
		at      time.Time
		status  int
		outcome string
	}{
		{"signed 6 minutes ago", now.Add(-6 * time.Minute), 401, "invalid-signature"},
		{"signed a day ago", now.Add(-24 * time.Hour), 401, "invalid-signature"},
		{"signed 6 minutes ahead", now.Add(6 * time.Minute), 401, "invalid-signature"},
		{"signed at the epoch", time.Unix(0, 0), 401, "invalid-signature"},
		{"signed 4 minutes ago", now.Add(-4 * time.Minute), 200, "forwarded"},
		{"signed 4 minutes ahead", now.Add(4 * time.Minute), 200, "forwarded"},
	} {
		body := fmt.Sprintf(`{"id":"evt_ts%d"}`, i)
		got := f.post(t, "/stripe", hdr("Stripe-Signature", stripeSig(newSecret, tc.at, body)), body)
		expectReply(t, tc.name, got, tc.status, tc.outcome)
	}
	if _, claims, _ := f.store.account(); claims != 2 {
		t.Errorf("%d claims taken, want only the 2 in tolerance", claims)
	}
	f.expectSettled(t)
}

func TestRotationAcceptsEverySecret(t *testing.T) {
	f, now := signedFixture(t, proxy.Config{})
	for _, tc := range []struct {
		name, id string
		sig      func(body string) string
		status   int
		outcome  string
	}{
		{"signed with the old secret", "evt_old", func(b string) string { return stripeSig(oldSecret, now, b) }, 200, "forwarded"},
		{"signed with the new secret", "evt_new", func(b string) string { return stripeSig(newSecret, now, b) }, 200, "forwarded"},
		{"signed with both (Stripe during a roll)", "evt_both", func(b string) string {
			ts := strconv.FormatInt(now.Unix(), 10)
			return "t=" + ts + ",v1=" + hmacHex(newSecret, ts+"."+b) + ",v1=" + hmacHex(oldSecret, ts+"."+b)
		}, 200, "forwarded"},
		{"signed with a retired secret", "evt_retired", func(b string) string { return stripeSig("whsec_retired", now, b) }, 401, "invalid-signature"},
	} {
		body := `{"id":"` + tc.id + `"}`
		expectReply(t, tc.name, f.post(t, "/stripe", hdr("Stripe-Signature", tc.sig(body)), body), tc.status, tc.outcome)
	}
	if processed, _ := f.up.seen(); len(processed) != 3 {
		t.Errorf("the app processed %d deliveries, want 3", len(processed))
	}
}

// TestFingerprintStopsReplayUnderFreshID: GitHub's delivery ID is not
// signed, so a captured genuine delivery replayed under a fresh ID passes
// the signature check; DEDUP_BODY_FINGERPRINT answers it as a duplicate.
func TestFingerprintStopsReplayUnderFreshID(t *testing.T) {
	for _, tc := range []struct {
		name        string
		fingerprint bool
		outcome     string
	}{
		{"without DEDUP_BODY_FINGERPRINT the replay is forwarded", false, "forwarded"},
		{"with DEDUP_BODY_FINGERPRINT the replay is a duplicate", true, "duplicate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := signedFixture(t, proxy.Config{BodyFingerprint: tc.fingerprint})
			body := `{"action":"opened","number":42}`
			sig := "sha256=" + hmacHex(ghSecret, body)
			expectReply(t, "genuine", f.post(t, "/gh", hdr("X-GitHub-Delivery", "fresh-0", "X-Hub-Signature-256", sig), body), 200, "forwarded")
			expectReply(t, "replay under a fresh ID", f.post(t, "/gh", hdr("X-GitHub-Delivery", "fresh-1", "X-Hub-Signature-256", sig), body), 200, tc.outcome)
			other := `{"action":"opened","number":43}`
			expectReply(t, "another body", f.post(t, "/gh", hdr("X-GitHub-Delivery", "fresh-2", "X-Hub-Signature-256", "sha256="+hmacHex(ghSecret, other)), other), 200, "forwarded")
			f.expectSettled(t)
		})
	}
}
