// Package providers knows where each webhook sender puts its event ID, how
// long it retries, and how it signs; and parses the sources of ROUTES.
package providers

import (
	"errors"
	"net/http"
	"time"

	"github.com/webhook-dedup/webhook-dedup/signature"
)

// Sentinel errors returned by Extractor.EventID.
var (
	// ErrNoID means the request carries no event ID where the source looks
	// (including malformed JSON and an ID that is empty after trimming).
	ErrNoID = errors.New("providers: no event ID")
	// ErrInvalidID means the ID is longer than MaxIDLen bytes or contains
	// control characters.
	ErrInvalidID = errors.New("providers: invalid event ID")
	// ErrNotEvent means the request is a handshake that carries no event by
	// design (Slack url_verification, Twitch challenge, Zoom URL validation):
	// it is forwarded and never deduplicated.
	ErrNotEvent = errors.New("providers: not an event")
)

// MaxIDLen is the longest event ID accepted, in bytes.
const MaxIDLen = 512

// Extractor finds one request's event ID. It is immutable and shared by all
// requests on a route.
type Extractor struct {
	// Namespace separates keys: the preset's name, or the route's path for
	// generic sources.
	Namespace string
	// TTL is the completed-record lifetime: the preset's default (longer
	// than its retry window), or the generic default.
	TTL time.Duration
	// InflightStatus is the preset's answer to an unresolved in-flight
	// duplicate. If zero, the configured INFLIGHT_STATUS.
	InflightStatus int
	// NeedsBody reports whether EventID reads the body (JSON sources,
	// signature checks). If false, EventID is called with a nil body and the
	// body can stream to the upstream.
	NeedsBody bool
	// Verifier checks the signature before the store is touched. Nil when
	// the preset does not sign or no secret is configured.
	Verifier signature.Verifier
	// Resigner signs a request again for each attempt of its background
	// delivery, so that the app's own timestamp check passes however late
	// the attempt (RESIGN=auto): the Verifier itself, when its scheme
	// signs a timestamp carried in a header. Nil when the preset signs no
	// such timestamp (GitHub, Shopify, Linear, …) or no secret is
	// configured.
	Resigner signature.Resigner
	// Headers are the canonical names of the request headers the ID,
	// auto's recognition of the sender and the signature check read. A
	// request whose Connection header names one of them would lose it on
	// its way to the app (hop-by-hop headers are removed), so the app
	// would not see the request the proxy checked. Empty for a source
	// that reads no header.
	Headers []string

	id func(h http.Header, body []byte) (string, error)
}

// EventID returns the request's event ID, or ErrNoID, ErrInvalidID or
// ErrNotEvent (possibly wrapped).
func (e *Extractor) EventID(h http.Header, body []byte) (string, error) {
	return e.id(h, body)
}
