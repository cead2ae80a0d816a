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
