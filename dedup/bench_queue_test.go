package dedup

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/internal/redistest"
)

// BenchmarkEnqueue measures the async accept path's store call: a
// first-seen event claimed and queued with its request, one at a time
// (serial) and from many goroutines at once (parallel, 64 per CPU, as a
// busy proxy's requests are). On disk every call is committed and
// fsync'd before it returns; "unbatched" commits each call on its own,
// to show what sharing one commit among concurrent calls saves.
func BenchmarkEnqueue(b *testing.B) {
	for _, st := range []struct {
		name string
		open func(b *testing.B) Queue
	}{
		{"redis", func(b *testing.B) Queue { return openRedis(b, redistest.New(b)) }},
		// Without fsync: see BenchmarkStore.
		{"postgres", func(b *testing.B) Queue { return openPostgres(b, nil, PostgresConfig{}) }},
		{"disk", func(b *testing.B) Queue { return openBenchDisk(b, false) }},
		{"disk-unbatched", func(b *testing.B) Queue { return openBenchDisk(b, true) }},
	} {
		b.Run(st.name, func(b *testing.B) {
			b.Run("serial", func(b *testing.B) {
				s := st.open(b)
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					benchEnqueue(b, s, "bench:serial:"+strconv.Itoa(i))
				}
			})
			b.Run("parallel", func(b *testing.B) {
				s := st.open(b)
				var n atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(64)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						benchEnqueue(b, s, "bench:parallel:"+strconv.FormatInt(n.Add(1), 10))
					}
				})
			})
		})
	}
}

func openBenchDisk(b *testing.B, unbatched bool) *Disk {
	d, err := OpenDisk(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	d.unbatched = unbatched
	b.Cleanup(func() { _ = d.Close() })
	return d
}

func benchEnqueue(b *testing.B, s Queue, key string) {
	won, _, err := s.Enqueue(context.Background(), key, queueReq)
	if err != nil {
		b.Error(err)
	} else if !won {
		b.Errorf("key %s was taken", key)
	}
}
