package codec

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

func TestEncodingRoundTrip(t *testing.T) {
	since := time.Unix(1_700_000_000, 0)
	fp := sha256.Sum256([]byte("b"))
	var prefix [32]byte // what a 5-byte record reads back
	copy(prefix[:], fp[:dedup.FingerprintPrefixLen])
	for _, tc := range []struct {
		name      string
		res, want dedup.Result
		size      int
	}{
		{"status only", dedup.Result{Status: 200}, dedup.Result{Status: 200}, CompletedLen},
		{"fingerprint prefix", dedup.Result{Status: 204, Fingerprint: fp}, dedup.Result{Status: 204, Fingerprint: prefix}, CompletedLen},
		{"whole fingerprint", dedup.Result{Status: 204, Fingerprint: fp, FullFingerprint: true}, dedup.Result{Status: 204, Fingerprint: fp, FullFingerprint: true}, completedFullLen},
		{"largest status", dedup.Result{Status: 65535}, dedup.Result{Status: 65535}, CompletedLen},
		{"replayed", withFull(storetest.Replayed), withFull(storetest.Replayed), completedFullLen + 1 + len(storetest.Replayed.ContentType) + len(storetest.Replayed.Body)},
		{"content type only", dedup.Result{Status: 200, ContentType: "text/plain"}, dedup.Result{Status: 200, ContentType: "text/plain"}, CompletedLen + 1 + len("text/plain")},
		{"body only", dedup.Result{Status: 200, Body: []byte("ok")}, dedup.Result{Status: 200, Body: []byte("ok")}, CompletedLen + 1 + 2},
		{"long content type", dedup.Result{Status: 200, ContentType: strings.Repeat("x", 300)}, dedup.Result{Status: 200, ContentType: strings.Repeat("x", 300)}, CompletedLen + 2 + 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := EncodeCompleted(tc.res, since.Unix())
			if len(v) != tc.size {
				t.Errorf("encoded in %d bytes, want %d", len(v), tc.size)
			}
			rec, err := DecodeRecord(string(v))
			if err != nil {
				t.Fatal(err)
			}
			want := dedup.Record{State: dedup.Completed, Result: tc.want, Since: since}
			if !reflect.DeepEqual(rec, want) {
				t.Errorf("decoded %+v, want %+v", rec, want)
			}
			if tc.res.KnownBody() && !rec.Result.SameBody(tc.res.Fingerprint) {
				t.Errorf("decoded fingerprint %x is not the same body as %x", rec.Result.Fingerprint, tc.res.Fingerprint)
			}
		})
	}
	t.Run("in flight", func(t *testing.T) {
		tok := NewToken()
		v := EncodeInFlight(tok, since.UnixMilli())
		if len(v) != InFlightLen || !bytes.HasPrefix(v, OwnerPrefix(tok)) {
			t.Errorf("encoded %x: want %d bytes starting with the owner prefix", v, InFlightLen)
		}
		rec, err := DecodeRecord(string(v))
		if err != nil {
			t.Fatal(err)
		}
		if want := (dedup.Record{State: dedup.InFlight, Since: since}); !reflect.DeepEqual(rec, want) {
			t.Errorf("decoded %+v, want %+v", rec, want)
		}
	})
}

func withFull(r dedup.Result) dedup.Result {
	r.FullFingerprint = true
	return r
}

// encodeV1 is how earlier versions wrote a completed record (tag 0x02, time
// in milliseconds, the whole SHA-256), which Redis may still hold for a
// whole retry window after an upgrade.
func encodeV1(res dedup.Result, sinceMillis int64) []byte {
	b := []byte{tagCompletedV1}
	b = binary.BigEndian.AppendUint16(b, uint16(res.Status))
	b = binary.BigEndian.AppendUint64(b, uint64(sinceMillis))
	b = append(b, res.Fingerprint[:]...)
	if res.ContentType != "" || len(res.Body) > 0 {
		b = binary.AppendUvarint(b, uint64(len(res.ContentType)))
		b = append(b, res.ContentType...)
		b = append(b, res.Body...)
	}
	return b
}

// TestDecodeEarlierRecords: records written before the compact encoding
// still read as what they held.
func TestDecodeEarlierRecords(t *testing.T) {
	since := time.UnixMilli(1_700_000_000_123)
	for _, res := range []dedup.Result{{Status: 200}, {Status: 201, Fingerprint: sha256.Sum256([]byte("x"))}, storetest.Replayed} {
		v := encodeV1(res, since.UnixMilli())
		if len(v) < completedV1Len {
			t.Fatalf("earlier record of %d bytes, want at least %d", len(v), completedV1Len)
		}
		rec, err := DecodeRecord(string(v))
		if err != nil {
			t.Fatalf("decode earlier %x: %v", v, err)
		}
		want := dedup.Record{State: dedup.Completed, Result: withFull(res), Since: since}
		if !reflect.DeepEqual(rec, want) {
			t.Errorf("decoded earlier record %+v, want %+v", rec, want)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	completed := string(EncodeCompleted(dedup.Result{Status: 200}, 1))
	for _, tc := range []struct{ name, v string }{
		{"empty", ""},
		{"unknown tag", "\x07" + completed[1:]},
		{"absent tag", "\x00" + completed[1:]},
		{"short in-flight", string(EncodeInFlight(NewToken(), 1)[:InFlightLen-1])},
		{"long in-flight", string(EncodeInFlight(NewToken(), 1)) + "x"},
		{"short completed", completed[:CompletedLen-1]},
		{"short whole-fingerprint record", string(EncodeCompleted(dedup.Result{Status: 200, FullFingerprint: true}, 1)[:completedFullLen-1])},
		{"short earlier record", string(encodeV1(dedup.Result{Status: 200}, 1)[:completedV1Len-1])},
		{"content type past the end", completed + "\x05abc"},
		{"unterminated length", completed + "\xff"},
		{"length overflow", completed + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if rec, err := DecodeRecord(tc.v); !errors.Is(err, ErrBadRecord) {
				t.Errorf("decodeRecord = %+v, %v; want errBadRecord", rec, err)
			}
		})
	}
}

// FuzzDecodeRecord feeds arbitrary values to the decoder, which reads what
// Redis holds: it must never panic, and whatever it accepts must encode
// back to a value that decodes the same.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(string(EncodeCompleted(dedup.Result{Status: 200}, 1)))
	f.Add(string(EncodeCompleted(storetest.Replayed, 1_700_000_000_000)))
	f.Add(string(EncodeCompleted(dedup.Result{Status: 200, Body: []byte("x")}, 1)))
	f.Add(string(EncodeCompleted(withFull(storetest.Replayed), 1_700_000_000)))
	f.Add(string(encodeV1(storetest.Replayed, 1_700_000_000_000)))
	f.Add(string(EncodeInFlight(NewToken(), 1_700_000_000_000)))
	f.Add("")
	f.Add("\x02")
	f.Fuzz(func(t *testing.T, v string) {
		rec, err := DecodeRecord(v)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error %v is not errBadRecord", err)
			}
			return
		}
		if rec.State != dedup.Completed {
			return
		}
		if v[0] == tagCompletedV1 {
			return // re-encoded in the current form, which keeps whole seconds
		}
		again, err := DecodeRecord(string(EncodeCompleted(rec.Result, rec.Since.Unix())))
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", rec, err)
		}
		if !reflect.DeepEqual(again, rec) {
			t.Fatalf("re-encoded %+v, decoded %+v", rec, again)
		}
	})
}
