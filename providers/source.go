package providers

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/webhook-dedup/webhook-dedup/signature"
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
	// VerifiedOnly makes auto recognise only the presets whose signatures
	// it verifies (their secrets are in Secrets): another sender's request
	// passes through, and auto with no such preset is an error. Set for
	// async routes, where an unverified request would be queued and its
	// event ID taken before the app could refuse it. A named preset is
	// not affected: its Source's Unverified says whether it verifies.
	VerifiedOnly bool
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

// Presets lists every preset, in a stable order: the order in which auto
// tries the ones it can detect.
func Presets() []Preset {
	all := catalog()
	out := make([]Preset, len(all))
	for i, p := range all {
		out[i] = p.Preset
	}
	return out
}

// Source is the right-hand side of a route: a preset, header:, json:, auto,
// or a composite joined with '+'. It is immutable once parsed.
type Source struct {
	// fixed is the extractor of every request. Nil for auto.
	fixed *Extractor
	// detectors are auto's presets in detection order. Nil unless auto.
	detectors []detector
	// names are the presets the source can resolve to. Nil for generic sources.
	names []string
	// unverified are the presets of names whose requests are not verified.
	unverified []Preset
}

// detector is one preset auto can recognise.
type detector struct {
	groups    [][]string
	extractor *Extractor
}

// ErrNothingVerified is wrapped by ParseSource's answer to auto with
// Options.VerifiedOnly when no signing secret is set: it would recognise
// no sender at all.
var ErrNothingVerified = errors.New("auto on an async route recognises only the senders whose signatures it verifies, and no signing secret is set")

// errNoPreset is wrapped by ParseSource's answer to a sender that has no
// preset on purpose (no stable per-request ID); the message says why.
var errNoPreset = errors.New("no preset for this sender")

// Source prefixes.
const (
	headerPrefix = "header:"
	jsonPrefix   = "json:"
	autoSource   = "auto"
)

