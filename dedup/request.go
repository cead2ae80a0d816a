package dedup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
)

// A queued Request is stored as one binary value, written once at Enqueue
// and read at every Take. Strings are a uvarint length and the bytes:
//
//	[0]   version 0x01
//	[1]   flags: bit 0 set if the request came over TLS
//	      Method, RequestURI, Host, RemoteAddr: four strings
//	      uvarint number of header names, then for each: the name, a
//	      uvarint number of values, and the values
//	      Body: the rest, to the end
//
// Header names are kept as received (canonical or not) and in the sorted
// order of their names, so one request always encodes to the same bytes.
const requestVersion = 0x01

// errBadRequest means a stored request is not one this package wrote.
var errBadRequest = errors.New("unrecognised queued request")

// encodeRequest is the stored form of r.
func encodeRequest(r Request) []byte {
	n := 2 + 4*binary.MaxVarintLen32 + len(r.Method) + len(r.RequestURI) + len(r.Host) + len(r.RemoteAddr) + binary.MaxVarintLen32 + len(r.Body)
	names := make([]string, 0, len(r.Header))
	for name, vs := range r.Header {
		names = append(names, name)
		n += 2*binary.MaxVarintLen32 + len(name)
		for _, v := range vs {
			n += binary.MaxVarintLen32 + len(v)
		}
	}
	slices.Sort(names)
	b := make([]byte, 0, n)
	var flags byte
	if r.TLS {
		flags |= 1
	}
	b = append(b, requestVersion, flags)
	for _, s := range []string{r.Method, r.RequestURI, r.Host, r.RemoteAddr} {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = appendString(b, name)
		vs := r.Header[name]
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return append(b, r.Body...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeRequest reads a stored request. The Request it returns shares no
// memory with v.
func decodeRequest(v []byte) (Request, error) {
	if len(v) < 2 || v[0] != requestVersion {
		return Request{}, fmt.Errorf("%w: bad version", errBadRequest)
	}
	if v[1]&^1 != 0 {
		return Request{}, fmt.Errorf("%w: unknown flags 0x%02x", errBadRequest, v[1])
	}
	r := Request{TLS: v[1]&1 != 0}
	d := decoder{rest: v[2:]}
	r.Method = d.string()
	r.RequestURI = d.string()
	r.Host = d.string()
	r.RemoteAddr = d.string()
	names := d.count()
	if names > 0 {
		r.Header = make(http.Header, names)
	}
	for range names {
		name := d.string()
		values := d.count()
		if d.err != nil {
			break
		}
		if _, dup := r.Header[name]; dup {
			return Request{}, fmt.Errorf("%w: header %q twice", errBadRequest, name)
		}
		vs := make([]string, 0, values)
		for range values {
			vs = append(vs, d.string())
		}
		r.Header[name] = vs
	}
	if d.err != nil {
		return Request{}, d.err
	}
	if len(d.rest) > 0 {
		r.Body = append([]byte(nil), d.rest...)
	}
	return r, nil
}

// decoder reads the strings and counts of a stored request; the first
// error sticks and every later read returns a zero value.
type decoder struct {
	rest []byte
	err  error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	n, k := binary.Uvarint(d.rest)
	if k <= 0 {
		d.err = fmt.Errorf("%w: bad length", errBadRequest)
		return 0
	}
	d.rest = d.rest[k:]
	return n
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.rest)) {
		d.err = fmt.Errorf("%w: string past the end", errBadRequest)
		return ""
	}
	s := string(d.rest[:n]) // a copy
	d.rest = d.rest[n:]
	return s
}

// count reads a number of items that follow, each at least one byte long,
// so that a corrupt count cannot make the decoder allocate more than the
// value's size.
func (d *decoder) count() int {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.rest)) {
		d.err = fmt.Errorf("%w: count %d past the end", errBadRequest, n)
		return 0
	}
	return int(n)
}
