package signature

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"testing"
	"time"
)

// Official test vectors from the providers' documentation and SDKs,
// copied verbatim.
// Third-party vectors are marked as such.

func TestGitHubOfficialVector(t *testing.T) {
	// github/docs validating-webhook-deliveries.md, "Testing the webhook payload validation".
	v := mustNew(t, GitHub, Options{Secrets: []string{"It's a Secret to Everybody"}})
	h := header("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
	wantErr(t, v.Verify(h, []byte("Hello, World!"), time.Now()), nil)
	wantErr(t, v.Verify(h, []byte("Hello, World!\n"), time.Now()), ErrMismatch)
}

func TestAtlassianPublishedVector(t *testing.T) {
	// Atlassian's published Jira Cloud vector, also quoted for Bitbucket Cloud.
	for name, ctor := range map[string]func(Options) (Verifier, error){"jira": Jira, "bitbucket": Bitbucket} {
		t.Run(name, func(t *testing.T) {
			v := mustNew(t, ctor, Options{Secrets: []string{"It's a Secret to Everybody"}})
			h := header("X-Hub-Signature", "sha256=a4771c39fbe90f317c7824e83ddef3caae9cb3d976c214ace1f2937e133263c9")
			wantErr(t, v.Verify(h, []byte("Hello World!"), time.Now()), nil)
			wantErr(t, v.Verify(h, []byte("Hello, World!"), time.Now()), ErrMismatch)
		})
	}
}

// standard-webhooks libraries/go/webhook_test.go, TestWebhookSign and friends.
const (
	swSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swID      = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swTS      = "1614265330"
	swPayload = `{"test": 2432232314}`
	swValid   = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	swInvalid = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
)

func TestStandardWebhooksOfficialVectors(t *testing.T) {
	at := time.Unix(1614265330, 0)
	tests := []struct {
		name   string
		secret string
		h      map[string]string
		now    time.Time
		want   error
	}{
		{"sign vector", swSecret, map[string]string{"webhook-signature": swValid}, at, nil},
		{"secret without whsec_ prefix", swSecret[len("whsec_"):], map[string]string{"webhook-signature": swValid}, at, nil},
		{"svix- headers", swSecret, map[string]string{"webhook-id": "", "webhook-timestamp": "", "svix-id": swID, "svix-timestamp": swTS, "svix-signature": swValid}, at, nil},
		{"invalid signature", swSecret, map[string]string{"webhook-signature": swInvalid}, at, ErrMismatch},
		{"multi-signature with a valid v1", swSecret, map[string]string{"webhook-signature": swInvalid + " v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= " + swValid + " " + swInvalid}, at, nil},
		{"valid MAC under another version", swSecret, map[string]string{"webhook-signature": "v2," + swValid[3:]}, at, ErrMismatch},
		// The reference test signs now-5min with now taken mid-second: older than 5 min.
		{"too old", swSecret, map[string]string{"webhook-signature": swValid}, at.Add(5*time.Minute + 500*time.Millisecond), ErrStale},
		{"too new", swSecret, map[string]string{"webhook-signature": swValid}, at.Add(-5*time.Minute - time.Second), ErrStale},
		{"missing id", swSecret, map[string]string{"webhook-id": "", "webhook-signature": swValid}, at, ErrMissing},
		{"missing timestamp", swSecret, map[string]string{"webhook-timestamp": "", "webhook-signature": swValid}, at, ErrMissing},
		{"missing signature", swSecret, map[string]string{}, at, ErrMissing},
		{"non-integer timestamp", swSecret, map[string]string{"webhook-timestamp": "1614265330.5", "webhook-signature": swValid}, at, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := mustNew(t, StandardWebhooks, Options{Secrets: []string{tt.secret}})
			h := header("webhook-id", swID, "webhook-timestamp", swTS)
			for k, val := range tt.h {
				h.Del(k)
				if val != "" {
					h.Set(k, val)
				}
			}
			wantErr(t, v.Verify(h, []byte(swPayload), tt.now), tt.want)
		})
	}
}

