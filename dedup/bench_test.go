package dedup

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/dynamotest"
	"github.com/webhook-dedup/webhook-dedup/internal/redistest"
)

// BenchmarkStore measures the two paths the proxy takes per request: a
// first-seen event (claim, then complete) and a duplicate of a completed
// one (claim finds the record). Allocations include the key's.
func BenchmarkStore(b *testing.B) {
	for _, st := range []struct {
		name string
		open func(b *testing.B) store
	}{
		{"memory", func(b *testing.B) store {
			m := NewMemory()
			b.Cleanup(func() { _ = m.Close() })
			return m
		}},
		{"redis", func(b *testing.B) store { return openRedis(b, redistest.New(b)) }},
		// dynalite, not AWS: the SDK's cost per request (allocations, CPU)
		// is real; the latency is a Node.js process on loopback, not
		// DynamoDB's.
		{"dynamodb-dynalite", func(b *testing.B) store {
			s, _ := openDynamoDB(b, dynamotest.New(b), "bench")
			return s
		}},
		// The test server runs without fsync: a commit on a real disk
		// adds its flush to claim-complete.
		{"postgres", func(b *testing.B) store { return openPostgres(b, nil, PostgresConfig{}) }},
		// The cache answers duplicates of completed events from memory.
		{"redis+cache", func(b *testing.B) store {
			return NewCache(openRedis(b, redistest.New(b)), CacheConfig{Size: 10000})
		}},
		{"postgres+cache", func(b *testing.B) store {
			return NewCache(openPostgres(b, nil, PostgresConfig{}), CacheConfig{Size: 10000})
		}},
	} {
		b.Run(st.name, func(b *testing.B) {
			s := st.open(b)
			b.Run("claim-complete", func(b *testing.B) { benchClaimComplete(b, s) })
			b.Run("claim-duplicate", func(b *testing.B) { benchClaimDuplicate(b, s) })
		})
	}
}

// benchClaimComplete cycles through a fixed set of keys whose completed
// records expire after a millisecond, far sooner than the cycle comes
// back: each claim finds its key free, and the store stays the same size
// however long the benchmark runs, as a proxy's store does.
func benchClaimComplete(b *testing.B, s store) {
	const keys = 1 << 16
	ctx := context.Background()
	res := Result{Status: 200, Fingerprint: replayed.Fingerprint}
	buf := []byte("bench:claim-complete:")
	prefix := len(buf)
	b.ReportAllocs()
	defer reportCPU(b)()
	for i := 0; b.Loop(); i++ {
		buf = strconv.AppendInt(buf[:prefix], int64(i%keys), 10)
		c, _, err := s.Claim(ctx, string(buf), lease)
		if err != nil {
			b.Fatal(err)
		}
		if c == (Claim{}) {
			b.Fatalf("key %s still held a cycle later", buf)
		}
		if err := s.Complete(ctx, c, res, time.Millisecond); err != nil {
			b.Fatal(err)
		}
	}
}

// benchClaimDuplicate has all goroutines claim one completed key.
func benchClaimDuplicate(b *testing.B, s store) {
	const key = "bench:claim-duplicate"
	ctx := context.Background()
	c, _, err := s.Claim(ctx, key, lease)
	if err != nil {
		b.Fatal(err)
	}
	if c != (Claim{}) {
		if err := s.Complete(ctx, c, Result{Status: 200, Fingerprint: replayed.Fingerprint}, keep); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b)()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, rec, err := s.Claim(ctx, key, lease)
			if err != nil {
				b.Error(err)
				return
			}
			if rec.State != Completed {
				b.Errorf("duplicate found %v, want completed", rec.State)
				return
			}
		}
	})
}

// reportCPU measures, until the function it returns is called, this
// process's CPU time (user and system) per operation, as cpu-ns/op: the
// client's cost of a request, which ns/op hides when the time is spent
// waiting for a store server (whose CPU, in another process, is not
// counted).
func reportCPU(b *testing.B) func() {
	start := cpuTime(b)
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
