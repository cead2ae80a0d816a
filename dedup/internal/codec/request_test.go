package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

func TestRequestRoundTrip(t *testing.T) {
	for _, r := range storetest.Requests {
		v := EncodeRequest(r)
		got, err := DecodeRequest(v)
		if err != nil {
			t.Fatalf("decode %+v: %v", r, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("round trip: got %+v, want %+v", got, r)
		}
		want := byte(requestVersion)
		if r.TraceParent == "" {
			want = requestVersionV2 // what releases before tracing read
		}
		if v[0] != want {
			t.Errorf("written as version %d, want %d", v[0], want)
		}
		if again := EncodeRequest(got); !bytes.Equal(again, v) {
			t.Errorf("re-encoding changed the bytes: %x, then %x", v, again)
		}
		v[len(v)-1] ^= 0xff // the decoded request shares nothing with v
		if !reflect.DeepEqual(got, r) {
			t.Errorf("decoded request changed with the stored bytes")
		}
	}
}

// TestDecodeOlderRequests reads requests queued by versions that kept less:
// the request is whole, what its version did not keep empty.
func TestDecodeOlderRequests(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version byte
		// settled: the version keeps Route, Namespace and TTL.
		settled bool
	}{
		{"version 1, before the settlement", requestVersionV1, false},
		{"version 2, before the trace context", requestVersionV2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := storetest.Requests[2]
			b := []byte{tc.version, 0}
			for _, s := range []string{want.Method, want.RequestURI, want.Host, want.RemoteAddr} {
				b = AppendString(b, s)
			}
			if tc.settled {
				b = AppendString(AppendString(b, want.Route), want.Namespace)
				b = binary.AppendUvarint(b, uint64(want.TTL.Milliseconds()))
			} else {
				want.Route, want.Namespace, want.TTL = "", "", 0
			}
			b = append(b, 1)
			b = AppendString(b, "x-not-canonical")
			b = append(b, 1)
			b = AppendString(b, "v")
			b = append(b, want.Body...)
			got, err := DecodeRequest(b)
			if err != nil {
				t.Fatal(err)
			}
			want.TraceParent = ""
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestDecodeRequestRejects(t *testing.T) {
	good := EncodeRequest(storetest.Request)
	for _, tc := range []struct {
		name string
		v    []byte
	}{
		{"empty", nil},
		{"version only", []byte{requestVersion}},
		{"unknown version", append([]byte{0x7f}, good[1:]...)},
		{"unknown flag", append([]byte{requestVersion, 0x02}, good[2:]...)},
		{"method past the end", []byte{requestVersion, 0, 9, 'P'}},
		{"unterminated length", []byte{requestVersion, 0, 0xff}},
		{"header count past the end", []byte{requestVersion, 0, 0, 0, 0, 0, 0x7f}},
		{"value count past the end", []byte{requestVersion, 0, 0, 0, 0, 0, 1, 1, 'X', 0x7f}},
		{"header twice", []byte{requestVersion, 0, 0, 0, 0, 0, 2, 1, 'X', 0, 1, 'X', 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r, err := DecodeRequest(tc.v); !errors.Is(err, ErrBadRequest) {
				t.Errorf("decodeRequest = %+v, %v; want errBadRequest", r, err)
			}
		})
	}
}

// FuzzDecodeRequest feeds arbitrary bytes to the decoder of stored
// requests: it must never panic, and what it accepts must encode back to
// a value that decodes the same.
func FuzzDecodeRequest(f *testing.F) {
	for _, r := range storetest.Requests {
		f.Add(EncodeRequest(r))
	}
	f.Add([]byte{requestVersion, 0})
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := DecodeRequest(v)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v is not errBadRequest", err)
			}
			return
		}
		again, err := DecodeRequest(EncodeRequest(r))
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", r, err)
		}
		if !reflect.DeepEqual(again, r) {
			t.Fatalf("re-encoded %+v, decoded %+v", r, again)
		}
	})
}
