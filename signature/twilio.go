package signature

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// twilio verifies X-Twilio-Signature: base64 HMAC-SHA1, keyed with the
// Auth Token, over the public URL followed by the form parameters sorted
// by name, each written as name then value with no separator (a repeated
// name contributes each of its values, sorted, as Twilio's SDK does). For a
// JSON body the URL carries "bodySHA256=<hex SHA-256 of the body>" in its
// query and no parameters follow. Like the SDK, the URL is tried with and
// without its port, since Twilio's own signing is inconsistent about it.
type twilio struct {
	formURLs []string // the public URL without and with its port
	jsonURLs []string // the same, each ending in "?bodySHA256=" or "&bodySHA256="
	keys     keyring
}

// Twilio verifies X-Twilio-Signature. Options.URL is the public URL
// Twilio posts to, exactly as configured in the console (including its
// query). Behind TLS termination or a path rewrite the proxy sees another
// URL, so it is configured, never rebuilt from Host or X-Forwarded-*. A
// fragment (Twilio's connection overrides, "#rc=…") never reaches the
// server, so it is not part of the signed URL and is dropped.
func Twilio(o Options) (Verifier, error) {
	secrets, _, err := settings("twilio", o)
	if err != nil {
		return nil, err
	}
	if o.URL == "" {
		return nil, fmt.Errorf("signature: twilio: no URL (Twilio signs the public URL it posts to; configure it exactly as in the console)")
	}
	urls, err := twilioURLs(o.URL)
	if err != nil {
		return nil, fmt.Errorf("signature: twilio: URL: %w", err)
	}
	v := &twilio{formURLs: urls, keys: newKeyring(sha1.New, rawKeys(secrets))}
	for _, u := range urls {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		v.jsonURLs = append(v.jsonURLs, u+sep+"bodySHA256=")
	}
	return v, nil
}

// twilioURLs returns raw without a port and with one (its own, or the
// scheme's default), editing only the authority so that the path and
// query keep their exact spelling.
func twilioURLs(raw string) ([]string, error) {
	raw, _, _ = strings.Cut(raw, "#")
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("not a URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("not an absolute http or https URL")
	}
	schemeEnd := strings.Index(raw, "://") + len("://")
	authEnd := schemeEnd + strings.IndexAny(raw[schemeEnd:]+"/", "/?")
	authority, rest := raw[schemeEnd:authEnd], raw[authEnd:]
	userinfo, hostport := "", authority
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, hostport = authority[:at+1], authority[at+1:]
	}
	host, port := hostport, u.Port()
	if port != "" {
		host = strings.TrimSuffix(hostport, ":"+port)
	} else if u.Scheme == "https" {
		port = "443"
	} else {
		port = "80"
	}
	head := raw[:schemeEnd] + userinfo + host
	return []string{head + rest, head + ":" + port + rest}, nil
}

// Headers includes Content-Type: it tells a form body, whose parameters
// are signed, from a JSON one.
func (v *twilio) Headers() []string { return []string{"X-Twilio-Signature", "Content-Type"} }

func (v *twilio) Verify(h http.Header, body []byte, _ time.Time) error {
	value := h.Get("X-Twilio-Signature")
	if value == "" {
		return fail(ErrMissing, "no X-Twilio-Signature header")
	}
	var buf [maxMACSize]byte
	sig, ok := base64MAC.decode(&buf, value, sha1.Size)
	if !ok {
		return fail(ErrMalformed, "X-Twilio-Signature is not a base64 HMAC-SHA1")
	}
	urls, suffix := v.formURLs, []byte(nil) // suffix follows the URL in the signed string
	if mediaType, _, _ := strings.Cut(h.Get("Content-Type"), ";"); len(body) == 0 ||
		strings.EqualFold(strings.TrimSpace(mediaType), "application/x-www-form-urlencoded") {
		params, err := url.ParseQuery(string(body))
		if err != nil {
			return fail(ErrMalformed, "form body does not parse")
		}
		suffix = sortedParams(params)
	} else {
		var hexSum [2 * sha256.Size]byte
		sum := sha256.Sum256(body)
		urls, suffix = v.jsonURLs, hex.AppendEncode(hexSum[:0], sum[:])
	}
	var pb [256]byte
	for _, u := range urls {
		prefix := append(append(pb[:0], u...), suffix...)
		if v.keys.match(prefix, nil, sig) {
			return nil
		}
	}
	return fail(ErrMismatch, "X-Twilio-Signature matches no secret")
}

// sortedParams writes each parameter as name then value, sorted by name,
// and a repeated name's values sorted, as Twilio's SDK does.
func sortedParams(params url.Values) []byte {
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	slices.Sort(names)
	var out []byte
	for _, name := range names {
		values := params[name]
		slices.Sort(values)
		for _, value := range values {
			out = append(out, name...)
			out = append(out, value...)
		}
	}
	return out
}
