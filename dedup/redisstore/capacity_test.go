package redisstore

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"

	"github.com/redis/go-redis/v9"

	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

var capacity = flag.Int("capacity", 10_000,
	"completed records TestRecordMemory writes to measure Redis memory per record (docs/performance.md's figure: -capacity=100000)")

// Bounds on the memory one completed record costs in Redis, key included,
// for a 49-byte key (measured on Redis 7.0: 120 and, over 100k records,
// 182.3 bytes; 152 and 214.5 with the 43-byte value of earlier versions).
// Crossing them means the record or its encoding grew: a value past 12
// bytes, say, takes the next allocation class up.
const (
	maxMemoryUsage = 128 // MEMORY USAGE of one key
	// maxUsedPerRecord bounds INFO memory's used_memory growth per record,
	// which also counts the keyspace's and the expiry table's buckets:
	// their share depends on where the count falls between powers of two
	// (270 bytes at 10k records).
	maxUsedPerRecord = 300
)

// TestRecordMemory writes completed records as the proxy does (claim, then
// complete with a 4-day TTL, keys shaped like Stripe's) to a fresh
// redis-server, and measures what each costs: MEMORY USAGE of a sample
// key, and the growth of used_memory divided by the number of records,
// which also counts the keyspace's and the expiry table's share.
func TestRecordMemory(t *testing.T) {
	n := *capacity
	srv := redistest.New(t)
	s := openRedis(t, srv)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = raw.Close() })
	ctx := context.Background()
	before := usedMemory(t, raw)

	keyOf, elapsed := storetest.WriteCompleted(t, s, n)
	if t.Failed() {
		return
	}
	if got := raw.DBSize(ctx).Val(); got != int64(n) {
		t.Fatalf("DBSIZE = %d, want %d", got, n)
	}
	after := usedMemory(t, raw)
	sample := keyOf(n / 2)
	usage, err := raw.MemoryUsage(ctx, sample, 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	perRecord := float64(after-before) / float64(n)
	floor := bareKeyMemory(t, n, keyOf)
	summary := fmt.Sprintf("redis memory per completed record: MEMORY USAGE %d bytes (%d-byte key, %d-byte value); used_memory %.1f bytes per record over %d records (%d → %d bytes), against %.1f for the same keys holding \"1\" with the same TTL; written in %s",
		usage, len(sample), codec.CompletedLen, perRecord, n, before, after, floor, elapsed.Round(time.Millisecond))
	t.Log(summary)
	if testing.Verbose() {
		fmt.Println(summary)
	}
	if usage > maxMemoryUsage {
		t.Errorf("MEMORY USAGE of a completed record is %d bytes, want at most %d", usage, maxMemoryUsage)
	}
	if perRecord > maxUsedPerRecord {
		t.Errorf("used_memory grew %.1f bytes per record, want at most %d", perRecord, maxUsedPerRecord)
	}
}

// bareKeyMemory is the floor under a record's cost: used_memory growth per
// key, on a fresh server, for n of the same keys holding "1" (a shared
// integer object, no allocation of its own) with the same 4-day TTL.
func bareKeyMemory(t *testing.T, n int, keyOf func(int) string) float64 {
	t.Helper()
	srv := redistest.New(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer raw.Close()
	ctx := context.Background()
	before := usedMemory(t, raw)
	for i := 0; i < n; i += 1000 {
		p := raw.Pipeline()
		for j := i; j < min(i+1000, n); j++ {
			p.Set(ctx, keyOf(j), "1", 96*time.Hour)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return float64(usedMemory(t, raw)-before) / float64(n)
}

// usedMemory is INFO memory's used_memory: the bytes Redis has allocated.
func usedMemory(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("used_memory %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatalf("INFO memory has no used_memory:\n%s", info)
	return 0
}
