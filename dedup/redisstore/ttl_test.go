package redisstore

import (
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// TestRecordTTLFromPTTL: the TTL a lookup or a claim reports is the PTTL
// Redis answered, read as a record's TTL is (zero: it never expires). A
// record in its last millisecond (PTTL 0) still expires: read as one that
// never does, a cache in front of the store kept it, and answered its
// duplicates, for the whole of its own TTL (a minute) after Redis had
// dropped it. The conformance run found it by chance, one run in five,
// whenever a lookup fell in that millisecond.
func TestRecordTTLFromPTTL(t *testing.T) {
	value := string(codec.EncodeCompleted(storetest.Replayed, time.Now().UnixMilli()))
	for _, tc := range []struct {
		pttl int64
		want time.Duration
	}{
		{-1, 0}, // no expiry: only a key set by hand
		{0, time.Millisecond},
		{1, time.Millisecond},
		{1500, 1500 * time.Millisecond},
	} {
		rec, err := recordWithTTL([]any{value, tc.pttl})
		if err != nil {
			t.Fatalf("PTTL %d: %v", tc.pttl, err)
		}
		if rec.State != dedup.Completed || rec.TTL != tc.want {
			t.Errorf("PTTL %d: %v with TTL %s, want completed with TTL %s", tc.pttl, rec.State, rec.TTL, tc.want)
		}
	}
}
