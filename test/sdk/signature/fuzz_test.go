package signature_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/webhook-dedup/webhook-dedup/signature"
)

// Differential fuzzing against the providers' SDKs: Verify never panics,
// fails only with one of the signature package's sentinels, and accepts
// exactly what the SDK accepts (ignoring the timestamp's age).

var fuzzNow = time.Unix(1732960800, 0)

// standard-webhooks libraries/go/webhook_test.go, TestWebhookSign.
const (
	swSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	swID      = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	swTS      = "1614265330"
	swPayload = `{"test": 2432232314}`
	swValid   = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	swInvalid = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
)

const stripeSecret = "whsec_test_secret"

var stripeBody = []byte(`{"id":"evt_test_webhook","object":"event","type":"payment_intent.succeeded"}`)

func checkSentinel(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range []error{signature.ErrMissing, signature.ErrMalformed, signature.ErrMismatch, signature.ErrStale} {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("error wraps no sentinel: %v", err)
}

// header builds an http.Header from name/value pairs, canonicalising names
// as a server does.
func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func mustNew(t testing.TB, ctor func(signature.Options) (signature.Verifier, error), o signature.Options) signature.Verifier {
	t.Helper()
	v, err := ctor(o)
	if err != nil {
		t.Fatalf("constructor: %v", err)
	}
	return v
}

func mac(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// stripeHeader is stripe-go's own signature header for body at ts.
func stripeHeader(secret string, ts time.Time, body []byte) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: ts}).Header
}

func FuzzStripe(f *testing.F) {
	body := stripeBody
	valid := stripeHeader(stripeSecret, fuzzNow, body)
	for _, h := range []string{
		valid, valid + ",v1=bad_signature", valid + ",v0=" + strings.Repeat("a", 64), "v1,t=1", "t=", "",
		"t=1732960800", "t=1732960800,v1=" + strings.Repeat("0", 64), valid + ",", "t=1,t=" + valid[2:],
	} {
		f.Add(h, body)
	}
	v := mustNew(f, signature.Stripe, signature.Options{Secrets: []string{stripeSecret}})
	f.Fuzz(func(t *testing.T, h string, body []byte) {
		err := v.Verify(header("Stripe-Signature", h), body, fuzzNow)
		checkSentinel(t, err)
		if err == nil {
			if sdk := webhook.ValidatePayloadIgnoringTolerance(body, h, stripeSecret); sdk != nil {
				t.Fatalf("accepted %q that stripe-go refuses: %v", h, sdk)
			}
		}
	})
}

func FuzzStandardWebhooks(f *testing.F) {
	f.Add(swID, swTS, swValid, []byte(swPayload))
	f.Add(swID, swTS, swInvalid+" "+swValid, []byte(swPayload))
	f.Add(swID, swTS, "v1a,"+swValid[3:]+" v2,x", []byte(swPayload))
	f.Add(swID, "0"+swTS, swValid+",extra", []byte(swPayload))
	f.Add("", "", "", []byte(nil))
	f.Add(swID, "-1", "v1,", []byte(swPayload))
	f.Add(swID, swTS, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OF=", []byte(swPayload)) // non-canonical last character
	ref, err := standardwebhooks.NewWebhook(swSecret)
	if err != nil {
		f.Fatal(err)
	}
	v := mustNew(f, signature.StandardWebhooks, signature.Options{Secrets: []string{swSecret}})
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := header("webhook-id", id, "webhook-timestamp", ts, "webhook-signature", sig)
		now := fuzzNow
		if sec, err := strconv.ParseInt(ts, 10, 64); err == nil {
			now = time.Unix(sec, 0) // inside the tolerance: the MAC alone decides
		}
		err := v.Verify(h, body, now)
		checkSentinel(t, err)
		refErr := ref.VerifyIgnoringTimestamp(body, h)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("id %q ts %q sig %q: we say %v, the reference library says %v", id, ts, sig, err, refErr)
		}
	})
}

func FuzzGitLab(f *testing.F) {
	const signing = "whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3Q="
	const token = "legacy-token"
	ts := strconv.FormatInt(fuzzNow.Unix(), 10)
	body := []byte(`{"object_kind":"push"}`)
	f.Add(token, "", "", "", body)
	f.Add("", "v1,"+base64.StdEncoding.EncodeToString(mac([]byte("testtesttesttesttesttesttesttest"), "id."+ts+"."+string(body))), "id", ts, body)
	f.Add(token, "v1,AAAA", "id", ts, body)
	f.Add(signing, "", "", "", body)
	v := mustNew(f, signature.GitLab, signature.Options{Secrets: []string{token, signing}})
	decoded, err := standardwebhooks.NewWebhook(signing)
	if err != nil {
		f.Fatal(err)
	}
	whole, _ := standardwebhooks.NewWebhookRaw([]byte(signing))
	f.Fuzz(func(t *testing.T, tok, sig, id, ts string, body []byte) {
		h := header("X-Gitlab-Token", tok, "webhook-signature", sig, "webhook-id", id, "webhook-timestamp", ts)
		now := fuzzNow
		if sec, err := strconv.ParseInt(ts, 10, 64); err == nil {
			now = time.Unix(sec, 0)
		}
		err := v.Verify(h, body, now)
		checkSentinel(t, err)
		var ok bool
		if sig == "" {
			ok = tok == token
		} else {
			ok = decoded.VerifyIgnoringTimestamp(body, h) == nil || whole.VerifyIgnoringTimestamp(body, h) == nil
		}
		if (err == nil) != ok {
			t.Fatalf("token %q sig %q: Verify = %v, expected accepted = %v", tok, sig, err, ok)
		}
	})
}
