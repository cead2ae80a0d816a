package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// stripe verifies Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>…]. It
// parses the header as stripe-go does: every comma-separated part is one
// key=value pair (anything else is malformed), unknown keys such as v0 are
// ignored, and so is a v1 that is not hex of the right length.
type stripe struct {
	keys      keyring
	tolerance time.Duration
}

// Stripe verifies Stripe-Signature. The key is the whole "whsec_…" string
// as bytes (Stripe does not decode it). During a secret roll Stripe sends
// one v1 per secret; any v1 matching any configured secret passes.
func Stripe(o Options) (Verifier, error) {
	secrets, tolerance, err := settings("stripe", o)
	if err != nil {
		return nil, err
	}
	return &stripe{keys: newKeyring(sha256.New, rawKeys(secrets)), tolerance: tolerance}, nil
}

func (v *stripe) Headers() []string { return []string{"Stripe-Signature"} }

func (v *stripe) Verify(h http.Header, body []byte, now time.Time) error {
	header := h.Get("Stripe-Signature")
	if header == "" {
		return fail(ErrMissing, "no Stripe-Signature header")
	}
	t, hasT, hasV1 := int64(0), false, false
	for pair := range strings.SplitSeq(header, ",") {
		key, value, ok := strings.Cut(pair, "=")
		if !ok || strings.Contains(value, "=") {
			return fail(ErrMalformed, "Stripe-Signature part is not key=value")
		}
		switch key {
		case "t":
			var err error
			if t, err = strconv.ParseInt(value, 10, 64); err != nil {
				return fail(ErrMalformed, "Stripe-Signature t is not an integer")
			}
			hasT = true
		case "v1":
			hasV1 = true
		}
	}
	if !hasT {
		return fail(ErrMalformed, "Stripe-Signature has no t")
	}
	if !hasV1 {
		return fail(ErrMismatch, "Stripe-Signature has no v1 signature")
	}
	if err := checkAge(time.Unix(t, 0), now, v.tolerance); err != nil {
		return err
	}
	var pb [24]byte
	prefix := append(strconv.AppendInt(pb[:0], t, 10), '.')
	var out [maxMACSize]byte
	for _, k := range v.keys {
		mac := k.sum(&out, prefix, body)
		for pair := range strings.SplitSeq(header, ",") {
			encoded, ok := strings.CutPrefix(pair, "v1=")
			if !ok {
				continue
			}
			var buf [maxMACSize]byte
			if sig, ok := hexMAC.decode(&buf, encoded, sha256.Size); ok && hmac.Equal(mac, sig) {
				return nil
			}
		}
	}
	return fail(ErrMismatch, "no Stripe-Signature v1 matches a secret")
}
