package providers

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
)

// rule is where one source finds its event ID: one part, or several joined
// into a composite ID.
type rule struct {
	parts []part
	// readsBody reports whether some part (or the handshake test) reads the
	// JSON body. If false, the body is never looked at.
	readsBody bool
	// handshake reports whether the request is a handshake that carries no
	// event by design. If nil, no request is a handshake. doc is the body
	// as a string (empty when readsBody is false).
	handshake func(h http.Header, doc string) bool
}

// part is one field of an ID: a header (the first of several names that is
// present wins) or a value at a JSON path.
type part struct {
	// headers are canonical header names tried in order. Empty for JSON parts.
	headers []string
	// path is an escaped gjson path. Empty for header parts.
	path string
	// optional makes an absent or empty value an empty part instead of
	// ErrNoID. Only composites use it (Zoom's object ID).
	optional bool
}

// headerPart reads the first present header of names.
func headerPart(names ...string) part {
	canon := make([]string, len(names))
	for i, n := range names {
		canon[i] = textproto.CanonicalMIMEHeaderKey(n)
	}
	return part{headers: canon}
}

// jsonPart reads the value at a dotted path. The path is taken literally:
// only dots separate segments, and every gjson metacharacter inside a
// segment (wildcards, '#', '|', '@', '!', …) is escaped. A numeric segment
// still indexes an array (notificationItems.0.pspReference), because gjson
// reads a plain number key on an array as an index.
func jsonPart(dotted string) part {
	segs := strings.Split(dotted, ".")
	for i, s := range segs {
		segs[i] = gjson.Escape(s)
	}
	return part{path: strings.Join(segs, ".")}
}

// newRule joins parts into one rule.
func newRule(parts ...part) *rule {
	r := &rule{parts: parts}
	for _, p := range parts {
		if p.path != "" {
			r.readsBody = true
		}
	}
	return r
}

// extract is an Extractor's id func. It allocates only the returned ID when
// the ID comes from the body or is a composite; header IDs are returned as
// the header's own string.
func (r *rule) extract(h http.Header, body []byte) (string, error) {
	var doc string
	if r.readsBody {
		// Malformed JSON has no ID, even where gjson's lenient scan would
		// find one (a truncated body, trailing garbage).
		if !gjson.ValidBytes(body) {
			return "", ErrNoID
		}
		// A read-only view of body, without copying it. The view never
		// outlives this call: every string derived from it is either
		// compared or copied before returning.
		doc = unsafe.String(unsafe.SliceData(body), len(body))
	}
	if r.handshake != nil && r.handshake(h, doc) {
		return "", ErrNotEvent
	}
	if len(r.parts) == 1 {
		p := &r.parts[0]
		v, err := p.value(h, doc)
		if err != nil {
			return "", err
		}
		if p.path != "" {
			v = strings.Clone(v)
		}
		return v, nil
	}
	return r.composite(h, doc)
}

// compositeSep joins the parts of a composite ID. Inside a part, the
// separator and the escape character are escaped with a backslash, so two
// different tuples never give the same ID ("a+b","c" vs "a","b+c").
const compositeSep = '+'

func (r *rule) composite(h http.Header, doc string) (string, error) {
	var buf [MaxIDLen]byte
	b := buf[:0]
	tooLong := false // checked once every part was found: a missing part is ErrNoID
	for i := range r.parts {
		p := &r.parts[i]
		v, err := p.value(h, doc)
		if err != nil && !(p.optional && errors.Is(err, ErrNoID)) {
			return "", err
		}
		if tooLong {
			continue
		}
		if i > 0 {
			b = append(b, compositeSep)
		}
		for j := 0; j < len(v); j++ {
			if c := v[j]; c == compositeSep || c == '\\' {
				b = append(b, '\\')
			}
			b = append(b, v[j])
		}
		tooLong = len(b) > MaxIDLen
	}
	if tooLong {
		return "", fmt.Errorf("%w: composite longer than %d bytes", ErrInvalidID, MaxIDLen)
	}
	return string(b), nil
}

// value returns the part's validated value. For JSON parts the string may
// share memory with doc.
func (p *part) value(h http.Header, doc string) (string, error) {
	if p.path != "" {
		res := gjson.Get(doc, p.path)
		switch res.Type {
		case gjson.String:
			return validID(res.Str)
		case gjson.Number, gjson.True, gjson.False:
			// A number is its literal text: 12345678901234567890 stays
			// exact instead of going through a float64.
			return validID(res.Raw)
		default: // absent, null, object, array
			return "", ErrNoID
		}
	}
	for _, name := range p.headers {
		vs := h[name]
		if len(vs) == 0 {
			continue
		}
		v := strings.TrimSpace(vs[0])
		for _, other := range vs[1:] {
			if strings.TrimSpace(other) != v {
				return "", fmt.Errorf("%w: %d different %s headers", ErrInvalidID, len(vs), name)
			}
		}
		if v == "" {
			continue // an empty header counts as absent: try the next name
		}
		return validID(v)
	}
	return "", ErrNoID
}

// validID trims spaces and checks the result: empty is ErrNoID, longer than
// MaxIDLen bytes or holding a control character is ErrInvalidID.
func validID(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", ErrNoID
	}
	if len(v) > MaxIDLen {
		return "", fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidID, len(v), MaxIDLen)
	}
	for i := 0; i < len(v); {
		c := v[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return "", fmt.Errorf("%w: control character %#02x", ErrInvalidID, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(v[i:])
		if unicode.IsControl(r) { // C1 controls, U+0080–U+009F
			return "", fmt.Errorf("%w: control character %U", ErrInvalidID, r)
		}
		i += size
	}
	return v, nil
}