// ParseSource parses spec for the route at path (the namespace of generic sources).
//
// The spec is a preset name or alias (any case), "auto",
// "header:<Header-Name>", "json:<dotted.path>", or header: and json: parts
// joined with '+' into a composite ID; a '+' always separates parts.
// Extractors, and their verifiers when opts holds a preset's secrets, are
// built here, once: Resolve only picks one.
//
// auto tries the presets that have a distinctive header in the order of
// Presets() and picks the first whose headers the request carries. Adyen,
// Mailgun and Intercom have no such header and are never auto-detected.
//
// Naming a sender that has no stable per-request ID (WooCommerce, Lemon
// Squeezy, SendGrid, HubSpot, Discord) is an error that says why and what
// to do instead.
func ParseSource(path, spec string, opts Options) (*Source, error) {
	spec = strings.TrimSpace(spec)
	presets := catalog()
	if strings.EqualFold(spec, autoSource) {
		return parseAuto(presets, opts)
	}
	if p, ok := findPreset(presets, spec); ok {
		e, err := presetExtractor(p, opts)
		if err != nil {
			return nil, err
		}
		s := &Source{fixed: e, names: []string{p.Name}}
		if e.Verifier == nil {
			s.unverified = []Preset{p.Preset}
		}
		return s, nil
	}
	if why, ok := withoutPreset(strings.ToLower(spec)); ok {
		return nil, fmt.Errorf("providers: source %q: %w: %s", spec, errNoPreset, why)
	}
	r, err := parseGeneric(spec)
	if err != nil {
		return nil, fmt.Errorf("providers: source %q: %w", spec, err)
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	return &Source{fixed: &Extractor{
		Namespace: path,
		TTL:       ttl,
		NeedsBody: r.readsBody,
		Headers:   r.headerNames(),
		id:        r.extract,
	}}, nil
}

// Resolve returns the extractor for a request, or nil when the source does
// not recognise it (auto with no matching preset): the request then passes
// through untouched. It does not allocate.
func (s *Source) Resolve(h http.Header) *Extractor {
	if s.fixed != nil {
		return s.fixed
	}
	for i := range s.detectors {
		if matches(s.detectors[i].groups, h) {
			return s.detectors[i].extractor
		}
	}
	return nil
}

// PresetNames lists the presets this source can resolve to, so that a secret
// configured for a preset no route uses can be warned about. Empty for
// generic sources.
func (s *Source) PresetNames() []string {
	return slices.Clone(s.names)
}

// Unverified lists the presets this source resolves to whose requests it
// does not verify: no secret is configured for them, or the proxy does
// not check their sender's signatures (PayPal, Adyen, Mailgun). Every
// preset's sender signs its webhooks, so on an async route each is a way
// to queue a forged event under a real event ID. Empty for generic
// sources, whose senders the proxy knows nothing of, and for auto with
// VerifiedOnly.
func (s *Source) Unverified() []Preset {
	return slices.Clone(s.unverified)
}

// Extractor returns the extractor of this source whose Namespace is
// namespace: the one that accepted a request queued under that namespace,
// for its delivery to find its Resigner. Nil when none has it (the route's
// source changed since).
func (s *Source) Extractor(namespace string) *Extractor {
	if s.fixed != nil {
		if s.fixed.Namespace == namespace {
			return s.fixed
		}
		return nil
	}
	for _, d := range s.detectors {
		if d.extractor.Namespace == namespace {
			return d.extractor
		}
	}
	return nil
}

func parseAuto(presets []preset, opts Options) (*Source, error) {
	s := &Source{}
	var secretVars []string // of the presets VerifiedOnly left out
	for i := range presets {
		p := &presets[i]
		if p.detect == nil {
			continue
		}
		e, err := presetExtractor(p, opts)
		if err != nil {
			return nil, err
		}
		if e.Verifier == nil {
			if opts.VerifiedOnly {
				if p.SecretVar != "" {
					secretVars = append(secretVars, p.SecretVar)
				}
				continue
			}
			s.unverified = append(s.unverified, p.Preset)
		}
		s.detectors = append(s.detectors, detector{groups: p.detect, extractor: e})
		s.names = append(s.names, p.Name)
	}
	if opts.VerifiedOnly && len(s.detectors) == 0 {
		return nil, fmt.Errorf("providers: %w: set the secret of each sender the route receives (%s), or name the sender's preset instead of auto",
			ErrNothingVerified, strings.Join(secretVars, ", "))
	}
	return s, nil
}

// findPreset looks name up among the presets' names and aliases, ignoring case.
func findPreset(presets []preset, name string) (*preset, bool) {
	for i := range presets {
		if strings.EqualFold(presets[i].Name, name) {
			return &presets[i], true
		}
		for _, alias := range presets[i].aliases {
			if strings.EqualFold(alias, name) {
				return &presets[i], true
			}
		}
	}
	return nil, false
}

// presetExtractor builds p's extractor, with a verifier when a secret is set.
func presetExtractor(p *preset, opts Options) (*Extractor, error) {
	e := &Extractor{
		Namespace:      p.Name,
		TTL:            p.TTL,
		InflightStatus: p.inflightStatus,
		NeedsBody:      p.rule.readsBody,
		Headers:        p.rule.headerNames(),
		id:             p.rule.extract,
	}
	for _, group := range p.detect {
		e.Headers = appendNew(e.Headers, group...)
	}
	if opts.TTL != 0 {
		e.TTL = opts.TTL
	}
	secrets := opts.Secrets[p.Name]
	if len(secrets) == 0 {
		return e, nil
	}
	if p.scheme == nil {
		return nil, fmt.Errorf("providers: preset %s does not verify signatures, but secrets are configured for it", p.Name)
	}
	v, err := p.scheme(signature.Options{Secrets: secrets, Tolerance: opts.Tolerance, URL: opts.URLs[p.Name]})
	if err != nil {
		if p.URLVar != "" {
			return nil, fmt.Errorf("providers: %s (with %s): %w", p.SecretVar, p.URLVar, err)
		}
		return nil, fmt.Errorf("providers: %s: %w", p.SecretVar, err)
	}
	e.Verifier = v
	e.Resigner, _ = v.(signature.Resigner)
	e.NeedsBody = true
	e.Headers = appendNew(e.Headers, v.Headers()...)
	return e, nil
}

// appendNew appends the names not yet in list.
func appendNew(list []string, names ...string) []string {
	for _, n := range names {
		if !slices.Contains(list, n) {
			list = append(list, n)
		}
	}
	return list
}

// parseGeneric parses header: and json: sources, alone or joined with '+'.
func parseGeneric(spec string) (*rule, error) {
	specs := strings.Split(spec, "+")
	if len(specs) == 1 {
		p, err := parsePart(spec)
		if err != nil {
			return nil, err
		}
		return newRule(p), nil
	}
	parts := make([]part, len(specs))
	for i, s := range specs {
		s = strings.TrimSpace(s)
		if !strings.HasPrefix(s, headerPrefix) && !strings.HasPrefix(s, jsonPrefix) {
			return nil, fmt.Errorf("part %d of the composite, %q: a composite joins only header: and json: parts", i+1, s)
		}
		p, err := parsePart(s)
		if err != nil {
			return nil, fmt.Errorf("part %d of the composite, %q: %w", i+1, s, err)
		}
		parts[i] = p
	}
	return newRule(parts...), nil
}

func parsePart(s string) (part, error) {
	switch {
	case strings.HasPrefix(s, headerPrefix):
		name := strings.TrimSpace(strings.TrimPrefix(s, headerPrefix))
		if !validHeaderName(name) {
			return part{}, errors.New("want a header name, e.g. header:X-Event-Id")
		}
		return headerPart(name), nil
	case strings.HasPrefix(s, jsonPrefix):
		path := strings.TrimSpace(strings.TrimPrefix(s, jsonPrefix))
		if path == "" || slices.Contains(strings.Split(path, "."), "") {
			return part{}, errors.New("want a dotted path without empty segments, e.g. json:data.object.id")
		}
		return jsonPart(path), nil
	}
	return part{}, fmt.Errorf("unknown source: want a preset (%s), auto, header:<Header-Name>, json:<dotted.path>, "+
		"or header: and json: parts joined with '+'", strings.Join(presetNames(), ", "))
}

// presetNames lists every preset name and alias, for error messages.
func presetNames() []string {
	var names []string
	for _, p := range catalog() {
		names = append(names, p.Name)
		names = append(names, p.aliases...)
	}
	return names
}

// validHeaderName reports whether name is a non-empty HTTP token (RFC 9110).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
