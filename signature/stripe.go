package signature

import (
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
	header, t, err := parseStripe(h)
	if err != nil {
		return err
	}
	if err := checkAge(time.Unix(t, 0), now, v.tolerance); err != nil {
		return err
	}
	return v.match(header, t, body)
}

// Resign sets Stripe-Signature to "t=<now>,v1=<hex>" alone: the other v1
// (a secret roll's) and v0 entries would no longer match the new t.
func (v *stripe) Resign(h http.Header, body []byte, now time.Time) error {
	header, t, err := parseStripe(h)
	if err != nil {
		return err
	}
	if err := v.match(header, t, body); err != nil {
		return err
	}
	var pb [24]byte
	var out [maxMACSize]byte
	ts := now.Unix()
	mac := v.keys[0].sum(&out, stripePrefix(&pb, ts), body)
	h.Set("Stripe-Signature", "t="+strconv.FormatInt(ts, 10)+",v1="+hexMAC.encode(mac))
	return nil
}

// parseStripe returns Stripe-Signature and its t, once the header is
// known to carry a t and at least one v1.
func parseStripe(h http.Header) (header string, t int64, err error) {
	header = h.Get("Stripe-Signature")
	if header == "" {
		return "", 0, fail(ErrMissing, "no Stripe-Signature header")
	}
	hasT, hasV1 := false, false
	for pair := range strings.SplitSeq(header, ",") {
		key, value, ok := strings.Cut(pair, "=")
		if !ok || strings.Contains(value, "=") {
			return "", 0, fail(ErrMalformed, "Stripe-Signature part is not key=value")
		}
		switch key {
		case "t":
			if t, err = strconv.ParseInt(value, 10, 64); err != nil {
				return "", 0, fail(ErrMalformed, "Stripe-Signature t is not an integer")
			}
			hasT = true
		case "v1":
			hasV1 = true
		}
	}
	if !hasT {
		return "", 0, fail(ErrMalformed, "Stripe-Signature has no t")
	}
	if !hasV1 {
		return "", 0, fail(ErrMismatch, "Stripe-Signature has no v1 signature")
	}
	return header, t, nil
}

// stripePrefix is what Stripe signs before the body: "<t>.".
func stripePrefix(buf *[24]byte, t int64) []byte {
	return append(strconv.AppendInt(buf[:0], t, 10), '.')
}

// match reports ErrMismatch unless some v1 of header is the MAC of
// "<t>.<body>" under some configured secret.
func (v *stripe) match(header string, t int64, body []byte) error {
	var pb [24]byte
	if !v.keys.matchEntry(stripePrefix(&pb, t), body, header, ",", "v1=") {
		return fail(ErrMismatch, "no Stripe-Signature v1 matches a secret")
	}
	return nil
}
