package signature

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// resigned are the schemes of schemes() that sign a timestamp carried in a
// header: the ones whose verifiers renew it (Resigner).
var resigned = map[string]bool{
	"stripe": true, "standardwebhooks": true, "gitlab-signed": true, "slack": true,
	"paddle": true, "twitch": true, "zoom": true, "zendesk": true,
}

// resignOf returns v's Resigner, failing the test when it has none.
func resignOf(t testing.TB, v Verifier) Resigner {
	t.Helper()
	r, ok := v.(Resigner)
	if !ok {
		t.Fatalf("%T does not implement Resigner", v)
	}
	return r
}

func TestResign(t *testing.T) {
	body := []byte(`{"id":"evt_1","type":"test"}`)
	for _, s := range schemes() {
		opts := func(secrets ...string) Options { return Options{Secrets: secrets, URL: s.url} }
		t.Run(s.name, func(t *testing.T) {
			one := mustNew(t, s.new, opts(s.secrets[0]))
			if !resigned[s.name] {
				// No timestamp to renew: no Resigner, or (GitLab's legacy
				// token) one that leaves the request as it is.
				r, ok := one.(Resigner)
				if !ok {
					return
				}
				h, b := s.sign(t, s.secrets[0], testNow.Add(-time.Hour), body)
				before := h.Clone()
				if err := r.Resign(h, b, testNow); err != nil || !reflect.DeepEqual(h, before) {
					t.Fatalf("Resign = %v, headers %v; want nil and unchanged %v", err, h, before)
				}
				return
			}
			r := resignOf(t, one)
			t.Run("a request signed 10 minutes ago is signed as the sender would sign it now", func(t *testing.T) {
				h, b := s.sign(t, s.secrets[0], testNow.Add(-10*time.Minute), body)
				h.Set("X-Other", "kept")
				before, sent := h.Clone(), bytes.Clone(b)
				at := testNow.Add(123456789 * time.Nanosecond) // Twitch writes the nanoseconds
				if err := r.Resign(h, b, at); err != nil {
					t.Fatalf("Resign: %v", err)
				}
				wantErr(t, one.Verify(h, b, at), nil)
				if !bytes.Equal(b, sent) {
					t.Fatalf("body changed: %q, sent %q", b, sent)
				}
				now, _ := s.sign(t, s.secrets[0], at, b)
				for name := range mergedKeys(h, before) {
					got := h.Get(name)
					if got == before.Get(name) {
						continue
					}
					if name != s.sigHeader && name != s.tsHeader {
						t.Errorf("%s changed: %q, was %q", name, got, before.Get(name))
						continue
					}
					want := now.Get(name)
					if s.name == "gitlab-signed" && name == s.sigHeader {
						// Both readings of the token sign; the sender's
						// (the decoded key's) comes first.
						if strings.HasPrefix(got, want+" v1,") {
							continue
						}
					}
					if got != want {
						t.Errorf("%s = %q, want the sender's %q", name, got, want)
					}
				}
			})
			t.Run("three days old", func(t *testing.T) {
				h, b := s.sign(t, s.secrets[0], testNow.Add(-72*time.Hour), body)
				if err := r.Resign(h, b, testNow); err != nil {
					t.Fatalf("Resign: %v", err)
				}
				wantErr(t, one.Verify(h, b, testNow), nil)
			})
			t.Run("signed with the first secret", func(t *testing.T) {
				rotated := resignOf(t, mustNew(t, s.new, opts(s.secrets[1], s.secrets[0])))
				h, b := s.sign(t, s.secrets[0], testNow.Add(-time.Hour), body)
				if err := rotated.Resign(h, b, testNow); err != nil {
					t.Fatalf("Resign: %v", err)
				}
				wantErr(t, mustNew(t, s.new, opts(s.secrets[1])).Verify(h, b, testNow), nil)
				wantErr(t, one.Verify(h, b, testNow), ErrMismatch)
			})
			refusals := []struct {
				name   string
				damage func(h http.Header, b []byte) []byte
				want   error
			}{
				{"signed with another secret", nil, ErrMismatch},
				{"body changed", func(_ http.Header, b []byte) []byte { return append(b[:len(b):len(b)], ' ') }, ErrMismatch},
				{"no signature", func(h http.Header, b []byte) []byte { h.Del(s.sigHeader); return b }, ErrMissing},
			}
			if s.malform != nil {
				refusals = append(refusals, struct {
					name   string
					damage func(h http.Header, b []byte) []byte
					want   error
				}{"malformed", func(h http.Header, b []byte) []byte { s.malform(h); return b }, ErrMalformed})
			}
			for _, tt := range refusals {
				t.Run("not re-signed: "+tt.name, func(t *testing.T) {
					if s.name == "gitlab-signed" && tt.want == ErrMissing {
						t.Skip("without webhook-signature it is the legacy token form, left as it is (tested above)")
					}
					secret := s.secrets[0]
					if tt.damage == nil {
						secret = s.secrets[1]
					}
					h, b := s.sign(t, secret, testNow.Add(-time.Hour), body)
					if tt.damage != nil {
						b = tt.damage(h, b)
					}
					before := h.Clone()
					if err := r.Resign(h, b, testNow); !errors.Is(err, tt.want) {
						t.Fatalf("Resign = %v, want %v", err, tt.want)
					}
					if !reflect.DeepEqual(h, before) {
						t.Fatalf("headers changed on a refusal: %v, were %v", h, before)
					}
				})
			}
		})
	}
}

