package providers

import (
	"net/http"
	"time"
)

// Options bind a source to the deployment's secrets and overrides.
type Options struct {
	// Secrets holds the configured secrets by preset name (from
	// <PROVIDER>_WEBHOOK_SECRET). A preset with secrets verifies signatures.
	Secrets map[string][]string
	// URLs holds the public URL by preset name (from <PROVIDER>_WEBHOOK_URL),
	// for schemes that sign the URL.
	URLs map[string]string
	// Tolerance is the allowed age of a signed timestamp. If zero, 5 minutes.
	Tolerance time.Duration
	// TTL overrides every preset's completed-record lifetime (DEDUP_TTL).
	// If zero, each preset's own; generic sources then use DefaultTTL.
	TTL time.Duration
}

// DefaultTTL is the completed-record lifetime of generic sources
// (header:, json:) when DEDUP_TTL is not set.
const DefaultTTL = 72 * time.Hour

// Preset describes one sender for configuration and documentation.
type Preset struct {
	Name string
	// TTL is the default completed-record lifetime.
	TTL time.Duration
	// SecretVar is the environment variable holding its secrets; empty when
	// the preset does not verify signatures.
	SecretVar string
	// URLVar is the environment variable holding the public URL it signs;
	// empty when the scheme does not sign the URL.
	URLVar string
}

// Presets lists every preset, in a stable order.
func Presets() []Preset {
	panic("unimplemented")
}

// Source is the right-hand side of a route: a preset, header:, json:, auto,
// or a composite joined with '+'.
type Source struct {
}

// ParseSource parses spec for the route at path (the namespace of generic sources).
func ParseSource(path, spec string, opts Options) (*Source, error) {
	panic("unimplemented")
}

// Resolve returns the extractor for a request, or nil when the source does
// not recognise it (auto with no matching preset): the request then passes
// through untouched.
func (s *Source) Resolve(h http.Header) *Extractor {
	panic("unimplemented")
}

// PresetNames lists the presets this source can resolve to, so that a secret
// configured for a preset no route uses can be warned about.
func (s *Source) PresetNames() []string {
	panic("unimplemented")
}
