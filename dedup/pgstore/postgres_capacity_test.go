package pgstore

import (
	"context"
	"flag"
	"fmt"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// maxPGBytesPerRecord bounds what one completed record costs on disk in
// PostgreSQL, table and indexes together, compacted, for a 49-byte key
// (measured: 242 bytes over 100,000 records). Crossing it means a row or
// an index grew.
const maxPGBytesPerRecord = 280

// TestPostgresRecordSize writes completed records as the proxy does (the
// records TestRecordMemory writes to Redis: -capacity of them) and
// measures the growth of pg_total_relation_size (heap, TOAST and every
// index) per record: as written (each claim's row version is left behind
// by its completion; VACUUM makes that space reusable, which is what a
// table settles at under a steady flow), and compacted (VACUUM FULL: the
// live rows alone).
var capacity = flag.Int("capacity", 10_000, "completed records TestPostgresRecordSize writes (docs/performance.md's figure: -capacity=100000)")

func TestPostgresRecordSize(t *testing.T) {
	t.Parallel()
	n := *capacity
	s := openPostgres(t, nil, Config{})
	ctx := context.Background()
	size := func() int64 {
		t.Helper()
		var b int64
		if err := s.pool.QueryRow(ctx, "SELECT pg_total_relation_size('webhook_dedup_records')").Scan(&b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	before := size()
	keyOf, elapsed := storetest.WriteCompleted(t, s, n)
	if t.Failed() {
		return
	}
	if _, err := s.pool.Exec(ctx, "VACUUM webhook_dedup_records"); err != nil {
		t.Fatal(err)
	}
	written := size()
	if _, err := s.pool.Exec(ctx, "VACUUM FULL webhook_dedup_records"); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM webhook_dedup_records").Scan(&rows); err != nil || rows != n {
		t.Fatalf("%d rows (%v), want %d", rows, err, n)
	}
	after := size()
	perRecord := float64(after-before) / float64(n)
	summary := fmt.Sprintf("postgres bytes per completed record (%d-byte key), table and indexes, over %d records: %.1f compacted (%d → %d bytes), %.1f as written; written in %s",
		len(keyOf(0)), n, perRecord, before, after, float64(written-before)/float64(n), elapsed.Round(1e6))
	t.Log(summary)
	if testing.Verbose() {
		fmt.Println(summary)
	}
	if perRecord > maxPGBytesPerRecord {
		t.Errorf("%.1f bytes per record, want at most %d", perRecord, maxPGBytesPerRecord)
	}
}
