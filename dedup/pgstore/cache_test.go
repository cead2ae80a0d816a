// The cache of completed records (CACHE_SIZE) over PostgreSQL: what it
// answers while the database is stopped, and how long it keeps an entry.

package pgstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/pgtest"
)

// clock is a settable clock for the cache's TTL.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// completed claims and completes key through s.
func completed(t *testing.T, s dedup.Store, key string) {
	t.Helper()
	c, _ := storetest.MustClaim(t, s, key, storetest.Lease)
	if err := s.Complete(context.Background(), c, storetest.Replayed, storetest.Keep); err != nil {
		t.Fatal(err)
	}
}

// TestCacheAnswersDuringOutage checks a cached duplicate is answered with
// the database stopped, and anything not cached is the store's error.
func TestCacheAnswersDuringOutage(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t)
	c := dedup.NewCache(openPostgres(t, srv, Config{}), dedup.CacheConfig{Size: 10})
	completed(t, c, "done")
	srv.Stop()
	ctx := context.Background()
	cl, rec, err := c.Claim(ctx, "done", storetest.Lease)
	if err != nil || cl != (dedup.Claim{}) || rec.State != dedup.Completed || rec.Result.Status != storetest.Replayed.Status {
		t.Errorf("Claim of a cached key during the outage = %+v, %v, %v; want the completed record", cl, rec.State, err)
	}
	if rec, err := c.Lookup(ctx, "done"); err != nil || rec.State != dedup.Completed {
		t.Errorf("Lookup of a cached key during the outage = %v, %v; want completed", rec.State, err)
	}
	if _, _, err := c.Claim(ctx, "new", storetest.Lease); err == nil {
		t.Error("Claim of an uncached key during the outage succeeded")
	}
}

func TestCacheForgetClearsEntry(t *testing.T) {
	t.Parallel()
	c := dedup.NewCache(openPostgres(t, nil, Config{}), dedup.CacheConfig{Size: 10})
	completed(t, c, "k")
	if had, err := c.Forget(context.Background(), "k"); err != nil || !had {
		t.Fatalf("Forget = %v, %v", had, err)
	}
	if _, rec := storetest.MustClaim(t, c, "k", storetest.Lease); rec.State != dedup.Absent {
		t.Errorf("Claim after Forget: %v, want absent", rec.State)
	}
}

// TestCacheTTL checks an entry is dropped after TTL, so that a forget
// made through another process (here: straight in the store) is seen.
func TestCacheTTL(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	var hits atomic.Int64
	pg := openPostgres(t, nil, Config{})
	c := dedup.NewCache(pg, dedup.CacheConfig{Size: 10, TTL: time.Minute, Now: clk.Now, Hit: func() { hits.Add(1) }})
	completed(t, c, "k")
	if _, err := pg.Forget(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	clk.add(59 * time.Second)
	if _, rec, _ := c.Claim(context.Background(), "k", storetest.Lease); rec.State != dedup.Completed || hits.Load() != 1 {
		t.Fatalf("within CACHE_TTL: %v after %d hits, want the cached record", rec.State, hits.Load())
	}
	clk.add(time.Second)
	if _, rec := storetest.MustClaim(t, c, "k", storetest.Lease); rec.State != dedup.Absent {
		t.Errorf("after CACHE_TTL: %v, want the store's answer (absent)", rec.State)
	}
}

// TestCachedQueueDuplicateDuringOutage checks a duplicate of an async
// event that was delivered is answered from the cache with the database
// stopped.
func TestCachedQueueDuplicateDuringOutage(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t)
	b := dedup.WithCache(openPostgres(t, srv, Config{}).Backend(), dedup.CacheConfig{Size: 10})
	c := b.Queue
	storetest.MustEnqueue(t, c, "k")
	d := storetest.TakeOne(t, c, storetest.Lease)
	if err := c.Succeed(context.Background(), d, storetest.Replayed, storetest.Keep); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	won, rec, err := c.Enqueue(context.Background(), "k", storetest.Request, 0)
	if err != nil || won || rec.State != dedup.Completed || rec.Delivery.Attempts != 1 {
		t.Errorf("Enqueue of a delivered event during the outage = %v, %+v, %v; want the completed record", won, rec, err)
	}
}
