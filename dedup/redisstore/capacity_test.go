package redisstore

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

var capacity = flag.Int("capacity", 10_000,
	"completed records TestRecordMemory writes to measure Redis memory per record (docs/performance.md's figure: -capacity=100000)")

// Bounds on the memory one completed record costs in Redis, key included,
// for a 49-byte key (measured on Redis 7.0, docs/performance.md).
// Crossing them means the record or its encoding grew: a binary value past
// 12 bytes, say, takes the next allocation class up, and a compact one
// that Redis no longer reads as an integer takes 32 bytes more.
const (
	// maxMemoryUsage is MEMORY USAGE of one key, by form.
	maxMemoryUsageBinary, maxMemoryUsageCompact = 128, 104
	// maxOverFloor bounds INFO memory's used_memory growth per record
	// above the floor's (the same keys holding "1" with the same TTL), by
	// form; the keyspace's and the expiry table's share of the growth
	// (which depends on where the count falls between powers of two) is
	// the same in both, and so cancels out.
	maxOverFloorBinary, maxOverFloorCompact = 34, 16
)

// TestRecordMemory writes completed records as the proxy does (claim, then
// complete with a 4-day TTL, keys shaped like Stripe's), in each form, to
// a fresh redis-server, and measures what each costs: MEMORY USAGE of a
// sample key, and the growth of used_memory (less the clients' buffers)
// divided by the number of records, against the floor under it: the same
// keys holding "1" with the same TTL.
func TestRecordMemory(t *testing.T) {
	n := *capacity
	for _, tc := range []struct {
		name         string
		compact      bool
		maxUsage     int64
		maxOverFloor float64
	}{
		{"binary (12 bytes, the default)", false, maxMemoryUsageBinary, maxOverFloorBinary},
		{"compact (REDIS_COMPACT_RECORDS)", true, maxMemoryUsageCompact, maxOverFloorCompact},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.New(t)
			s, err := Open(Config{URL: srv.URL(), CompactRecords: tc.compact})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = raw.Close() })
			ctx := context.Background()
			keyOf, elapsed := storetest.WriteCompleted(t, s, n)
			if t.Failed() {
				return
			}
			if got := raw.DBSize(ctx).Val(); got != int64(n) {
				t.Fatalf("DBSIZE = %d, want %d", got, n)
			}
			sample := keyOf(n / 2)
			usage, err := raw.MemoryUsage(ctx, sample, 0).Result()
			if err != nil {
				t.Fatal(err)
			}
			enc := raw.ObjectEncoding(ctx, sample).Val()
			vlen := raw.StrLen(ctx, sample).Val()
			after, empty := usedMemory(t, raw), flushedMemory(t, raw)
			perRecord := float64(after-empty) / float64(n)
			floor := bareKeyMemory(t, raw, n, keyOf)
			summary := fmt.Sprintf("redis memory per completed record, %s: MEMORY USAGE %d bytes (%d-byte key, %d-byte value, %s); used_memory %.1f bytes per record over %d records (%d bytes, %d once flushed, clients' buffers left out), against %.1f for the same keys holding \"1\" with the same TTL: %+.1f; written in %s",
				tc.name, usage, len(sample), vlen, enc, perRecord, n, after, empty, floor, perRecord-floor, elapsed.Round(time.Millisecond))
			t.Log(summary)
			if testing.Verbose() {
				fmt.Println(summary)
			}
			if usage > tc.maxUsage {
				t.Errorf("MEMORY USAGE of a completed record is %d bytes, want at most %d", usage, tc.maxUsage)
			}
			if perRecord-floor > tc.maxOverFloor {
				t.Errorf("used_memory grew %.1f bytes per record, %.1f above the floor's %.1f, want at most %.0f above", perRecord, perRecord-floor, floor, tc.maxOverFloor)
			}
		})
	}
}

// bareKeyMemory is the floor under a record's cost: used_memory growth per
// key, on c's emptied server (with the same clients connected as when the
// records were measured), for n of the same keys holding "1" (a shared
// integer object, no allocation of its own) with the same 4-day TTL.
func bareKeyMemory(t *testing.T, c *redis.Client, n int, keyOf func(int) string) float64 {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i += 100 {
		p := c.Pipeline()
		for j := i; j < min(i+100, n); j++ {
			p.Set(ctx, keyOf(j), "1", 96*time.Hour)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return float64(usedMemory(t, c)-flushedMemory(t, c)) / float64(n)
}

// usedMemory is INFO memory's used_memory, the bytes Redis has
// allocated, less mem_clients_normal, its clients' buffers: what the data
// takes, whatever the connections read or wrote last.
func usedMemory(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	awaitRehashed(t, c)
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_memory" && name != "mem_clients_normal") {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s %q: %v", name, v, err)
		}
		fields[name] = n
	}
	used, ok1 := fields["used_memory"]
	clients, ok2 := fields["mem_clients_normal"]
	if !ok1 || !ok2 {
		t.Fatalf("INFO memory has no used_memory or mem_clients_normal:\n%s", info)
	}
	return used - clients
}

// flushedMemory is usedMemory once every key is deleted (at once, not in
// the background): what the keys took is the difference, measured with
// the same clients connected, since each connection costs Redis more than
// the buffers INFO counts for it.
func flushedMemory(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	if err := c.Do(context.Background(), "FLUSHALL", "SYNC").Err(); err != nil {
		t.Fatal(err)
	}
	return usedMemory(t, c)
}

// awaitRehashed waits until Redis has finished growing the keyspace's and
// the expiry table's hash tables: while it moves their buckets to the
// table twice the size, a little at each command and in its periodic
// work, it holds both, which would count as much as 13 bytes per record
// more in one measurement than in another. MEMORY STATS gives each
// table's overhead, per key a fixed amount plus 8 bytes per bucket; the
// buckets of one table are a power of two, of two tables not.
func awaitRehashed(t *testing.T, c *redis.Client) {
	t.Helper()
	ctx := context.Background()
	one := func(overhead, keys int64) bool {
		for _, perKey := range []int64{24, 40} { // expiry entry; key entry and its object (Redis 7)
			if b := overhead - keys*perKey; b > 0 && b%8 == 0 && (b/8)&(b/8-1) == 0 {
				return true
			}
		}
		return false
	}
	storetest.Eventually(t, "Redis to finish rehashing its tables", func() bool {
		v, err := c.Do(ctx, "MEMORY", "STATS").Result()
		if err != nil {
			t.Fatal(err)
		}
		keys := c.DBSize(ctx).Val()
		if keys == 0 {
			return true
		}
		stats, _ := v.(map[any]any) // RESP3, as go-redis speaks
		db, ok := stats["db.0"].(map[any]any)
		if !ok {
			t.Fatalf("MEMORY STATS without db.0: %v", v)
		}
		main, _ := db["overhead.hashtable.main"].(int64)
		expires, _ := db["overhead.hashtable.expires"].(int64)
		return one(main, keys) && one(expires, keys)
	})
}
