package signature

import (
	"crypto/sha1"
	"crypto/sha256"
	"fmt"
	"hash"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// bodyMAC verifies the schemes that sign the raw body, possibly after a
// fixed prefix, with no signed timestamp: GitHub, Shopify, Bitbucket, Jira,
// Intercom and Square (and Linear, which adds a timestamp in the body).
// Without a timestamp a captured delivery replays forever; the dedup store
// is then the replay defence.
type bodyMAC struct {
	header string // canonical header name
	label  string // written before the MAC, e.g. "sha256="; empty if none
	enc    encoding
	size   int    // MAC length in bytes
	prefix []byte // signed before the body (Square's notification URL); nil if none
	keys   keyring
}

func newBodyMAC(scheme string, o Options, newHash func() hash.Hash, header, label string, enc encoding) (*bodyMAC, error) {
	secrets, _, err := settings(scheme, o)
	if err != nil {
		return nil, err
	}
	return bodyMACOf(secrets, newHash, header, label, enc), nil
}

func bodyMACOf(secrets []string, newHash func() hash.Hash, header, label string, enc encoding) *bodyMAC {
	return &bodyMAC{
		header: header,
		label:  label,
		enc:    enc,
		size:   newHash().Size(),
		keys:   newKeyring(newHash, rawKeys(secrets)),
	}
}

func (v *bodyMAC) Verify(h http.Header, body []byte, _ time.Time) error {
	value := h.Get(v.header)
	if value == "" {
		return fail(ErrMissing, "no "+v.header+" header")
	}
	encoded, ok := strings.CutPrefix(value, v.label)
	if !ok {
		return fail(ErrMalformed, v.header+" does not start with "+v.label)
	}
	var buf [maxMACSize]byte
	sig, ok := v.enc.decode(&buf, encoded, v.size)
	if !ok {
		return fail(ErrMalformed, v.header+" is not a MAC of the expected encoding and length")
	}
	if !v.keys.match(v.prefix, body, sig) {
		return fail(ErrMismatch, v.header+" matches no secret")
	}
	return nil
}

func (v *bodyMAC) Headers() []string { return []string{v.header} }

// GitHub verifies X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>.
func GitHub(o Options) (Verifier, error) {
	return newBodyMAC("github", o, sha256.New, "X-Hub-Signature-256", "sha256=", hexMAC)
}

// Shopify verifies X-Shopify-Hmac-Sha256: base64 HMAC-SHA256 of the body,
// keyed with the app's client secret.
func Shopify(o Options) (Verifier, error) {
	return newBodyMAC("shopify", o, sha256.New, "X-Shopify-Hmac-Sha256", "", base64MAC)
}

// Bitbucket verifies Bitbucket Cloud's X-Hub-Signature: sha256=<hex>.
func Bitbucket(o Options) (Verifier, error) {
	return newBodyMAC("bitbucket", o, sha256.New, "X-Hub-Signature", "sha256=", hexMAC)
}

// Jira verifies Jira Cloud's X-Hub-Signature: sha256=<hex> (the only
// method Atlassian uses today; others are refused as malformed).
func Jira(o Options) (Verifier, error) {
	return newBodyMAC("jira", o, sha256.New, "X-Hub-Signature", "sha256=", hexMAC)
}

// Intercom verifies X-Hub-Signature: sha1=<hex HMAC-SHA1 of the body>,
// keyed with the app's client secret.
func Intercom(o Options) (Verifier, error) {
	return newBodyMAC("intercom", o, sha1.New, "X-Hub-Signature", "sha1=", hexMAC)
}

// Square verifies x-square-hmacsha256-signature: base64 HMAC-SHA256 of the
// notification URL followed by the body, keyed with the subscription's
// signature key. Options.URL must be the notification URL exactly as
// configured in Square: behind a rewrite it differs from what the proxy
// sees, so it is never rebuilt from Host.
func Square(o Options) (Verifier, error) {
	if o.URL == "" {
		return nil, fmt.Errorf("signature: square: no URL (Square signs the notification URL; configure it exactly as registered)")
	}
	if u, err := url.Parse(o.URL); err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("signature: square: URL is not an absolute URL")
	}
	v, err := newBodyMAC("square", o, sha256.New, "X-Square-Hmacsha256-Signature", "", base64MAC)
	if err != nil {
		return nil, err
	}
	v.prefix = []byte(o.URL)
	return v, nil
}

// linear verifies Linear-Signature (hex HMAC-SHA256 of the body), then the
// body's webhookTimestamp (Unix milliseconds). The timestamp is read only
// after the signature holds, so unauthenticated JSON is never parsed.
type linear struct {
	mac       *bodyMAC
	tolerance time.Duration
}

// Linear verifies Linear-Signature and the signed body's webhookTimestamp,
// which must lie within the tolerance.
func Linear(o Options) (Verifier, error) {
	secrets, tolerance, err := settings("linear", o)
	if err != nil {
		return nil, err
	}
	return &linear{mac: bodyMACOf(secrets, sha256.New, "Linear-Signature", "", hexMAC), tolerance: tolerance}, nil
}

func (v *linear) Headers() []string { return v.mac.Headers() }

func (v *linear) Verify(h http.Header, body []byte, now time.Time) error {
	if err := v.mac.Verify(h, body, now); err != nil {
		return err
	}
	ts := gjson.GetBytes(body, "webhookTimestamp")
	if !ts.Exists() {
		return fail(ErrMissing, "no webhookTimestamp in the body")
	}
	ms, err := strconv.ParseInt(ts.Raw, 10, 64)
	if ts.Type != gjson.Number || err != nil {
		return fail(ErrMalformed, "webhookTimestamp is not an integer")
	}
	return checkAge(time.UnixMilli(ms), now, v.tolerance)
}
