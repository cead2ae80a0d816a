package dedup

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestEncodingRoundTrip(t *testing.T) {
	since := time.UnixMilli(1_700_000_000_123)
	for _, tc := range []struct {
		name string
		res  Result
		size int
	}{
		{"status only", Result{Status: 200}, completedLen},
		{"fingerprint", Result{Status: 204, Fingerprint: sha256.Sum256([]byte("b"))}, completedLen},
		{"largest status", Result{Status: 65535}, completedLen},
		{"replayed", replayed, completedLen + 1 + len(replayed.ContentType) + len(replayed.Body)},
		{"content type only", Result{Status: 200, ContentType: "text/plain"}, completedLen + 1 + len("text/plain")},
		{"body only", Result{Status: 200, Body: []byte("ok")}, completedLen + 1 + 2},
		{"long content type", Result{Status: 200, ContentType: strings.Repeat("x", 300)}, completedLen + 2 + 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := encodeCompleted(tc.res, since.UnixMilli())
			if len(v) != tc.size {
				t.Errorf("encoded in %d bytes, want %d", len(v), tc.size)
			}
			rec, err := decodeRecord(string(v))
			if err != nil {
				t.Fatal(err)
			}
			want := Record{State: Completed, Result: tc.res, Since: since}
			if !reflect.DeepEqual(rec, want) {
				t.Errorf("decoded %+v, want %+v", rec, want)
			}
		})
	}
	t.Run("in flight", func(t *testing.T) {
		tok := newToken()
		v := encodeInFlight(tok, since.UnixMilli())
		if len(v) != inFlightLen || !bytes.HasPrefix(v, ownerPrefix(tok)) {
			t.Errorf("encoded %x: want %d bytes starting with the owner prefix", v, inFlightLen)
		}
		rec, err := decodeRecord(string(v))
		if err != nil {
			t.Fatal(err)
		}
		if want := (Record{State: InFlight, Since: since}); !reflect.DeepEqual(rec, want) {
			t.Errorf("decoded %+v, want %+v", rec, want)
		}
	})
}

func TestDecodeRejects(t *testing.T) {
	completed := string(encodeCompleted(Result{Status: 200}, 1))
	for _, tc := range []struct{ name, v string }{
		{"empty", ""},
		{"unknown tag", "\x07" + completed[1:]},
		{"absent tag", "\x00" + completed[1:]},
		{"short in-flight", string(encodeInFlight(newToken(), 1)[:inFlightLen-1])},
		{"long in-flight", string(encodeInFlight(newToken(), 1)) + "x"},
		{"short completed", completed[:completedLen-1]},
		{"content type past the end", completed + "\x05abc"},
		{"unterminated length", completed + "\xff"},
		{"length overflow", completed + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if rec, err := decodeRecord(tc.v); !errors.Is(err, errBadRecord) {
				t.Errorf("decodeRecord = %+v, %v; want errBadRecord", rec, err)
			}
		})
	}
}

// FuzzDecodeRecord feeds arbitrary values to the decoder, which reads what
// Redis holds: it must never panic, and whatever it accepts must encode
// back to a value that decodes the same.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(string(encodeCompleted(Result{Status: 200}, 1)))
	f.Add(string(encodeCompleted(replayed, 1_700_000_000_000)))
	f.Add(string(encodeCompleted(Result{Status: 200, Body: []byte("x")}, -1)))
	f.Add(string(encodeInFlight(newToken(), 1_700_000_000_000)))
	f.Add("")
	f.Add("\x02")
	f.Fuzz(func(t *testing.T, v string) {
		rec, err := decodeRecord(v)
		if err != nil {
			if !errors.Is(err, errBadRecord) {
				t.Fatalf("error %v is not errBadRecord", err)
			}
			return
		}
		if rec.State != Completed {
			return
		}
		again, err := decodeRecord(string(encodeCompleted(rec.Result, rec.Since.UnixMilli())))
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", rec, err)
		}
		if !reflect.DeepEqual(again, rec) {
			t.Fatalf("re-encoded %+v, decoded %+v", rec, again)
		}
	})
}
