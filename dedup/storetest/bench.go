package storetest

import (
	"context"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// Bench measures the paths the proxy takes per request on b's store: a
// first-seen event (claim, then complete) and a duplicate of a completed
// one (claim finds the record), and, when b keeps a queue, the async
// accept path's enqueue, one at a time (serial) and from many goroutines
// at once (parallel, 64 per CPU, as a busy proxy's requests are).
// Allocations include the key's.
func Bench(b *testing.B, backend dedup.Backend) {
	b.Run("claim-complete", func(b *testing.B) { benchClaimComplete(b, backend.Store) })
	b.Run("claim-duplicate", func(b *testing.B) { benchClaimDuplicate(b, backend.Store) })
	if backend.Queue == nil {
		return
	}
	// Every run enqueues keys of its own: -count runs again on the same
	// store.
	var run atomic.Int64
	b.Run("enqueue-serial", func(b *testing.B) {
		prefix := "bench:serial:" + strconv.FormatInt(run.Add(1), 10) + ":"
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			benchEnqueue(b, backend.Queue, prefix+strconv.Itoa(i))
		}
	})
	b.Run("enqueue-parallel", func(b *testing.B) {
		prefix := "bench:parallel:" + strconv.FormatInt(run.Add(1), 10) + ":"
		var n atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(64)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				benchEnqueue(b, backend.Queue, prefix+strconv.FormatInt(n.Add(1), 10))
			}
		})
	})
}

// benchClaimComplete cycles through a fixed set of keys whose completed
// records expire after a millisecond, far sooner than the cycle comes
// back: each claim finds its key free, and the store stays the same size
// however long the benchmark runs, as a proxy's store does.
func benchClaimComplete(b *testing.B, s dedup.Store) {
	const keys = 1 << 16
	ctx := context.Background()
	res := dedup.Result{Status: 200, Fingerprint: Replayed.Fingerprint}
	buf := []byte("bench:claim-complete:")
	prefix := len(buf)
	b.ReportAllocs()
	defer reportCPU(b)()
	for i := 0; b.Loop(); i++ {
		buf = strconv.AppendInt(buf[:prefix], int64(i%keys), 10)
		c, _, err := s.Claim(ctx, string(buf), Lease)
		if err != nil {
			b.Fatal(err)
		}
		if c == (dedup.Claim{}) {
			b.Fatalf("key %s still held a cycle later", buf)
		}
		if err := s.Complete(ctx, c, res, time.Millisecond); err != nil {
			b.Fatal(err)
		}
	}
}

// benchClaimDuplicate has all goroutines claim one completed key.
func benchClaimDuplicate(b *testing.B, s dedup.Store) {
	const key = "bench:claim-duplicate"
	ctx := context.Background()
	c, _, err := s.Claim(ctx, key, Lease)
	if err != nil {
		b.Fatal(err)
	}
	if c != (dedup.Claim{}) {
		if err := s.Complete(ctx, c, dedup.Result{Status: 200, Fingerprint: Replayed.Fingerprint}, Keep); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b)()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, rec, err := s.Claim(ctx, key, Lease)
			if err != nil {
				b.Error(err)
				return
			}
			if rec.State != dedup.Completed {
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

func benchEnqueue(b *testing.B, s dedup.Queue, key string) {
	won, _, err := s.Enqueue(context.Background(), key, Request, 0)
	if err != nil {
		b.Error(err)
	} else if !won {
		b.Errorf("key %s was taken", key)
	}
}