func TestSlackOfficialVector(t *testing.T) {
	// python-slack-sdk tests/slack_sdk/signature/test_signature_verifier.py (Slack's docs example).
	body := "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	h := header("X-Slack-Request-Timestamp", "1531420618",
		"X-Slack-Signature", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503")
	v := mustNew(t, Slack, Options{Secrets: []string{"8f742231b10e8888abcd99yyyzzz85a5"}})
	wantErr(t, v.Verify(h, []byte(body), time.Unix(1531420618, 0)), nil)
	wantErr(t, v.Verify(h, []byte(body), time.Now()), ErrStale)
	wantErr(t, v.Verify(h, []byte(body+"&x=1"), time.Unix(1531420618, 0)), ErrMismatch)
}

func TestTwilioOfficialVectors(t *testing.T) {
	// twilio-python tests/unit/test_request_validator.py.
	const (
		uri      = "https://mycompany.com/myapp.php?foo=1&bar=2"
		jsonBody = `{"property": "value", "boolean": true}`
		bodyHash = "0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620"
		form     = "application/x-www-form-urlencoded"
	)
	params := url.Values{
		"CallSid": {"CA1234567890ABCDE"}, "Digits": {"1234"}, "From": {"+14158675309"},
		"To": {"+18005551212"}, "Caller": {"+14158675309"},
	}.Encode()
	if sum := sha256.Sum256([]byte(jsonBody)); hex.EncodeToString(sum[:]) != bodyHash {
		t.Fatalf("bodySHA256 of the vector's body = %x, want %s", sum, bodyHash)
	}
	tests := []struct {
		name, url, contentType, body, sig string
		want                              error
	}{
		{"form", uri, form, params, "RSOYDt4T1cUTdK1PDd93/VVr8B8=", nil},
		{"form, charset parameter", uri, form + "; charset=utf-8", params, "RSOYDt4T1cUTdK1PDd93/VVr8B8=", nil},
		{"duplicate keys", uri, form, "Sid=CA123&SidAccount=AC123&Digits=5678&Digits=1234", "IK+Dwps556ElfBT0I3Rgjkr1wJU=", nil},
		{"json body with bodySHA256", uri, "application/json", jsonBody, "a9nBmqA0ju/hNViExpshrM61xv4=", nil},
		{"json body changed", uri, "application/json", jsonBody + " ", "a9nBmqA0ju/hNViExpshrM61xv4=", ErrMismatch},
		{"https URL with port 1234 removes the port", "https://mycompany.com:1234/myapp.php?foo=1&bar=2", form, params, "RSOYDt4T1cUTdK1PDd93/VVr8B8=", nil},
		{"http URL with port 1234", "http://mycompany.com:1234/myapp.php?foo=1&bar=2", form, params, "Zmvh+3yNM1Phv2jhDCwEM3q5ebU=", nil},
		{"https URL adds port 443", uri, form, params, "kvajT1Ptam85bY51eRf/AJRuM3w=", nil},
		{"http URL adds port 80", "http://mycompany.com/myapp.php?foo=1&bar=2", form, params, "0ZXoZLH/DfblKGATFgpif+LLRf4=", nil},
		{"form param changed", uri, form, params + "&Extra=1", "RSOYDt4T1cUTdK1PDd93/VVr8B8=", ErrMismatch},
		{"other URL", "https://mycompany.com/other.php?foo=1&bar=2", form, params, "RSOYDt4T1cUTdK1PDd93/VVr8B8=", ErrMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := mustNew(t, Twilio, Options{Secrets: []string{"12345"}, URL: tt.url})
			h := header("Content-Type", tt.contentType, "X-Twilio-Signature", tt.sig)
			wantErr(t, v.Verify(h, []byte(tt.body), time.Now()), tt.want)
		})
	}
}

