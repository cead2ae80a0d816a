// Package signature verifies webhook senders' request signatures, so that a
// forged delivery is refused before its event ID touches the store.
package signature

import (
	"errors"
	"net/http"
	"time"
)

// Sentinel errors. Verify wraps one of them with the reason (never a secret).
var (
	// ErrMissing means the request carries no signature (or no timestamp) where one is required.
	ErrMissing = errors.New("signature: missing")
	// ErrMalformed means a signature or timestamp header could not be parsed.
	ErrMalformed = errors.New("signature: malformed")
	// ErrMismatch means no signature matched any configured secret.
	ErrMismatch = errors.New("signature: no match")
	// ErrStale means the signed timestamp is outside the tolerance, either way.
	ErrStale = errors.New("signature: timestamp outside tolerance")
)

// Verifier checks one request. body is the raw body exactly as received.
type Verifier interface {
	Verify(h http.Header, body []byte, now time.Time) error
	// Headers lists the canonical names of every request header Verify
	// reads, so that a proxy can refuse a request that would lose one of
	// them on its way to the app (a Connection header naming it).
	Headers() []string
}

// Resigner is implemented by the verifiers of the schemes that sign a
// timestamp carried in a header (Stripe, Standard Webhooks and GitLab's
// signing tokens, Slack, Paddle, Twitch, Zoom, Zendesk). A webhook queued
// for background delivery keeps its sender's timestamp, which ages past
// the receiving app's tolerance (5 minutes in most providers' libraries)
// while the app is down: Resign gives each attempt the headers the sender
// would have sent at that moment, so the app's own check still passes.
// Schemes that sign no timestamp (GitHub, Shopify, …) never go stale, and
// Linear's timestamp is in the signed body, which is never changed: their
// verifiers do not implement it.
type Resigner interface {
	// Resign first checks that h and body carry a signature made with one
	// of the configured secrets, as Verify does but whatever the age of
	// its timestamp: a request that was never signed by the sender (one
	// queued without verification) is never signed by the proxy. It then
	// replaces the scheme's timestamp and signature headers in h with the
	// ones the sender would send at now, signed with the first configured
	// secret (the one the app is expected to hold after a rotation), and
	// drops the other signatures. No other header, and never body,
	// changes. On error, one of the package's sentinels, h is left as it
	// was.
	Resign(h http.Header, body []byte, now time.Time) error
}

// Options configure a scheme.
type Options struct {
	// Secrets are all accepted (rotation, several accounts). At least one.
	Secrets []string
	// Tolerance is the allowed age (and future skew) of a signed timestamp.
	// If zero, 5 minutes.
	Tolerance time.Duration
	// URL is the public URL the sender signs, for schemes that sign it
	// (Twilio, Square). Empty for the others.
	URL string
}
