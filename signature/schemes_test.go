package signature

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scheme describes one verifier for the table-driven tests, fuzz seeds and
// benchmarks: how to build it and how a sender signs a request.
type scheme struct {
	name    string
	new     func(Options) (Verifier, error)
	secrets [2]string // two valid secrets, for rotation
	url     string    // Options.URL, for schemes that sign it
	// sign returns the headers and the body a sender sends for body at ts.
	sign func(t testing.TB, secret string, ts time.Time, body []byte) (http.Header, []byte)
	// sigHeader is the header deleted to test a missing signature.
	sigHeader string
	// malform damages a signed request's headers into ErrMalformed; nil if
	// nothing in the scheme can be malformed.
	malform func(http.Header)
	// tsHeader is the signed timestamp's header; empty if the scheme signs
	// no timestamp (or, for Linear, keeps it in the body).
	tsHeader string
	timed    bool
	// bodyUnsigned is true for GitLab's legacy token, which proves only
	// that the sender knows the token.
	bodyUnsigned bool
}

const testTwilioURL = "https://hooks.example.com/twilio?route=sms"

func schemes() []scheme {
	wh := func(key string) string { return "whsec_" + base64.StdEncoding.EncodeToString([]byte(key)) }
	setMalformed := func(name, value string) func(http.Header) {
		return func(h http.Header) { h.Set(name, value) }
	}
	sec := func(ts time.Time) string { return strconv.FormatInt(ts.Unix(), 10) }
	standard := func(t testing.TB, secret string, ts time.Time, body []byte) (http.Header, []byte) {
		id := "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
		return header("webhook-id", id, "webhook-timestamp", sec(ts),
			"webhook-signature", standardSignature(standardKey(t, secret), id, ts.Unix(), body)), body
	}
	return []scheme{
		{
			name: "stripe", new: Stripe, secrets: [2]string{"whsec_test_secret", "whsec_test_secret_rolled_key"},
			sign: func(_ testing.TB, s string, ts time.Time, body []byte) (http.Header, []byte) {
				return header("Stripe-Signature", stripeHeader(s, ts, body)), body
			},
			sigHeader: "Stripe-Signature", malform: setMalformed("Stripe-Signature", "v1,t=1"), timed: true,
		},
		{
			name: "github", new: GitHub, secrets: [2]string{"gh-secret-1", "gh-secret-2"},
			sign: func(_ testing.TB, s string, _ time.Time, body []byte) (http.Header, []byte) {
				return header("X-Hub-Signature-256", "sha256="+hexOf(sha256.New, s, string(body))), body
			},
			sigHeader: "X-Hub-Signature-256", malform: setMalformed("X-Hub-Signature-256", "sha1=abcd"),
		},
		{
			name: "shopify", new: Shopify, secrets: [2]string{"shpss_1", "shpss_2"},
			sign: func(_ testing.TB, s string, _ time.Time, body []byte) (http.Header, []byte) {
				return header("X-Shopify-Hmac-Sha256", b64Of(sha256.New, s, string(body))), body
			},
			sigHeader: "X-Shopify-Hmac-Sha256", malform: setMalformed("X-Shopify-Hmac-Sha256", "not base64!"),
		},
		{
			name: "standardwebhooks", new: StandardWebhooks, secrets: [2]string{wh("first key"), wh("second key")},
			sign: standard, sigHeader: "Webhook-Signature", tsHeader: "Webhook-Timestamp", timed: true,
			malform: setMalformed("Webhook-Timestamp", "yesterday"),
		},
		{
			name: "slack", new: Slack, secrets: [2]string{"slack-1", "slack-2"},
			sign: func(_ testing.TB, s string, ts time.Time, body []byte) (http.Header, []byte) {
				return header("X-Slack-Request-Timestamp", sec(ts),
					"X-Slack-Signature", "v0="+hexOf(sha256.New, s, "v0:", sec(ts), ":", string(body))), body
			},
			sigHeader: "X-Slack-Signature", tsHeader: "X-Slack-Request-Timestamp", timed: true,
			malform: setMalformed("X-Slack-Signature", "v1=00"),
		},
		{
			name: "paddle", new: Paddle, secrets: [2]string{"pdl_ntfset_1", "pdl_ntfset_2"},
			sign: func(_ testing.TB, s string, ts time.Time, body []byte) (http.Header, []byte) {
				return header("Paddle-Signature", "ts="+sec(ts)+";h1="+hexOf(sha256.New, s, sec(ts), ":", string(body))), body
			},
			sigHeader: "Paddle-Signature", timed: true, malform: setMalformed("Paddle-Signature", "ts=now;h1=00"),
		},
		{
			name: "linear", new: Linear, secrets: [2]string{"lin_wh_1", "lin_wh_2"},
			sign: func(_ testing.TB, s string, ts time.Time, body []byte) (http.Header, []byte) {
				signed := []byte(`{"action":"create","webhookTimestamp":` + strconv.FormatInt(ts.UnixMilli(), 10) + `,"data":` + strconv.Quote(string(body)) + `}`)
				return header("Linear-Signature", hexOf(sha256.New, s, string(signed))), signed
			},
			sigHeader: "Linear-Signature", timed: true, malform: setMalformed("Linear-Signature", "zz"),
		},
		{
			name: "twitch", new: Twitch, secrets: [2]string{"twitch-secret-1", "twitch-secret-2"},
			sign: func(_ testing.TB, s string, ts time.Time, body []byte) (http.Header, []byte) {
				id, stamp := "e76c6bd4-55c9-4987-8304-da1588d8988b", ts.UTC().Format(time.RFC3339Nano)
				return header("Twitch-Eventsub-Message-Id", id, "Twitch-Eventsub-Message-Timestamp", stamp,
					"Twitch-Eventsub-Message-Signature", "sha256="+hexOf(sha256.New, s, id, stamp, string(body))), body
			},
			sigHeader: "Twitch-Eventsub-Message-Signature", tsHeader: "Twitch-Eventsub-Message-Timestamp", timed: true,
			malform: setMalformed("Twitch-Eventsub-Message-Timestamp", "1531420618"),
		},
		{
			name: "zoom", new: Zoom, secrets: [2]string{"zoom-token-1", "zoom-token-2"},
			sign: func(_ testing.TB, s string, ts time.Time, body []byte) (http.Header, []byte) {
				return header("x-zm-request-timestamp", sec(ts),
					"x-zm-signature", "v0="+hexOf(sha256.New, s, "v0:", sec(ts), ":", string(body))), body
			},
			sigHeader: "X-Zm-Signature", tsHeader: "X-Zm-Request-Timestamp", timed: true,
			malform: setMalformed("X-Zm-Request-Timestamp", "-"),
		},
		{
			name: "gitlab-signed", new: GitLab, secrets: [2]string{wh("gitlab signing token 1"), wh("gitlab signing token 2")},
			sign: standard, sigHeader: "Webhook-Signature", tsHeader: "Webhook-Timestamp", timed: true,
			malform: setMalformed("Webhook-Timestamp", "0x10"),
		},
		{
			name: "gitlab-token", new: GitLab, secrets: [2]string{"gitlab-token-1", "gitlab-token-2"},
			sign: func(_ testing.TB, s string, _ time.Time, body []byte) (http.Header, []byte) {
				return header("X-Gitlab-Token", s), body
			},
			sigHeader: "X-Gitlab-Token", bodyUnsigned: true,
		},
		{
			name: "bitbucket", new: Bitbucket, secrets: [2]string{"bb-1", "bb-2"},
			sign: func(_ testing.TB, s string, _ time.Time, body []byte) (http.Header, []byte) {
				return header("X-Hub-Signature", "sha256="+hexOf(sha256.New, s, string(body))), body
			},
			sigHeader: "X-Hub-Signature", malform: setMalformed("X-Hub-Signature", "sha256="),
		},
		{
			name: "jira", new: Jira, secrets: [2]string{"jira-1", "jira-2"},
			sign: func(_ testing.TB, s string, _ time.Time, body []byte) (http.Header, []byte) {
				return header("X-Hub-Signature", "sha256="+hexOf(sha256.New, s, string(body))), body
			},
			sigHeader: "X-Hub-Signature", malform: setMalformed("X-Hub-Signature", "sha512=00"),
		},
		{
			name: "intercom", new: Intercom, secrets: [2]string{"ic-1", "ic-2"},
			sign: func(_ testing.TB, s string, _ time.Time, body []byte) (http.Header, []byte) {
				return header("X-Hub-Signature", "sha1="+hexOf(sha1.New, s, string(body))), body
			},
			sigHeader: "X-Hub-Signature", malform: setMalformed("X-Hub-Signature", "sha256="+strings.Repeat("0", 64)),
		},
		{
			name: "zendesk", new: Zendesk, secrets: [2]string{"dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3Rpbmdfb25seQ==", "c2Vjb25kIHNlY3JldA=="},
			sign: func(_ testing.TB, s string, ts time.Time, body []byte) (http.Header, []byte) {
				stamp := ts.UTC().Format(time.RFC3339)
				return header("X-Zendesk-Webhook-Signature-Timestamp", stamp,
					"X-Zendesk-Webhook-Signature", b64Of(sha256.New, s, stamp, string(body))), body
			},
			sigHeader: "X-Zendesk-Webhook-Signature", tsHeader: "X-Zendesk-Webhook-Signature-Timestamp", timed: true,
			malform: setMalformed("X-Zendesk-Webhook-Signature-Timestamp", "25/03/2021"),
		},
		{
			name: "square", new: Square, secrets: [2]string{"sq-key-1", "sq-key-2"}, url: "https://hooks.example.com/square",
			sign: func(_ testing.TB, s string, _ time.Time, body []byte) (http.Header, []byte) {
				return header("x-square-hmacsha256-signature", b64Of(sha256.New, s, "https://hooks.example.com/square", string(body))), body
			},
			sigHeader: "X-Square-Hmacsha256-Signature", malform: setMalformed("X-Square-Hmacsha256-Signature", "AAAA"),
		},
		{
			name: "twilio-form", new: Twilio, secrets: [2]string{"auth-token-1", "auth-token-2"}, url: testTwilioURL,
			sign: func(_ testing.TB, s string, _ time.Time, body []byte) (http.Header, []byte) {
				params := url.Values{"MessageSid": {"SM123"}, "From": {"+14158675309"}, "Body": {string(body)}}
				return header("Content-Type", "application/x-www-form-urlencoded",
					"X-Twilio-Signature", twilioSign(s, testTwilioURL, params)), []byte(params.Encode())
			},
			sigHeader: "X-Twilio-Signature", malform: setMalformed("X-Twilio-Signature", "RSOYDt4T1cUTdK1PDd93/VVr8B8"),
		},
		{
			name: "twilio-json", new: Twilio, secrets: [2]string{"auth-token-1", "auth-token-2"}, url: testTwilioURL,
			sign: func(_ testing.TB, s string, _ time.Time, body []byte) (http.Header, []byte) {
				sum := sha256.Sum256(body)
				return header("Content-Type", "application/json",
					"X-Twilio-Signature", twilioSign(s, testTwilioURL+"&bodySHA256="+hex.EncodeToString(sum[:]), nil)), body
			},
			sigHeader: "X-Twilio-Signature", malform: setMalformed("X-Twilio-Signature", "=RSOYDt4T1cUTdK1PDd93/VVr8B8"),
		},
	}
}

var testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestSchemes(t *testing.T) {
	body := []byte(`{"id":"evt_1","type":"test"}`)
	for _, s := range schemes() {
		opts := func(secrets ...string) Options { return Options{Secrets: secrets, URL: s.url} }
		t.Run(s.name, func(t *testing.T) {
			one := mustNew(t, s.new, opts(s.secrets[0]))
			t.Run("valid", func(t *testing.T) {
				h, b := s.sign(t, s.secrets[0], testNow, body)
				wantErr(t, one.Verify(h, b, testNow), nil)
			})
			t.Run("other secret", func(t *testing.T) {
				h, b := s.sign(t, s.secrets[1], testNow, body)
				wantErr(t, one.Verify(h, b, testNow), ErrMismatch)
			})
			t.Run("rotation: any configured secret matches", func(t *testing.T) {
				both := mustNew(t, s.new, opts(s.secrets[1], s.secrets[0]))
				for _, secret := range s.secrets {
					h, b := s.sign(t, secret, testNow, body)
					wantErr(t, both.Verify(h, b, testNow), nil)
				}
			})
			t.Run("body changed", func(t *testing.T) {
				if s.bodyUnsigned {
					t.Skip("GitLab's legacy token does not sign the body")
				}
				h, b := s.sign(t, s.secrets[0], testNow, body)
				wantErr(t, one.Verify(h, append(b[:len(b):len(b)], ' '), testNow), ErrMismatch)
			})
			t.Run("missing signature", func(t *testing.T) {
				h, b := s.sign(t, s.secrets[0], testNow, body)
				h.Del(s.sigHeader)
				wantErr(t, one.Verify(h, b, testNow), ErrMissing)
			})
			t.Run("malformed", func(t *testing.T) {
				if s.malform == nil {
					t.Skip("nothing to malform")
				}
				h, b := s.sign(t, s.secrets[0], testNow, body)
				s.malform(h)
				wantErr(t, one.Verify(h, b, testNow), ErrMalformed)
			})
			t.Run("Headers lists every header Verify reads", func(t *testing.T) {
				h, b := s.sign(t, s.secrets[0], testNow, body)
				kept := http.Header{}
				for _, name := range one.Headers() {
					if name != http.CanonicalHeaderKey(name) {
						t.Errorf("Headers() holds %q, not in canonical form", name)
					}
					if vs, ok := h[name]; ok {
						kept[name] = vs
					}
				}
				wantErr(t, one.Verify(kept, b, testNow), nil)
			})
			t.Run("error names no secret", func(t *testing.T) {
				h, b := s.sign(t, s.secrets[1], testNow, body)
				err := one.Verify(h, b, testNow)
				for _, leak := range []string{s.secrets[0], s.secrets[1], string(body)} {
					if err == nil || strings.Contains(err.Error(), leak) {
						t.Fatalf("Verify = %v", err)
					}
				}
			})
			if !s.timed {
				return
			}
			t.Run("missing timestamp", func(t *testing.T) {
				if s.tsHeader == "" {
					t.Skip("no separate timestamp header (Stripe, Paddle: in the signature header, tested there; Linear: in the body)")
				}
				h, b := s.sign(t, s.secrets[0], testNow, body)
				h.Del(s.tsHeader)
				wantErr(t, one.Verify(h, b, testNow), ErrMissing)
			})
			tol := 5 * time.Minute
			for _, tt := range []struct {
				name string
				age  time.Duration
				want error
			}{
				{"just inside tolerance, old", tol, nil},
				{"just inside tolerance, future", -tol, nil},
				{"stale", tol + time.Second, ErrStale},
				{"future", -tol - time.Second, ErrStale},
				{"a day old", 24 * time.Hour, ErrStale},
			} {
				t.Run(tt.name, func(t *testing.T) {
					h, b := s.sign(t, s.secrets[0], testNow.Add(-tt.age), body)
					wantErr(t, one.Verify(h, b, testNow), tt.want)
				})
			}
			t.Run("configured tolerance", func(t *testing.T) {
				h, b := s.sign(t, s.secrets[0], testNow.Add(-15*time.Second), body)
				tight := mustNew(t, s.new, Options{Secrets: s.secrets[:1], Tolerance: 10 * time.Second, URL: s.url})
				loose := mustNew(t, s.new, Options{Secrets: s.secrets[:1], Tolerance: 20 * time.Second, URL: s.url})
				wantErr(t, tight.Verify(h, b, testNow), ErrStale)
				wantErr(t, loose.Verify(h, b, testNow), nil)
			})
		})
	}
}

