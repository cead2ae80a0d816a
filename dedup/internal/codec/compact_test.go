package codec

import (
	"crypto/sha256"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// TestCompactRoundTrip: every status and fingerprint the compact form
// takes reads back, in at most 20 decimal digits Redis keeps as an integer,
// with its completion time placed right from any reader's clock within the
// TTL after it, or a little before it.
func TestCompactRoundTrip(t *testing.T) {
	fp := sha256.Sum256([]byte("b"))
	var prefix [32]byte // what a 5-byte record reads back
	copy(prefix[:], fp[:dedup.FingerprintPrefixLen])
	ones := [32]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	var onesPrefix [32]byte
	copy(onesPrefix[:], ones[:dedup.FingerprintPrefixLen])
	maxTTL := int64(CompactMaxTTL / time.Second)
	for _, tc := range []struct {
		name      string
		res, want dedup.Result
		since     int64
	}{
		{"200 without fingerprint", dedup.Result{Status: 200}, dedup.Result{Status: 200}, 1_700_000_000},
		{"201", dedup.Result{Status: 201, Fingerprint: fp}, dedup.Result{Status: 201, Fingerprint: prefix}, 1_700_000_000},
		{"202", dedup.Result{Status: 202, Fingerprint: fp}, dedup.Result{Status: 202, Fingerprint: prefix}, 1_800_000_001},
		{"204, all ones", dedup.Result{Status: 204, Fingerprint: ones}, dedup.Result{Status: 204, Fingerprint: onesPrefix}, 4_000_000_000},
		{"top bit set (negative)", dedup.Result{Status: 204, Fingerprint: fp}, dedup.Result{Status: 204, Fingerprint: prefix}, compactWindow - 1},
		{"window start", dedup.Result{Status: 203, Fingerprint: fp}, dedup.Result{Status: 203, Fingerprint: prefix}, 3 * compactWindow},
		{"time zero", dedup.Result{Status: 200, Fingerprint: fp}, dedup.Result{Status: 200, Fingerprint: prefix}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, ok := EncodeCompact(tc.res, tc.since, CompactMaxTTL)
			if !ok {
				t.Fatal("no compact form")
			}
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil || strconv.FormatInt(n, 10) != string(v) || len(v) > 20 {
				t.Fatalf("encoded %q: not a canonical 64-bit integer Redis keeps as one", v)
			}
			for _, age := range []int64{0, 1, 3600, maxTTL, maxTTL + 86399, -1, -compactAhead} {
				rec, err := DecodeRecordAt(string(v), tc.since+age)
				if err != nil {
					t.Fatalf("age %d: %v", age, err)
				}
				want := dedup.Record{State: dedup.Completed, Result: tc.want, Since: time.Unix(tc.since, 0)}
				if !reflect.DeepEqual(rec, want) {
					t.Errorf("read %ds later: %+v, want %+v", age, rec, want)
				}
				if tc.res.KnownBody() && !rec.Result.SameBody(tc.res.Fingerprint) {
					t.Errorf("decoded fingerprint %x is not the same body as %x", rec.Result.Fingerprint, tc.res.Fingerprint)
				}
			}
		})
	}
}

// TestCompactRefused: what the compact form cannot hold takes the binary
// form, which DecodeRecordAt reads as DecodeRecord does.
func TestCompactRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  dedup.Result
		ttl  time.Duration
	}{
		{"status below 200", dedup.Result{Status: 199}, time.Hour},
		{"status 205", dedup.Result{Status: 205}, time.Hour},
		{"status 0", dedup.Result{}, time.Hour},
		{"whole fingerprint", dedup.Result{Status: 200, FullFingerprint: true}, time.Hour},
		{"replayed", storetest.Replayed, time.Hour},
		{"content type", dedup.Result{Status: 200, ContentType: "text/plain"}, time.Hour},
		{"TTL beyond the window", dedup.Result{Status: 200}, CompactMaxTTL + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if v, ok := EncodeCompact(tc.res, 1_700_000_000, tc.ttl); ok {
				t.Fatalf("compact form %q, want none", v)
			}
			v := EncodeCompleted(tc.res, 1_700_000_000)
			rec, err := DecodeRecordAt(string(v), 1_700_000_100)
			if err != nil {
				t.Fatal(err)
			}
			if rec.State != dedup.Completed || rec.Result.Status != tc.res.Status || rec.Since != time.Unix(1_700_000_000, 0) {
				t.Errorf("binary form read as %+v", rec)
			}
		})
	}
}

// TestCompactBad: decimal values the compact form never writes are
// ErrBadRecord, never a record.
func TestCompactBad(t *testing.T) {
	hi := uint64(compactStatuses * compactWindow) // the first time past the window
	outOfWindow := strconv.FormatInt(int64(hi<<fpBits), 10)
	for _, v := range []string{"007", "-0", "12a", "99999999999999999999", "-", "1 ", outOfWindow} {
		if rec, err := DecodeRecordAt(v, 1_700_000_000); !errors.Is(err, ErrBadRecord) {
			t.Errorf("DecodeRecordAt(%q) = %+v, %v; want ErrBadRecord", v, rec, err)
		}
	}
}
