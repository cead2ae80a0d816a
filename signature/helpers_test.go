package signature

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"hash"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"
)

// The signers below rebuild each scheme from its documentation,
// independently of the verifiers' code; the official vectors in
// vectors_test.go check both.

func macOf(newHash func() hash.Hash, key []byte, parts ...string) []byte {
	m := hmac.New(newHash, key)
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

func hexOf(newHash func() hash.Hash, key string, parts ...string) string {
	return hex.EncodeToString(macOf(newHash, []byte(key), parts...))
}

func b64Of(newHash func() hash.Hash, key string, parts ...string) string {
	return base64.StdEncoding.EncodeToString(macOf(newHash, []byte(key), parts...))
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

func stripeHeader(secret string, ts time.Time, body []byte) string {
	return "t=" + strconv.FormatInt(ts.Unix(), 10) + ",v1=" + hexOf(sha256.New, secret, strconv.FormatInt(ts.Unix(), 10), ".", string(body))
}

// standardKey decodes a whsec_ secret for the test signer.
func standardKey(t testing.TB, secret string) string {
	t.Helper()
	s := secret
	if len(s) > 6 && s[:6] == "whsec_" {
		s = s[6:]
	}
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("test secret does not decode: %v", err)
	}
	return string(key)
}

func standardSignature(key, id string, ts int64, body []byte) string {
	return "v1," + b64Of(sha256.New, key, id, ".", strconv.FormatInt(ts, 10), ".", string(body))
}

// twilioSign follows twilio-python's RequestValidator.compute_signature:
// the URL, then each parameter name sorted, each of its values sorted,
// written as name+value.
func twilioSign(token, rawURL string, params url.Values) string {
	s := rawURL
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		vs := slices.Clone(params[n])
		slices.Sort(vs)
		for _, v := range vs {
			s += n + v
		}
	}
	return b64Of(sha1.New, token, s)
}

func mustNew(t testing.TB, ctor func(Options) (Verifier, error), o Options) Verifier {
	t.Helper()
	v, err := ctor(o)
	if err != nil {
		t.Fatalf("constructor: %v", err)
	}
	return v
}

// wantErr fails unless err matches want (nil for success).
func wantErr(t testing.TB, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Fatalf("Verify = %v, want success", err)
	case want != nil && !errors.Is(err, want):
		t.Fatalf("Verify = %v, want %v", err, want)
	}
}