func TestConstructorsRejectBadOptions(t *testing.T) {
	all := map[string]func(Options) (Verifier, error){
		"stripe": Stripe, "github": GitHub, "shopify": Shopify, "standardwebhooks": StandardWebhooks,
		"slack": Slack, "paddle": Paddle, "linear": Linear, "twitch": Twitch, "zoom": Zoom,
		"gitlab": GitLab, "bitbucket": Bitbucket, "jira": Jira, "intercom": Intercom,
		"zendesk": Zendesk, "square": Square, "twilio": Twilio,
	}
	const u = "https://example.com/hook"
	for name, ctor := range all {
		t.Run(name, func(t *testing.T) {
			for _, o := range []Options{
				{URL: u},
				{Secrets: []string{}, URL: u},
				{Secrets: []string{"whsec_c2VjcmV0", " "}, URL: u},
				{Secrets: []string{"whsec_c2VjcmV0"}, URL: u, Tolerance: -time.Second},
			} {
				if _, err := ctor(o); err == nil {
					t.Errorf("%s(%+v) accepted", name, o)
				}
			}
			if _, err := ctor(Options{Secrets: []string{"whsec_c2VjcmV0"}, URL: u}); err != nil {
				t.Errorf("%s: valid options refused: %v", name, err)
			}
		})
	}
	for _, tt := range []struct {
		name string
		ctor func(Options) (Verifier, error)
		o    Options
	}{
		{"standardwebhooks, secret not base64", StandardWebhooks, Options{Secrets: []string{"whsec_not*base64"}}},
		{"standardwebhooks, bare secret not base64", StandardWebhooks, Options{Secrets: []string{"plain-secret"}}},
		{"standardwebhooks, empty key", StandardWebhooks, Options{Secrets: []string{"whsec_"}}},
		{"gitlab, whsec_ token not base64", GitLab, Options{Secrets: []string{"plain", "whsec_%%%"}}},
		{"square, no URL", Square, Options{Secrets: []string{"k"}}},
		{"square, relative URL", Square, Options{Secrets: []string{"k"}, URL: "/hooks/square"}},
		{"twilio, no URL", Twilio, Options{Secrets: []string{"k"}}},
		{"twilio, relative URL", Twilio, Options{Secrets: []string{"k"}, URL: "/twilio"}},
		{"twilio, not http", Twilio, Options{Secrets: []string{"k"}, URL: "ftp://example.com/x"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.ctor(tt.o)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, s := range tt.o.Secrets {
				if len(s) > 6 && strings.Contains(err.Error(), s) {
					t.Fatalf("error quotes the secret: %v", err)
				}
			}
		})
	}
}

func TestDefaultToleranceIsFiveMinutes(t *testing.T) {
	v := mustNew(t, Slack, Options{Secrets: []string{"s"}})
	for age, want := range map[time.Duration]error{5 * time.Minute: nil, 5*time.Minute + time.Second: ErrStale} {
		ts := strconv.FormatInt(testNow.Add(-age).Unix(), 10)
		h := header("X-Slack-Request-Timestamp", ts, "X-Slack-Signature", "v0="+hexOf(sha256.New, "s", "v0:", ts, ":", "{}"))
		wantErr(t, v.Verify(h, []byte("{}"), testNow), want)
	}
}

func TestSecretsAreTrimmed(t *testing.T) {
	v := mustNew(t, GitHub, Options{Secrets: []string{" gh-secret \n"}})
	h := header("X-Hub-Signature-256", "sha256="+hexOf(sha256.New, "gh-secret", "x"))
	wantErr(t, v.Verify(h, []byte("x"), testNow), nil)
}
