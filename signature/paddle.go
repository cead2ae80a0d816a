package signature

import (
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
	header, ts, err := parsePaddle(h)
	if err != nil {
		return err
	}
	if err := checkAge(time.Unix(ts, 0), now, v.tolerance); err != nil {
		return err
	}
	return v.match(header, ts, body)
}

// Resign sets Paddle-Signature to "ts=<now>;h1=<hex>" alone.
func (v *paddle) Resign(h http.Header, body []byte, now time.Time) error {
	header, ts, err := parsePaddle(h)
	if err != nil {
		return err
	}
	if err := v.match(header, ts, body); err != nil {
		return err
	}
	var pb [24]byte
	var out [maxMACSize]byte
	ts = now.Unix()
	mac := v.keys[0].sum(&out, paddlePrefix(&pb, ts), body)
	h.Set("Paddle-Signature", "ts="+strconv.FormatInt(ts, 10)+";h1="+hexMAC.encode(mac))
	return nil
}

// parsePaddle returns Paddle-Signature and its ts, once the header is
// known to carry a ts and at least one h1.
func parsePaddle(h http.Header) (header string, ts int64, err error) {
	header = h.Get("Paddle-Signature")
	if header == "" {
		return "", 0, fail(ErrMissing, "no Paddle-Signature header")
	}
	hasTS, hasH1 := false, false
	for part := range strings.SplitSeq(header, ";") {
		key, value, _ := strings.Cut(part, "=")
		if value == "" {
			continue
		}
		switch key {
		case "ts":
			if ts, err = strconv.ParseInt(value, 10, 64); err != nil {
				return "", 0, fail(ErrMalformed, "Paddle-Signature ts is not an integer")
			}
			hasTS = true
		case "h1":
			hasH1 = true
		}
	}
	if !hasTS {
		return "", 0, fail(ErrMalformed, "Paddle-Signature has no ts")
	}
	if !hasH1 {
		return "", 0, fail(ErrMismatch, "Paddle-Signature has no h1 signature")
	}
	return header, ts, nil
}

// paddlePrefix is what Paddle signs before the body: "<ts>:".
func paddlePrefix(buf *[24]byte, ts int64) []byte {
	return append(strconv.AppendInt(buf[:0], ts, 10), ':')
}

// match reports ErrMismatch unless some h1 of header is the MAC of
// "<ts>:<body>" under some configured secret.
func (v *paddle) match(header string, ts int64, body []byte) error {
	var pb [24]byte
	if !v.keys.matchEntry(paddlePrefix(&pb, ts), body, header, ";", "h1=") {
		return fail(ErrMismatch, "no Paddle-Signature h1 matches a secret")
	}
	return nil
}
