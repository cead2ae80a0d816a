package signature

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPaddleSeveralH1(t *testing.T) {
	body := []byte(`{"event_id":"evt_01h"}`)
	ts := strconv.FormatInt(testNow.Unix(), 10)
	good := hexOf(sha256.New, "pdl-secret", ts, ":", string(body))
	other := hexOf(sha256.New, "pdl-other", ts, ":", string(body))
	v := mustNew(t, Paddle, Options{Secrets: []string{"pdl-secret"}})
	for _, tt := range []struct {
		name, header string
		want         error
	}{
		{"h1 after another", "ts=" + ts + ";h1=" + other + ";h1=" + good, nil},
		{"h1 before another", "ts=" + ts + ";h1=" + good + ";h1=" + other, nil},
		{"parts without value are ignored", "ts=" + ts + ";;x;h1=" + good, nil},
		{"no h1", "ts=" + ts, ErrMismatch},
		{"only other h1", "ts=" + ts + ";h1=" + other, ErrMismatch},
		{"no ts", "h1=" + good, ErrMalformed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, v.Verify(header("Paddle-Signature", tt.header), body, testNow), tt.want)
		})
	}
}

func TestLinearBodyTimestamp(t *testing.T) {
	v := mustNew(t, Linear, Options{Secrets: []string{"lin"}})
	ms := strconv.FormatInt(testNow.UnixMilli(), 10)
	for _, tt := range []struct {
		name, body string
		want       error
	}{
		{"now", `{"webhookTimestamp":` + ms + `}`, nil},
		{"milliseconds count", `{"webhookTimestamp":` + strconv.FormatInt(testNow.Add(-5*time.Minute-time.Millisecond).UnixMilli(), 10) + `}`, ErrStale},
		{"seconds are not milliseconds", `{"webhookTimestamp":` + strconv.FormatInt(testNow.Unix(), 10) + `}`, ErrStale},
		{"string", `{"webhookTimestamp":"` + ms + `"}`, ErrMalformed},
		{"fraction", `{"webhookTimestamp":` + ms + `.5}`, ErrMalformed},
		{"nested only", `{"data":{"webhookTimestamp":` + ms + `}}`, ErrMissing},
		{"not JSON", `webhookTimestamp=` + ms, ErrMissing},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := header("Linear-Signature", hexOf(sha256.New, "lin", tt.body))
			wantErr(t, v.Verify(h, []byte(tt.body), testNow), tt.want)
		})
	}
}

func TestTwitchNanosecondTimestamp(t *testing.T) {
	v := mustNew(t, Twitch, Options{Secrets: []string{"tw"}})
	stamp := "2026-11-30T12:00:00.123456789Z"
	body := `{"subscription":{}}`
	h := header("Twitch-Eventsub-Message-Id", "m1", "Twitch-Eventsub-Message-Timestamp", stamp,
		"Twitch-Eventsub-Message-Signature", "sha256="+hexOf(sha256.New, "tw", "m1", stamp, body))
	wantErr(t, v.Verify(h, []byte(body), testNow), nil)
	h.Del("Twitch-Eventsub-Message-Id")
	wantErr(t, v.Verify(h, []byte(body), testNow), ErrMissing)
}

func TestTwilioURLs(t *testing.T) {
	const token = "tok"
	params := "Digits=1&From=%2B1"
	form := "application/x-www-form-urlencoded"
	tests := []struct {
		name, configured, signed string
	}{
		{"fragment (connection overrides) is not signed", "https://example.com/sms?x=1#rc=2&ct=5", "https://example.com/sms?x=1"},
		{"user info is kept", "https://u:p@example.com:8443/sms", "https://u:p@example.com/sms"},
		{"no path", "https://example.com", "https://example.com:443"},
		{"IPv6 literal with port", "http://[::1]:8080/sms", "http://[::1]/sms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := mustNew(t, Twilio, Options{Secrets: []string{token}, URL: tt.configured})
			sig := twilioSign(token, tt.signed, map[string][]string{"Digits": {"1"}, "From": {"+1"}})
			wantErr(t, v.Verify(header("Content-Type", form, "X-Twilio-Signature", sig), []byte(params), testNow), nil)
		})
	}
	t.Run("empty body signs the URL alone", func(t *testing.T) {
		v := mustNew(t, Twilio, Options{Secrets: []string{token}, URL: "https://example.com/status"})
		sig := b64Of(sha1.New, token, "https://example.com/status")
		wantErr(t, v.Verify(header("X-Twilio-Signature", sig), nil, testNow), nil)
	})
	t.Run("json body on a URL without a query", func(t *testing.T) {
		v := mustNew(t, Twilio, Options{Secrets: []string{token}, URL: "https://example.com/events"})
		body := []byte(`{"a":1}`)
		sum := sha256.Sum256(body)
		sig := twilioSign(token, "https://example.com/events?bodySHA256="+hex.EncodeToString(sum[:]), nil)
		wantErr(t, v.Verify(header("Content-Type", "application/json", "X-Twilio-Signature", sig), body, testNow), nil)
	})
	t.Run("unparsable form", func(t *testing.T) {
		v := mustNew(t, Twilio, Options{Secrets: []string{token}, URL: "https://example.com/sms"})
		wantErr(t, v.Verify(header("Content-Type", form, "X-Twilio-Signature", "RSOYDt4T1cUTdK1PDd93/VVr8B8="), []byte("a=%zz"), testNow), ErrMalformed)
	})
}

func TestDecodeAcceptsOnlyCanonicalBase64(t *testing.T) {
	// Regression (found by FuzzBase64Body): 44 characters without padding
	// decode to 33 bytes, and once made Decode write past a 32-byte buffer.
	for _, size := range []int{sha1.Size, sha256.Size} {
		var out [maxMACSize]byte
		if _, ok := base64MAC.decode(&out, strings.Repeat("0", base64.StdEncoding.EncodedLen(size)), size); ok {
			t.Errorf("size %d: unpadded value accepted", size)
		}
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for _, size := range []int{sha1.Size, sha256.Size} {
		canonical := base64.StdEncoding.EncodeToString(make([]byte, size))
		pad := strings.Count(canonical, "=")
		last := len(canonical) - pad - 1
		for _, c := range alphabet {
			s := canonical[:last] + string(c) + canonical[last+1:]
			var out [maxMACSize]byte
			_, ok := base64MAC.decode(&out, s, size)
			raw, _ := base64.StdEncoding.DecodeString(s)
			if want := base64.StdEncoding.EncodeToString(raw) == s; ok != want {
				t.Errorf("size %d, %q: ok = %v, want %v", size, s, ok, want)
			}
		}
	}
}

// TestConcurrentVerify shares each verifier between goroutines, as the
// proxy does, so that -race checks the pooled HMAC states.
func TestConcurrentVerify(t *testing.T) {
	body := []byte(`{"id":"evt_concurrent"}`)
	for _, s := range schemes() {
		v := mustNew(t, s.new, Options{Secrets: s.secrets[:1], URL: s.url})
		good, goodBody := s.sign(t, s.secrets[0], testNow, body)
		// Signed with the other test secret, which v lacks.
		bad, badBody := s.sign(t, s.secrets[1], testNow, body)
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				for range 50 {
					if err := v.Verify(good, goodBody, testNow); err != nil {
						errs <- err
						return
					}
					if err := v.Verify(bad, badBody, testNow); err == nil {
						errs <- errors.New("forged request accepted")
						return
					}
				}
				errs <- nil
			}()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
		}
	}
}
