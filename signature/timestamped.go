package signature

import (
	"crypto/sha256"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// timestamped verifies the schemes that sign a timestamp header with the
// body and send one MAC: Slack, Zoom, Twitch and Zendesk. The timestamp is
// signed as the header's text, verbatim.
type timestamped struct {
	sigHeader string // canonical header name
	label     string // written before the MAC, e.g. "v0="; empty if none
	enc       encoding
	tsHeader  string
	// parseTime reads tsHeader's value; ok is false when it is malformed.
	parseTime func(string) (t time.Time, ok bool)
	// formatTime writes a timestamp as the sender does, for Resign.
	formatTime func(time.Time) string
	// idHeader is signed before the timestamp (Twitch's message ID). Empty
	// if the scheme signs no ID.
	idHeader string
	// version, when set, makes the signed string "{version}:{ts}:{body}"
	// (Slack, Zoom); otherwise it is "{id}{ts}{body}".
	version   string
	keys      keyring
	tolerance time.Duration
}

func (v *timestamped) Headers() []string {
	if v.idHeader == "" {
		return []string{v.sigHeader, v.tsHeader}
	}
	return []string{v.sigHeader, v.tsHeader, v.idHeader}
}

func (v *timestamped) Verify(h http.Header, body []byte, now time.Time) error {
	r, err := v.parse(h)
	if err != nil {
		return err
	}
	if err := checkAge(r.signed, now, v.tolerance); err != nil {
		return err
	}
	return v.match(r, body)
}

// Resign sets the timestamp header to now, written as the sender writes
// it, and the signature header to its MAC under the first secret.
func (v *timestamped) Resign(h http.Header, body []byte, now time.Time) error {
	r, err := v.parse(h)
	if err != nil {
		return err
	}
	if err := v.match(r, body); err != nil {
		return err
	}
	ts := v.formatTime(now)
	var pb [128]byte
	var out [maxMACSize]byte
	mac := v.keys[0].sum(&out, v.prefix(&pb, r.id, ts), body)
	h.Set(v.tsHeader, ts)
	h.Set(v.sigHeader, v.label+v.enc.encode(mac))
	return nil
}

// stamped is what a request carries of a timestamped scheme.
type stamped struct {
	ts, id string // the timestamp header's text; the ID header's, if signed
	signed time.Time
	mac    string // the signature header's MAC, known to decode
}

// parse reads the scheme's headers from h.
func (v *timestamped) parse(h http.Header) (stamped, error) {
	value := h.Get(v.sigHeader)
	if value == "" {
		return stamped{}, fail(ErrMissing, "no "+v.sigHeader+" header")
	}
	r := stamped{ts: h.Get(v.tsHeader)}
	if r.ts == "" {
		return stamped{}, fail(ErrMissing, "no "+v.tsHeader+" header")
	}
	if v.idHeader != "" {
		if r.id = h.Get(v.idHeader); r.id == "" {
			return stamped{}, fail(ErrMissing, "no "+v.idHeader+" header")
		}
	}
	var ok bool
	if r.signed, ok = v.parseTime(r.ts); !ok {
		return stamped{}, fail(ErrMalformed, v.tsHeader+" is not a valid timestamp")
	}
	if r.mac, ok = strings.CutPrefix(value, v.label); !ok {
		return stamped{}, fail(ErrMalformed, v.sigHeader+" does not start with "+v.label)
	}
	var buf [maxMACSize]byte
	if _, ok = v.enc.decode(&buf, r.mac, sha256.Size); !ok {
		return stamped{}, fail(ErrMalformed, v.sigHeader+" is not a MAC of the expected encoding and length")
	}
	return r, nil
}

// prefix is what the scheme signs before the body:
// "{version}:{ts}:" (Slack, Zoom) or "{id}{ts}".
func (v *timestamped) prefix(buf *[128]byte, id, ts string) []byte {
	prefix := buf[:0]
	if v.version != "" {
		prefix = append(prefix, v.version...)
		prefix = append(prefix, ':')
		prefix = append(prefix, ts...)
		return append(prefix, ':')
	}
	prefix = append(prefix, id...)
	return append(prefix, ts...)
}

// match reports ErrMismatch unless r's MAC signs body under some secret.
func (v *timestamped) match(r stamped, body []byte) error {
	var buf [maxMACSize]byte
	sig, _ := v.enc.decode(&buf, r.mac, sha256.Size)
	var pb [128]byte
	if !v.keys.match(v.prefix(&pb, r.id, r.ts), body, sig) {
		return fail(ErrMismatch, v.sigHeader+" matches no secret")
	}
	return nil
}

func newTimestamped(scheme string, o Options, t timestamped) (*timestamped, error) {
	secrets, tolerance, err := settings(scheme, o)
	if err != nil {
		return nil, err
	}
	t.keys = newKeyring(sha256.New, rawKeys(secrets))
	t.tolerance = tolerance
	return &t, nil
}

func unixSeconds(s string) (time.Time, bool) {
	sec, err := strconv.ParseInt(s, 10, 64)
	return time.Unix(sec, 0), err == nil
}

func rfc3339(s string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

func formatUnix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// formatRFC3339Nano writes Twitch's form: UTC, nanoseconds kept.
func formatRFC3339Nano(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// formatRFC3339 writes Zendesk's form: UTC, whole seconds.
func formatRFC3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// Slack verifies X-Slack-Signature: v0=<hex HMAC-SHA256> over
// "v0:{X-Slack-Request-Timestamp}:{body}", keyed with the signing secret.
func Slack(o Options) (Verifier, error) {
	return newTimestamped("slack", o, timestamped{
		sigHeader: "X-Slack-Signature", label: "v0=", enc: hexMAC,
		tsHeader: "X-Slack-Request-Timestamp", parseTime: unixSeconds, formatTime: formatUnix,
		version: "v0",
	})
}

// Zoom verifies x-zm-signature: v0=<hex HMAC-SHA256> over
// "v0:{x-zm-request-timestamp}:{body}" (Unix seconds), keyed with the
// app's secret token.
func Zoom(o Options) (Verifier, error) {
	return newTimestamped("zoom", o, timestamped{
		sigHeader: "X-Zm-Signature", label: "v0=", enc: hexMAC,
		tsHeader: "X-Zm-Request-Timestamp", parseTime: unixSeconds, formatTime: formatUnix,
		version: "v0",
	})
}

// Twitch verifies Twitch-Eventsub-Message-Signature: sha256=<hex
// HMAC-SHA256> over message ID, timestamp (RFC 3339 with nanoseconds) and
// body, concatenated without separators.
func Twitch(o Options) (Verifier, error) {
	return newTimestamped("twitch", o, timestamped{
		sigHeader: "Twitch-Eventsub-Message-Signature", label: "sha256=", enc: hexMAC,
		tsHeader: "Twitch-Eventsub-Message-Timestamp", parseTime: rfc3339, formatTime: formatRFC3339Nano,
		idHeader: "Twitch-Eventsub-Message-Id",
	})
}

// Zendesk verifies X-Zendesk-Webhook-Signature: base64 HMAC-SHA256 over
// "{X-Zendesk-Webhook-Signature-Timestamp}{body}" (RFC 3339). The secret
// looks like base64 but is used verbatim as the key.
func Zendesk(o Options) (Verifier, error) {
	return newTimestamped("zendesk", o, timestamped{
		sigHeader: "X-Zendesk-Webhook-Signature", enc: base64MAC,
		tsHeader: "X-Zendesk-Webhook-Signature-Timestamp", parseTime: rfc3339, formatTime: formatRFC3339,
	})
}
