package dedup_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// TestCache runs the conformance suite through the cache, over the
// in-memory store (each store's own tests run it over that store too).
func TestCache(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (dedup.Backend, func() dedup.Backend) {
		m := memstore.New()
		t.Cleanup(func() { _ = m.Close() })
		return dedup.WithCache(m.Backend(), dedup.CacheConfig{Size: 1000}), nil
	})
}

// completed claims and completes key through s.
func completed(t *testing.T, s dedup.Store, key string) {
	t.Helper()
	c, _ := storetest.MustClaim(t, s, key, storetest.Lease)
	if err := s.Complete(context.Background(), c, storetest.Replayed, storetest.Keep); err != nil {
		t.Fatal(err)
	}
}

// TestCacheBounded checks the least recently used entry goes first, and
// that only completed records are kept.
func TestCacheBounded(t *testing.T) {
	var hits atomic.Int64
	m := memstore.New()
	t.Cleanup(func() { _ = m.Close() })
	c := dedup.NewCache(m, dedup.CacheConfig{Size: 2, Hit: func() { hits.Add(1) }})
	ctx := context.Background()
	completed(t, c, "a")
	completed(t, c, "b")
	if _, err := c.Lookup(ctx, "a"); err != nil { // a is now the most recent
		t.Fatal(err)
	}
	completed(t, c, "c") // evicts b
	storetest.MustClaim(t, c, "in-flight", storetest.Lease)
	hits.Store(0)
	// b last: looked up, it is cached again. The in-flight record is
	// never cached: not a hit.
	for _, key := range []string{"c", "a", "b", "in-flight"} {
		if _, err := c.Lookup(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if got := hits.Load(); got != 2 {
		t.Errorf("%d of c, a, b (evicted), in-flight answered from the cache, want 2", got)
	}
	if _, err := c.Lookup(ctx, "nothing"); !errors.Is(err, dedup.ErrNotFound) {
		t.Errorf("Lookup of an unknown key = %v, want dedup.ErrNotFound", err)
	}
}