func TestSquareOfficialVectors(t *testing.T) {
	// Square SDKs' WebhooksHelper tests.
	tests := []struct{ key, url, body, sig string }{
		{"Ibxx_5AKakO-3qeNVR61Dw", "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9",
			`{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f","created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}`,
			"GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4="},
		{"signature-key", "https://webhook.site/webhooks", `{"data":{"type":"webhooks","id":"fake_id"}}`, "W3FlCNk5IA3ZQ2LHTWoajvzfaDu/OwY2tNHIHC3IUOA="},
		{"signature-key", "https://webhook.site/webhooks", `{"data":{"type":"webhooks","id":">id<"}}`, "Cxt7+aTi4rKgcA0bC4g9EHdVtLSDWdqccmL5MvihU4U="},
	}
	for _, tt := range tests {
		v := mustNew(t, Square, Options{Secrets: []string{tt.key}, URL: tt.url})
		h := header("x-square-hmacsha256-signature", tt.sig)
		wantErr(t, v.Verify(h, []byte(tt.body), time.Now()), nil)
		wantErr(t, v.Verify(h, []byte(tt.body+" "), time.Now()), ErrMismatch)
		other := mustNew(t, Square, Options{Secrets: []string{tt.key}, URL: tt.url + "/"})
		wantErr(t, other.Verify(h, []byte(tt.body), time.Now()), ErrMismatch)
	}
	// An earlier square-go-sdk test held the first MAC in hex: the same bytes.
	raw, _ := base64.StdEncoding.DecodeString(tests[0].sig)
	if got := hex.EncodeToString(raw); got != "185e1892b2601810d9f4d2186cd5c19cccea6f61e82f8456fd2eaf919f7fd8de" {
		t.Fatalf("hex form = %s", got)
	}
}

func TestZendeskThirdPartyVector(t *testing.T) {
	// THIRD-PARTY vector (not published by Zendesk): the static test secret
	// Zendesk documents, used verbatim as the key.
	v := mustNew(t, Zendesk, Options{Secrets: []string{"dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3Rpbmdfb25seQ=="}})
	h := header("X-Zendesk-Webhook-Signature-Timestamp", "2021-03-25T05:09:27Z",
		"X-Zendesk-Webhook-Signature", "S/RDdU2ERmj7LHDDoWJ2onPYH+t7/f2+LTM4dL7UiLM=")
	body := []byte(`{"event":"ticket.updated","id":123}`)
	at := time.Date(2021, 3, 25, 5, 9, 27, 0, time.UTC)
	wantErr(t, v.Verify(h, body, at), nil)
	wantErr(t, v.Verify(h, body, time.Now()), ErrStale)
}

func TestShopifyLinearThirdPartyVector(t *testing.T) {
	// THIRD-PARTY vector (one webhook-verification library's tests; the hex
	// and base64 forms are the same MAC).
	body := []byte(`{"id":1}`)
	shopify := mustNew(t, Shopify, Options{Secrets: []string{"shop-secret"}})
	wantErr(t, shopify.Verify(header("X-Shopify-Hmac-Sha256", "plW8VGqq0nDMIEhDqaNNW99asdUCy7EIqLZVcQwtAZ0="), body, time.Now()), nil)

	// The vector's body has no webhookTimestamp: the MAC matches, then the
	// missing timestamp is reported (ErrMissing, not ErrMismatch).
	linear := mustNew(t, Linear, Options{Secrets: []string{"shop-secret"}})
	h := header("Linear-Signature", "a655bc546aaad270cc204843a9a34d5bdf5ab1d502cbb108a8b655710c2d019d")
	wantErr(t, linear.Verify(h, body, time.Now()), ErrMissing)
	wantErr(t, linear.Verify(h, []byte(`{"id":2}`), time.Now()), ErrMismatch)
}