func mergedKeys(hs ...http.Header) map[string]bool {
	keys := map[string]bool{}
	for _, h := range hs {
		for k := range h {
			keys[k] = true
		}
	}
	return keys
}

// TestResignOfficialVectors: a vector's request, renewed an hour later and
// then renewed again at its own timestamp, is the vector again, byte for
// byte: Resign writes what the provider writes.
func TestResignOfficialVectors(t *testing.T) {
	tests := []struct {
		name   string
		new    func(Options) (Verifier, error)
		secret string
		h      http.Header
		body   string
		at     time.Time
	}{
		{
			// standard-webhooks libraries/go/webhook_test.go, TestWebhookSign.
			"standardwebhooks", StandardWebhooks, swSecret,
			header("webhook-id", swID, "webhook-timestamp", swTS, "webhook-signature", swValid),
			swPayload, time.Unix(1614265330, 0),
		},
		{
			// python-slack-sdk's test of Slack's docs example.
			"slack", Slack, "8f742231b10e8888abcd99yyyzzz85a5",
			header("X-Slack-Request-Timestamp", "1531420618",
				"X-Slack-Signature", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"),
			"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c",
			time.Unix(1531420618, 0),
		},
		{
			// THIRD-PARTY vector (not Zendesk's own), as in vectors_test.go.
			"zendesk", Zendesk, "dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3Rpbmdfb25seQ==",
			header("X-Zendesk-Webhook-Signature-Timestamp", "2021-03-25T05:09:27Z",
				"X-Zendesk-Webhook-Signature", "S/RDdU2ERmj7LHDDoWJ2onPYH+t7/f2+LTM4dL7UiLM="),
			`{"event":"ticket.updated","id":123}`, time.Date(2021, 3, 25, 5, 9, 27, 0, time.UTC),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := mustNew(t, tt.new, Options{Secrets: []string{tt.secret}})
			r := resignOf(t, v)
			h, body := tt.h.Clone(), []byte(tt.body)
			later := tt.at.Add(time.Hour)
			if err := r.Resign(h, body, later); err != nil {
				t.Fatalf("Resign an hour later: %v", err)
			}
			if reflect.DeepEqual(h, tt.h) {
				t.Fatal("Resign an hour later changed nothing")
			}
			wantErr(t, v.Verify(h, body, later), nil)
			if err := r.Resign(h, body, tt.at); err != nil {
				t.Fatalf("Resign at the vector's time: %v", err)
			}
			if !reflect.DeepEqual(h, tt.h) {
				t.Fatalf("renewed at the vector's time: %v, want the vector %v", h, tt.h)
			}
		})
	}
}

