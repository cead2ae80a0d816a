package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// A queued Request is stored as one binary value, written once at Enqueue
// and read at every Take. Strings are a uvarint length and the bytes:
//
//	[0]   version 0x03
//	[1]   flags: bit 0 set if the request came over TLS
//	      Method, RequestURI, Host, RemoteAddr: four strings
//	      Route, Namespace: two strings; TTL: uvarint milliseconds
//	      TraceParent: a string
//	      uvarint number of header names, then for each: the name, a
//	      uvarint number of values, and the values
//	      Body: the rest, to the end
//
// Older versions are still read, what they lack left empty: 0x02,
// written before the request carried the accepting span's trace context,
// is the same without TraceParent; 0x01, written before it carried how it
// is settled, is also without Route, Namespace and TTL. A request without
// a TraceParent (tracing off) is still written as 0x02, so that, while
// tracing stays off, a release from before tracing reads what this one
// queued: a rolling upgrade, or a roll back, strands no queued event.
//
// Header names are kept as received (canonical or not) and in the sorted
// order of their names, so one request always encodes to the same bytes.
const (
	requestVersion   = 0x03
	requestVersionV2 = 0x02
	requestVersionV1 = 0x01
)

// ErrBadRequest means a stored request is not one this package wrote.
var ErrBadRequest = errors.New("unrecognised queued request")

// EncodeRequest is the stored form of r.
func EncodeRequest(r dedup.Request) []byte {
	n := 2 + 8*binary.MaxVarintLen32 + len(r.Route) + len(r.Namespace) + len(r.TraceParent) + len(r.Method) + len(r.RequestURI) + len(r.Host) + len(r.RemoteAddr) + binary.MaxVarintLen32 + len(r.Body)
	n += headerLen(r.Header)
	b := make([]byte, 0, n)
	var flags byte
	if r.TLS {
		flags |= 1
	}
	version := byte(requestVersion)
	if r.TraceParent == "" {
		version = requestVersionV2
	}
	b = append(b, version, flags)
	for _, s := range []string{r.Method, r.RequestURI, r.Host, r.RemoteAddr, r.Route, r.Namespace} {
		b = AppendString(b, s)
	}
	b = binary.AppendUvarint(b, uint64(max(r.TTL, 0).Milliseconds()))
	if version == requestVersion {
		b = AppendString(b, r.TraceParent)
	}
	b = AppendHeader(b, r.Header)
	return append(b, r.Body...)
}

func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// DecodeRequest reads a stored request. The Request it returns shares no
// memory with v.
func DecodeRequest(v []byte) (dedup.Request, error) {
	if len(v) < 2 || v[0] < requestVersionV1 || v[0] > requestVersion {
		return dedup.Request{}, fmt.Errorf("%w: bad version", ErrBadRequest)
	}
	if v[1]&^1 != 0 {
		return dedup.Request{}, fmt.Errorf("%w: unknown flags 0x%02x", ErrBadRequest, v[1])
	}
	r := dedup.Request{TLS: v[1]&1 != 0}
	d := Decoder{Rest: v[2:]}
	r.Method = d.Text()
	r.RequestURI = d.Text()
	r.Host = d.Text()
	r.RemoteAddr = d.Text()
	if v[0] >= requestVersionV2 {
		r.Route = d.Text()
		r.Namespace = d.Text()
		ms := d.Uvarint()
		if ms > uint64(math.MaxInt64/int64(time.Millisecond)) {
			return dedup.Request{}, fmt.Errorf("%w: TTL of %d ms", ErrBadRequest, ms)
		}
		r.TTL = time.Duration(ms) * time.Millisecond
	}
	if v[0] >= requestVersion {
		r.TraceParent = d.Text()
	}
	r.Header = d.Header()
	if d.Err != nil {
		return dedup.Request{}, d.Err
	}
	if len(d.Rest) > 0 {
		r.Body = append([]byte(nil), d.Rest...)
	}
	return r, nil
}

// headerLen is about what AppendHeader adds for h, at most.
func headerLen(h http.Header) int {
	n := binary.MaxVarintLen32
	for name, vs := range h {
		n += 2*binary.MaxVarintLen32 + len(name)
		for _, v := range vs {
			n += binary.MaxVarintLen32 + len(v)
		}
	}
	return n
}

// AppendHeader appends h's stored form to b: a uvarint number of names,
// then for each, in the sorted order of the names (so one header always
// encodes to the same bytes), the name as received (canonical or not), a
// uvarint number of values, and the values. Every byte is kept: header
// values may hold bytes that are not UTF-8.
func AppendHeader(b []byte, h http.Header) []byte {
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = AppendString(b, name)
		vs := h[name]
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = AppendString(b, v)
		}
	}
	return b
}

// Header reads a header AppendHeader wrote: nil when it has no names.
func (d *Decoder) Header() http.Header {
	names := d.Count()
	var h http.Header
	if names > 0 {
		h = make(http.Header, names)
	}
	for range names {
		name := d.Text()
		values := d.Count()
		if d.Err != nil {
			return nil
		}
		if _, dup := h[name]; dup {
			d.Err = fmt.Errorf("%w: header %q twice", ErrBadRequest, name)
			return nil
		}
		vs := make([]string, 0, values)
		for range values {
			vs = append(vs, d.Text())
		}
		h[name] = vs
	}
	return h
}

// Decoder reads the uvarints, strings and counts of a stored value (a
// request, or a store's own record): the first error sticks and every
// later read returns a zero value.
type Decoder struct {
	// Rest is what is left to read.
	Rest []byte
	// Err is the first error met; nil while every read succeeded.
	Err error
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	if d.Err != nil {
		return 0
	}
	n, k := binary.Uvarint(d.Rest)
	if k <= 0 {
		d.Err = fmt.Errorf("%w: bad length", ErrBadRequest)
		return 0
	}
	d.Rest = d.Rest[k:]
	return n
}

// Text reads a string: its uvarint length, then its bytes.
func (d *Decoder) Text() string {
	n := d.Uvarint()
	if d.Err != nil {
		return ""
	}
	if n > uint64(len(d.Rest)) {
		d.Err = fmt.Errorf("%w: string past the end", ErrBadRequest)
		return ""
	}
	s := string(d.Rest[:n]) // a copy
	d.Rest = d.Rest[n:]
	return s
}

// Count reads a number of items that follow, each at least one byte long,
// so that a corrupt count cannot make the decoder allocate more than the
// value's size.
func (d *Decoder) Count() int {
	n := d.Uvarint()
	if d.Err == nil && n > uint64(len(d.Rest)) {
		d.Err = fmt.Errorf("%w: count %d past the end", ErrBadRequest, n)
		return 0
	}
	return int(n)
}
