package signature

import (
	"crypto/sha256"
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestStandardWebhooksPrefersCompleteHeaderSet(t *testing.T) {
	v := mustNew(t, StandardWebhooks, Options{Secrets: []string{swSecret}})
	at := time.Unix(1614265330, 0)
	// An incomplete webhook- set falls back to a complete svix- set.
	h := header("webhook-id", swID, "svix-id", swID, "svix-timestamp", swTS, "svix-signature", swValid)
	wantErr(t, v.Verify(h, []byte(swPayload), at), nil)
	// A complete webhook- set wins over svix-.
	h = header("webhook-id", swID, "webhook-timestamp", swTS, "webhook-signature", swInvalid,
		"svix-id", swID, "svix-timestamp", swTS, "svix-signature", swValid)
	wantErr(t, v.Verify(h, []byte(swPayload), at), ErrMismatch)
}

func TestStandardWebhooksSignsParsedTimestamp(t *testing.T) {
	// The reference library signs "%d" of the parsed timestamp, so a
	// zero-padded header still verifies against the canonical signed string.
	v := mustNew(t, StandardWebhooks, Options{Secrets: []string{swSecret}})
	h := header("webhook-id", swID, "webhook-timestamp", "0"+swTS, "webhook-signature", swValid)
	wantErr(t, v.Verify(h, []byte(swPayload), time.Unix(1614265330, 0)), nil)
}

func TestGitLab(t *testing.T) {
	const signing = "whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3Q="
	const token = "legacy-secret-token"
	now := time.Unix(1732960800, 0)
	body := []byte(`{"object_kind":"push"}`)
	signedWith := func(key string) http.Header {
		return header("webhook-id", "idem-1", "webhook-timestamp", strconv.FormatInt(now.Unix(), 10),
			"webhook-signature", "v1,"+b64Of(sha256.New, key, "idem-1.", strconv.FormatInt(now.Unix(), 10), ".", string(body)))
	}
	decoded := standardKey(t, signing)

	both := mustNew(t, GitLab, Options{Secrets: []string{token, signing}})
	tokenOnly := mustNew(t, GitLab, Options{Secrets: []string{token}})
	tests := []struct {
		name string
		v    Verifier
		h    http.Header
		want error
	}{
		{"signed, decoded whsec_ key", both, signedWith(decoded), nil},
		{"signed, whole whsec_ string as key", both, signedWith(signing), nil},
		{"signed with another key", both, signedWith("another key"), ErrMismatch},
		{"signature decides when a signing token is configured", both,
			func() http.Header { h := signedWith("another key"); h.Set("X-Gitlab-Token", token); return h }(), ErrMismatch},
		{"token", both, header("X-Gitlab-Token", token), nil},
		{"wrong token", both, header("X-Gitlab-Token", token+"x"), ErrMismatch},
		{"a signing token is not a legacy token", both, header("X-Gitlab-Token", signing), ErrMismatch},
		{"nothing", both, header(), ErrMissing},
		{"signed but no signing token configured: the token decides", tokenOnly,
			func() http.Header { h := signedWith(decoded); h.Set("X-Gitlab-Token", token); return h }(), nil},
		{"signed, no signing token configured, no token", tokenOnly, signedWith(decoded), ErrMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, tt.v.Verify(tt.h, body, now), tt.want)
		})
	}
}