func TestResignStripeKeepsOneSignature(t *testing.T) {
	body := []byte(`{"id":"evt_1"}`)
	old := testNow.Add(-time.Hour)
	rolled := stripeHeader("whsec_rolled", old, body)
	h := header("Stripe-Signature", stripeHeader(stripeSecret, old, body)+","+rolled[strings.Index(rolled, "v1="):]+",v0="+strings.Repeat("ab", 32))
	r := resignOf(t, mustNew(t, Stripe, Options{Secrets: []string{stripeSecret, "whsec_rolled"}}))
	if err := r.Resign(h, body, testNow); err != nil {
		t.Fatal(err)
	}
	if got, want := h.Values("Stripe-Signature"), []string{stripeHeader(stripeSecret, testNow, body)}; !slices.Equal(got, want) {
		t.Fatalf("Stripe-Signature = %q, want %q", got, want)
	}
}

func TestResignStandardWebhooksHeaderSets(t *testing.T) {
	body := []byte(swPayload)
	key := standardKey(t, swSecret)
	old := testNow.Add(-time.Hour)
	signed := func(prefix, key string, at time.Time) http.Header {
		return header(prefix+"id", swID, prefix+"timestamp", formatUnix(at), prefix+"signature", standardSignature(key, swID, at.Unix(), body))
	}
	both := func(svixKey string) http.Header {
		h := signed("webhook-", key, old)
		for k, v := range signed("svix-", svixKey, old) {
			h[k] = v
		}
		return h
	}
	r := resignOf(t, mustNew(t, StandardWebhooks, Options{Secrets: []string{swSecret}}))

	t.Run("both sets verify: both renewed", func(t *testing.T) {
		h := both(key)
		h.Set("Webhook-Signature", h.Get("Webhook-Signature")+" v1a,"+strings.Repeat("A", 86)+"==")
		if err := r.Resign(h, body, testNow); err != nil {
			t.Fatal(err)
		}
		want := both(key)
		for k, v := range signed("webhook-", key, testNow) {
			want[k] = v
		}
		for k, v := range signed("svix-", key, testNow) {
			want[k] = v
		}
		if !reflect.DeepEqual(h, want) {
			t.Fatalf("headers %v, want %v (the v1a entry dropped)", h, want)
		}
	})
	t.Run("a forged svix- set is left as it came", func(t *testing.T) {
		h := both("another key")
		if err := r.Resign(h, body, testNow); err != nil {
			t.Fatal(err)
		}
		want := both("another key")
		for k, v := range signed("webhook-", key, testNow) {
			want[k] = v
		}
		if !reflect.DeepEqual(h, want) {
			t.Fatalf("headers %v, want %v", h, want)
		}
	})
	t.Run("svix- alone", func(t *testing.T) {
		h := signed("svix-", key, old)
		if err := r.Resign(h, body, testNow); err != nil {
			t.Fatal(err)
		}
		if want := signed("svix-", key, testNow); !reflect.DeepEqual(h, want) {
			t.Fatalf("headers %v, want %v", h, want)
		}
	})
}

func TestResignGitLabSignsWithBothReadings(t *testing.T) {
	const signing = "whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3Q="
	body := []byte(`{"object_kind":"push"}`)
	old := testNow.Add(-time.Hour)
	h := header("webhook-id", "idem-1", "webhook-timestamp", formatUnix(old),
		"webhook-signature", standardSignature(signing, "idem-1", old.Unix(), body)) // the whole string as the key
	r := resignOf(t, mustNew(t, GitLab, Options{Secrets: []string{"legacy-token", signing, "whsec_c2Vjb25k"}}))
	if err := r.Resign(h, body, testNow); err != nil {
		t.Fatal(err)
	}
	want := standardSignature(standardKey(t, signing), "idem-1", testNow.Unix(), body) + " " +
		standardSignature(signing, "idem-1", testNow.Unix(), body)
	if got := h.Get("Webhook-Signature"); got != want {
		t.Fatalf("webhook-signature = %q, want %q", got, want)
	}
	if got := h.Get("Webhook-Timestamp"); got != formatUnix(testNow) {
		t.Fatalf("webhook-timestamp = %q", got)
	}

	tokenOnly := resignOf(t, mustNew(t, GitLab, Options{Secrets: []string{"legacy-token"}}))
	h = header("webhook-id", "idem-1", "webhook-timestamp", formatUnix(old),
		"webhook-signature", "v1,"+b64Of(sha256.New, "k", "x"), "X-Gitlab-Token", "legacy-token")
	wantErr(t, tokenOnly.Resign(h, body, testNow), ErrMismatch)
}
