package redisstore

import (
	"strconv"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// BenchmarkRedisWait measures what REDIS_WAIT_REPLICAS costs a first-seen
// event (claim, then complete; and the rest of the bench) on a master with one replica: each write
// then waits for the replica's acknowledgement.
func BenchmarkRedisWait(b *testing.B) {
	sn := redistest.NewSentinel(b, redistest.SentinelConfig{})
	for _, wait := range []int{0, 1} {
		b.Run("replicas="+strconv.Itoa(wait), func(b *testing.B) {
			s := open(b, Config{URL: sn.Servers[0].URL(), WaitReplicas: wait, WaitTimeout: ackTimeout})
			storetest.Bench(b, s.Backend())
		})
	}
}
