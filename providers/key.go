package providers

import (
	"fmt"
	"net/http"
	"strings"
)

// Key is where an ordered route finds each request's order key (a route's
// order= option): a header: or json: source, or such parts joined with
// '+', parsed as a generic ID source is. It is immutable once parsed.
type Key struct {
	spec string
	r    *rule
}

// ParseKey parses an order key source: "header:<Header-Name>",
// "json:<dotted.path>", or such parts joined with '+' (the generic ID
// sources; a preset or auto names no key).
func ParseKey(spec string) (*Key, error) {
	spec = strings.TrimSpace(spec)
	r, err := parseGeneric(spec)
	if err != nil {
		return nil, fmt.Errorf("providers: key %q: %w", spec, err)
	}
	return &Key{spec: spec, r: r}, nil
}

// String returns the source as written.
func (k *Key) String() string { return k.spec }

// NeedsBody reports whether the key is read from the JSON body.
func (k *Key) NeedsBody() bool { return k.r.readsBody }

// Value returns the request's key, as an ID is extracted: ErrNoID when a
// part is absent or empty, ErrInvalidID when it is too long or holds a
// control character.
func (k *Key) Value(h http.Header, body []byte) (string, error) {
	return k.r.extract(h, body)
}
