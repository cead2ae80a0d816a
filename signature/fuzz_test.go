package signature

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// Each fuzz target checks two things: Verify never panics and fails only
// with one of the package's sentinels; and it never accepts a request that
// an independent oracle (the test signer) says was not signed with the
// configured secret. The targets whose oracle is the provider's SDK
// (Stripe, Standard Webhooks, GitLab) are in test/sdk, a module of their
// own.

var fuzzNow = time.Unix(1732960800, 0)

func checkSentinel(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range []error{ErrMissing, ErrMalformed, ErrMismatch, ErrStale} {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("error wraps no sentinel: %v", err)
}

func FuzzPaddle(f *testing.F) {
	body := []byte(`{"event_id":"evt_01"}`)
	ts := strconv.FormatInt(fuzzNow.Unix(), 10)
	good := hexOf(sha256.New, "pdl", ts, ":", string(body))
	for _, h := range []string{"ts=" + ts + ";h1=" + good, "ts=" + ts + ";h1=00;h1=" + good, "ts=x;h1=" + good, "h1=" + good, ";;=;", ""} {
		f.Add(h, body)
	}
	v := mustNew(f, Paddle, Options{Secrets: []string{"pdl"}})
	f.Fuzz(func(t *testing.T, h string, body []byte) {
		err := v.Verify(header("Paddle-Signature", h), body, fuzzNow)
		checkSentinel(t, err)
		if err == nil && !paddleOracle(h, body) {
			t.Fatalf("accepted %q", h)
		}
	})
}

// paddleOracle reports whether some ts= part and some h1= part of h form a
// valid signature of body under the key "pdl".
func paddleOracle(h string, body []byte) bool {
	parts := strings.Split(h, ";")
	for _, p := range parts {
		ts, ok := strings.CutPrefix(p, "ts=")
		sec, err := strconv.ParseInt(ts, 10, 64)
		if !ok || err != nil {
			continue
		}
		want := hexOf(sha256.New, "pdl", strconv.FormatInt(sec, 10), ":", string(body))
		for _, q := range parts {
			if sig, ok := strings.CutPrefix(q, "h1="); ok && strings.EqualFold(sig, want) {
				return true
			}
		}
	}
	return false
}

// FuzzHubSignature covers "<label>=<hex>" over the body: GitHub,
// Bitbucket, Jira (SHA-256) and Intercom (SHA-1).
func FuzzHubSignature(f *testing.F) {
	f.Add("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", []byte("Hello, World!"))
	f.Add("sha256=a4771c39fbe90f317c7824e83ddef3caae9cb3d976c214ace1f2937e133263c9", []byte("Hello World!"))
	f.Add("sha1="+hexOf(sha1.New, "It's a Secret to Everybody", "Hello World!"), []byte("Hello World!"))
	f.Add("sha256=", []byte(nil))
	f.Add("SHA256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17", []byte("Hello, World!"))
	const secret = "It's a Secret to Everybody"
	o := Options{Secrets: []string{secret}}
	verifiers := []struct {
		v       Verifier
		header  string
		label   string
		sha1MAC bool
	}{
		{mustNew(f, GitHub, o), "X-Hub-Signature-256", "sha256=", false},
		{mustNew(f, Bitbucket, o), "X-Hub-Signature", "sha256=", false},
		{mustNew(f, Jira, o), "X-Hub-Signature", "sha256=", false},
		{mustNew(f, Intercom, o), "X-Hub-Signature", "sha1=", true},
	}
	f.Fuzz(func(t *testing.T, h string, body []byte) {
		for _, tt := range verifiers {
			err := tt.v.Verify(header(tt.header, h), body, fuzzNow)
			checkSentinel(t, err)
			want := hexOf(sha256.New, secret, string(body))
			if tt.sha1MAC {
				want = hexOf(sha1.New, secret, string(body))
			}
			encoded, ok := strings.CutPrefix(h, tt.label)
			if signed := ok && strings.EqualFold(encoded, want); (err == nil) != signed {
				t.Fatalf("%s %q: Verify = %v, signed = %v", tt.header, h, err, signed)
			}
		}
	})
}

// FuzzBase64Body covers base64 MACs over an optional prefix and the body:
// Shopify and Square.
func FuzzBase64Body(f *testing.F) {
	f.Add("plW8VGqq0nDMIEhDqaNNW99asdUCy7EIqLZVcQwtAZ0=", []byte(`{"id":1}`))
	f.Add("W3FlCNk5IA3ZQ2LHTWoajvzfaDu/OwY2tNHIHC3IUOA=", []byte(`{"data":{"type":"webhooks","id":"fake_id"}}`))
	f.Add("plW8VGqq0nDMIEhDqaNNW99asdUCy7EIqLZVcQwtAZ1=", []byte(`{"id":1}`))
	f.Add("plW8VGqq0nDMIEhDqaNNW99asdUCy7EIqLZVcQwtAZ0", []byte(`{"id":1}`))
	const squareURL = "https://webhook.site/webhooks"
	shopify := mustNew(f, Shopify, Options{Secrets: []string{"shop-secret"}})
	square := mustNew(f, Square, Options{Secrets: []string{"signature-key"}, URL: squareURL})
	f.Fuzz(func(t *testing.T, h string, body []byte) {
		err := shopify.Verify(header("X-Shopify-Hmac-Sha256", h), body, fuzzNow)
		checkSentinel(t, err)
		if signed := h == b64Of(sha256.New, "shop-secret", string(body)); (err == nil) != signed {
			t.Fatalf("shopify %q: Verify = %v, signed = %v", h, err, signed)
		}
		err = square.Verify(header("X-Square-Hmacsha256-Signature", h), body, fuzzNow)
		checkSentinel(t, err)
		if signed := h == b64Of(sha256.New, "signature-key", squareURL, string(body)); (err == nil) != signed {
			t.Fatalf("square %q: Verify = %v, signed = %v", h, err, signed)
		}
	})
}

// FuzzTimestamped covers the schemes that sign a timestamp header: Slack
// and Zoom (Unix seconds), Twitch and Zendesk (RFC 3339).
func FuzzTimestamped(f *testing.F) {
	slackBody := "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J"
	f.Add("v0="+hexOf(sha256.New, "fuzz", "v0:1531420618:", slackBody), "1531420618", "", []byte(slackBody))
	stamp := "2026-11-30T12:00:00.123456789Z"
	f.Add("sha256="+hexOf(sha256.New, "fuzz", "m1", stamp, "{}"), stamp, "m1", []byte("{}"))
	f.Add(b64Of(sha256.New, "fuzz", "2021-03-25T05:09:27Z", "{}"), "2021-03-25T05:09:27Z", "", []byte("{}"))
	f.Add("S/RDdU2ERmj7LHDDoWJ2onPYH+t7/f2+LTM4dL7UiLN=", "2021-03-25T05:09:27Z", "", []byte("{}")) // non-canonical last character
	f.Add("v0=", "", "", []byte(nil))
	f.Add("v0=zz", "+1531420618", "x", []byte("{}"))
	o := Options{Secrets: []string{"fuzz"}}
	unix := func(s string) (time.Time, bool) {
		sec, err := strconv.ParseInt(s, 10, 64)
		return time.Unix(sec, 0), err == nil
	}
	rfc := func(s string) (time.Time, bool) {
		at, err := time.Parse(time.RFC3339Nano, s)
		return at, err == nil
	}
	schemes := []struct {
		name           string
		v              Verifier
		sigH, tsH, idH string
		parse          func(string) (time.Time, bool)
		expected       func(ts, id string, body []byte) string
		hexDigits      bool
	}{
		{"slack", mustNew(f, Slack, o), "X-Slack-Signature", "X-Slack-Request-Timestamp", "", unix,
			func(ts, _ string, b []byte) string {
				return "v0=" + hexOf(sha256.New, "fuzz", "v0:", ts, ":", string(b))
			}, true},
		{"zoom", mustNew(f, Zoom, o), "X-Zm-Signature", "X-Zm-Request-Timestamp", "", unix,
			func(ts, _ string, b []byte) string {
				return "v0=" + hexOf(sha256.New, "fuzz", "v0:", ts, ":", string(b))
			}, true},
		{"twitch", mustNew(f, Twitch, o), "Twitch-Eventsub-Message-Signature", "Twitch-Eventsub-Message-Timestamp", "Twitch-Eventsub-Message-Id", rfc,
			func(ts, id string, b []byte) string { return "sha256=" + hexOf(sha256.New, "fuzz", id, ts, string(b)) }, true},
		{"zendesk", mustNew(f, Zendesk, o), "X-Zendesk-Webhook-Signature", "X-Zendesk-Webhook-Signature-Timestamp", "", rfc,
			func(ts, _ string, b []byte) string { return b64Of(sha256.New, "fuzz", ts, string(b)) }, false},
	}
	f.Fuzz(func(t *testing.T, sig, ts, id string, body []byte) {
		for _, s := range schemes {
			h := header(s.sigH, sig, s.tsH, ts)
			if s.idH != "" {
				h.Set(s.idH, id)
			}
			now, parsed := s.parse(ts)
			if !parsed {
				now = fuzzNow
			}
			err := s.v.Verify(h, body, now)
			checkSentinel(t, err)
			want := s.expected(ts, id, body)
			matches := sig == want
			if s.hexDigits { // the label exactly, the hex digits in either case
				label := want[:len(want)-64]
				matches = strings.HasPrefix(sig, label) && strings.EqualFold(sig[len(label):], want[len(label):])
			}
			signed := parsed && sig != "" && (s.idH == "" || id != "") && matches
			if (err == nil) != signed {
				t.Fatalf("%s sig %q ts %q id %q: Verify = %v, signed = %v", s.name, sig, ts, id, err, signed)
			}
		}
	})
}

func FuzzLinear(f *testing.F) {
	body := `{"action":"create","webhookTimestamp":` + strconv.FormatInt(fuzzNow.UnixMilli(), 10) + `}`
	f.Add(hexOf(sha256.New, "lin", body), []byte(body))
	f.Add(hexOf(sha256.New, "lin", `{"id":1}`), []byte(`{"id":1}`))
	f.Add("", []byte(nil))
	v := mustNew(f, Linear, Options{Secrets: []string{"lin"}})
	f.Fuzz(func(t *testing.T, sig string, body []byte) {
		err := v.Verify(header("Linear-Signature", sig), body, fuzzNow)
		checkSentinel(t, err)
		if err == nil {
			if !strings.EqualFold(sig, hexOf(sha256.New, "lin", string(body))) {
				t.Fatalf("accepted signature %q", sig)
			}
			ms := gjson.GetBytes(body, "webhookTimestamp").Int()
			if d := fuzzNow.Sub(time.UnixMilli(ms)); d > 5*time.Minute || d < -5*time.Minute {
				t.Fatalf("accepted webhookTimestamp %d", ms)
			}
		}
	})
}

func FuzzTwilio(f *testing.F) {
	const token = "12345"
	const uri = "https://mycompany.com/myapp.php?foo=1&bar=2"
	const form = "application/x-www-form-urlencoded"
	params := url.Values{"CallSid": {"CA1234567890ABCDE"}, "Digits": {"1234"}, "From": {"+14158675309"},
		"To": {"+18005551212"}, "Caller": {"+14158675309"}}.Encode()
	f.Add("RSOYDt4T1cUTdK1PDd93/VVr8B8=", form, []byte(params))
	f.Add("kvajT1Ptam85bY51eRf/AJRuM3w=", form+"; charset=utf-8", []byte(params))
	f.Add("IK+Dwps556ElfBT0I3Rgjkr1wJU=", form, []byte("Sid=CA123&SidAccount=AC123&Digits=5678&Digits=1234"))
	f.Add("a9nBmqA0ju/hNViExpshrM61xv4=", "application/json", []byte(`{"property": "value", "boolean": true}`))
	f.Add("", "", []byte(nil))
	f.Add("RSOYDt4T1cUTdK1PDd93/VVr8B9=", form, []byte(params)) // non-canonical last character
	f.Add("RSOYDt4T1cUTdK1PDd93/VVr8B8=", form, []byte("a=%zz;b"))
	v := mustNew(f, Twilio, Options{Secrets: []string{token}, URL: uri})
	variants := []string{uri, "https://mycompany.com:443/myapp.php?foo=1&bar=2"}
	f.Fuzz(func(t *testing.T, sig, contentType string, body []byte) {
		err := v.Verify(header("Content-Type", contentType, "X-Twilio-Signature", sig), body, fuzzNow)
		checkSentinel(t, err)
		var expected []string
		mediaType, _, _ := strings.Cut(contentType, ";")
		if len(body) == 0 || strings.EqualFold(strings.TrimSpace(mediaType), form) {
			if p, perr := url.ParseQuery(string(body)); perr == nil {
				for _, u := range variants {
					expected = append(expected, twilioSign(token, u, p))
				}
			}
		} else {
			sum := sha256.Sum256(body)
			for _, u := range variants {
				expected = append(expected, twilioSign(token, u+"&bodySHA256="+hex.EncodeToString(sum[:]), nil))
			}
		}
		signed := sig != "" && (len(expected) > 0 && sig == expected[0] || len(expected) > 1 && sig == expected[1])
		if (err == nil) != signed {
			t.Fatalf("sig %q content type %q: Verify = %v, signed = %v", sig, contentType, err, signed)
		}
	})
}
