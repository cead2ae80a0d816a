package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// paddle verifies Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>…]. Parts
// without a value are ignored, as in Paddle's SDK. Third parties report
// several h1 during a secret rotation (the SDK keeps only the last), so
// every h1 is tried.
type paddle struct {
	keys      keyring
	tolerance time.Duration
}

// Paddle verifies Paddle Billing's Paddle-Signature: hex HMAC-SHA256 over
// "{ts}:{body}", keyed with the destination's secret. Paddle's SDK allows
// only 5 s of skew; the configured tolerance applies here (5 minutes when
// zero), since NTP drift on the proxy must not drop events.
func Paddle(o Options) (Verifier, error) {
	secrets, tolerance, err := settings("paddle", o)
	if err != nil {
		return nil, err
	}
	return &paddle{keys: newKeyring(sha256.New, rawKeys(secrets)), tolerance: tolerance}, nil
}

func (v *paddle) Headers() []string { return []string{"Paddle-Signature"} }

func (v *paddle) Verify(h http.Header, body []byte, now time.Time) error {
	header := h.Get("Paddle-Signature")
	if header == "" {
		return fail(ErrMissing, "no Paddle-Signature header")
	}
	ts, hasTS, hasH1 := int64(0), false, false
	for part := range strings.SplitSeq(header, ";") {
		key, value, _ := strings.Cut(part, "=")
		if value == "" {
			continue
		}
		switch key {
		case "ts":
			var err error
			if ts, err = strconv.ParseInt(value, 10, 64); err != nil {
				return fail(ErrMalformed, "Paddle-Signature ts is not an integer")
			}
			hasTS = true
		case "h1":
			hasH1 = true
		}
	}
	if !hasTS {
		return fail(ErrMalformed, "Paddle-Signature has no ts")
	}
	if !hasH1 {
		return fail(ErrMismatch, "Paddle-Signature has no h1 signature")
	}
	if err := checkAge(time.Unix(ts, 0), now, v.tolerance); err != nil {
		return err
	}
	var pb [24]byte
	prefix := append(strconv.AppendInt(pb[:0], ts, 10), ':')
	var out [maxMACSize]byte
	for _, k := range v.keys {
		mac := k.sum(&out, prefix, body)
		for part := range strings.SplitSeq(header, ";") {
			encoded, ok := strings.CutPrefix(part, "h1=")
			if !ok {
				continue
			}
			var buf [maxMACSize]byte
			if sig, ok := hexMAC.decode(&buf, encoded, sha256.Size); ok && hmac.Equal(mac, sig) {
				return nil
			}
		}
	}
	return fail(ErrMismatch, "no Paddle-Signature h1 matches a secret")
}
