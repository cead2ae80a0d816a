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
	value := h.Get(v.sigHeader)
	if value == "" {
		return fail(ErrMissing, "no "+v.sigHeader+" header")
	}
	ts := h.Get(v.tsHeader)
	if ts == "" {
		return fail(ErrMissing, "no "+v.tsHeader+" header")
	}
	var id string
	if v.idHeader != "" {
		if id = h.Get(v.idHeader); id == "" {
			return fail(ErrMissing, "no "+v.idHeader+" header")
		}
	}
	signed, ok := v.parseTime(ts)
	if !ok {
		return fail(ErrMalformed, v.tsHeader+" is not a valid timestamp")
	}
	encoded, ok := strings.CutPrefix(value, v.label)
	if !ok {
		return fail(ErrMalformed, v.sigHeader+" does not start with "+v.label)
	}
	var buf [maxMACSize]byte
	sig, ok := v.enc.decode(&buf, encoded, sha256.Size)
	if !ok {
		return fail(ErrMalformed, v.sigHeader+" is not a MAC of the expected encoding and length")
	}
	if err := checkAge(signed, now, v.tolerance); err != nil {
		return err
	}
	var pb [128]byte
	prefix := pb[:0]
	if v.version != "" {
		prefix = append(prefix, v.version...)
		prefix = append(prefix, ':')
		prefix = append(prefix, ts...)
		prefix = append(prefix, ':')
	} else {
		prefix = append(prefix, id...)
		prefix = append(prefix, ts...)
	}
	if !v.keys.match(prefix, body, sig) {
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

// Slack verifies X-Slack-Signature: v0=<hex HMAC-SHA256> over
// "v0:{X-Slack-Request-Timestamp}:{body}", keyed with the signing secret.
func Slack(o Options) (Verifier, error) {
	return newTimestamped("slack", o, timestamped{
		sigHeader: "X-Slack-Signature", label: "v0=", enc: hexMAC,
		tsHeader: "X-Slack-Request-Timestamp", parseTime: unixSeconds,
		version: "v0",
	})
}

// Zoom verifies x-zm-signature: v0=<hex HMAC-SHA256> over
// "v0:{x-zm-request-timestamp}:{body}" (Unix seconds), keyed with the
// app's secret token.
func Zoom(o Options) (Verifier, error) {
	return newTimestamped("zoom", o, timestamped{
		sigHeader: "X-Zm-Signature", label: "v0=", enc: hexMAC,
		tsHeader: "X-Zm-Request-Timestamp", parseTime: unixSeconds,
		version: "v0",
	})
}

// Twitch verifies Twitch-Eventsub-Message-Signature: sha256=<hex
// HMAC-SHA256> over message ID, timestamp (RFC 3339 with nanoseconds) and
// body, concatenated without separators.
func Twitch(o Options) (Verifier, error) {
	return newTimestamped("twitch", o, timestamped{
		sigHeader: "Twitch-Eventsub-Message-Signature", label: "sha256=", enc: hexMAC,
		tsHeader: "Twitch-Eventsub-Message-Timestamp", parseTime: rfc3339,
		idHeader: "Twitch-Eventsub-Message-Id",
	})
}

// Zendesk verifies X-Zendesk-Webhook-Signature: base64 HMAC-SHA256 over
// "{X-Zendesk-Webhook-Signature-Timestamp}{body}" (RFC 3339). The secret
// looks like base64 but is used verbatim as the key.
func Zendesk(o Options) (Verifier, error) {
	return newTimestamped("zendesk", o, timestamped{
		sigHeader: "X-Zendesk-Webhook-Signature", enc: base64MAC,
		tsHeader: "X-Zendesk-Webhook-Signature-Timestamp", parseTime: rfc3339,
	})
}
