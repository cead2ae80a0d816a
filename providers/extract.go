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
	// segs are the segments of a dotted JSON path, taken literally (see
	// lookup). Nil for header parts.
	segs []string
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
// only dots separate segments, and no character inside a segment (gjson's
// wildcards, '#', '|', '@', '!', …) has a meaning of its own. A numeric
// segment still indexes an array (notificationItems.0.pspReference).
func jsonPart(dotted string) part {
	return part{segs: strings.Split(dotted, ".")}
}

// newRule joins parts into one rule.
func newRule(parts ...part) *rule {
	r := &rule{parts: parts}
	for _, p := range parts {
		if p.segs != nil {
			r.readsBody = true
		}
	}
	return r
}

// headerNames lists the canonical names of the headers the parts read.
func (r *rule) headerNames() []string {
	var names []string
	for _, p := range r.parts {
		names = appendNew(names, p.headers...)
	}
	return names
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
		if p.segs != nil {
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
	if p.segs != nil {
		res, repeated := lookup(doc, p.segs)
		if repeated {
			// gjson reads the first of two equal keys; most apps' JSON
			// decoders keep the last, so the app would see another ID.
			return "", fmt.Errorf("%w: a key of the ID's path %q appears twice in one object", ErrInvalidID, strings.Join(p.segs, "."))
		}
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

// lookup finds the value at segs, walking down from the document's root:
// a segment is an object's key, taken literally, or an index into an array
// (notificationItems.0.pspReference). It also reports whether some object
// along the way holds the segment's key more than once: the proxy would
// read one value and the app another (most JSON decoders keep the last of
// two equal keys). Keys are compared for that without regard to case, as Go's
// encoding/json matches a struct field (and keeps the last value it
// matched), so {"id":"A","ID":"B"} counts too. Only the objects along the
// path are scanned, each once.
func lookup(doc string, segs []string) (res gjson.Result, repeated bool) {
	cur := gjson.Parse(doc)
	for _, seg := range segs {
		var next gjson.Result
		found := false
		switch {
		case cur.IsObject():
			n := 0
			cur.ForEach(func(k, v gjson.Result) bool {
				if strings.EqualFold(k.Str, seg) {
					n++
					if k.Str == seg {
						next, found = v, true
					}
				}
				return n < 2
			})
			if n > 1 {
				return gjson.Result{}, true
			}
		case cur.IsArray():
			idx, ok := arrayIndex(seg)
			if !ok {
				return gjson.Result{}, false
			}
			i := 0
			cur.ForEach(func(_, v gjson.Result) bool {
				if i == idx {
					next, found = v, true
					return false
				}
				i++
				return true
			})
		}
		if !found {
			return gjson.Result{}, false
		}
		cur = next
	}
	return cur, false
}

// arrayIndex reads a segment of decimal digits as an array index.
func arrayIndex(seg string) (int, bool) {
	if seg == "" || len(seg) > 9 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
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
