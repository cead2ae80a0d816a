package dedup

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/pgtest"
)

var _ store = (*Cache)(nil)

func TestCacheOverMemory(t *testing.T) {
	m := NewMemory()
	t.Cleanup(func() { _ = m.Close() })
	testStore(t, NewCache(m, CacheConfig{Size: 1000}))
}

func TestCacheOverPostgres(t *testing.T) {
	testStore(t, NewCache(openPostgres(t, nil, PostgresConfig{}), CacheConfig{Size: 1000}))
}

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
func completed(t *testing.T, s store, key string) {
	t.Helper()
	c, _ := mustClaim(t, s, key, lease)
	if err := s.Complete(context.Background(), c, replayed, keep); err != nil {
		t.Fatal(err)
	}
}

// TestCacheAnswersDuringOutage checks a cached duplicate is answered with
// the database stopped, and anything not cached is the store's error.
func TestCacheAnswersDuringOutage(t *testing.T) {
	srv := pgtest.New(t)
	c := NewCache(openPostgres(t, srv, PostgresConfig{}), CacheConfig{Size: 10})
	completed(t, c, "done")
	srv.Stop()
	ctx := context.Background()
	cl, rec, err := c.Claim(ctx, "done", lease)
	if err != nil || cl != (Claim{}) || rec.State != Completed || rec.Result.Status != replayed.Status {
		t.Errorf("Claim of a cached key during the outage = %+v, %v, %v; want the completed record", cl, rec.State, err)
	}
	if rec, err := c.Lookup(ctx, "done"); err != nil || rec.State != Completed {
		t.Errorf("Lookup of a cached key during the outage = %v, %v; want completed", rec.State, err)
	}
	if _, _, err := c.Claim(ctx, "new", lease); err == nil {
		t.Error("Claim of an uncached key during the outage succeeded")
	}
}

func TestCacheForgetClearsEntry(t *testing.T) {
	c := NewCache(openPostgres(t, nil, PostgresConfig{}), CacheConfig{Size: 10})
	completed(t, c, "k")
	if had, err := c.Forget(context.Background(), "k"); err != nil || !had {
		t.Fatalf("Forget = %v, %v", had, err)
	}
	if _, rec := mustClaim(t, c, "k", lease); rec.State != Absent {
		t.Errorf("Claim after Forget: %v, want absent", rec.State)
	}
}

// TestCacheTTL checks an entry is dropped after TTL, so that a forget
// made through another process (here: straight in the store) is seen.
func TestCacheTTL(t *testing.T) {
	clk := &clock{now: time.Now()}
	var hits atomic.Int64
	pg := openPostgres(t, nil, PostgresConfig{})
	c := NewCache(pg, CacheConfig{Size: 10, TTL: time.Minute, Now: clk.Now, Hit: func() { hits.Add(1) }})
	completed(t, c, "k")
	if _, err := pg.Forget(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	clk.add(59 * time.Second)
	if _, rec, _ := c.Claim(context.Background(), "k", lease); rec.State != Completed || hits.Load() != 1 {
		t.Fatalf("within CACHE_TTL: %v after %d hits, want the cached record", rec.State, hits.Load())
	}
	clk.add(time.Second)
	if _, rec := mustClaim(t, c, "k", lease); rec.State != Absent {
		t.Errorf("after CACHE_TTL: %v, want the store's answer (absent)", rec.State)
	}
}

// TestCacheBounded checks the least recently used entry goes first, and
// that only completed records are kept.
func TestCacheBounded(t *testing.T) {
	var hits atomic.Int64
	m := NewMemory()
	t.Cleanup(func() { _ = m.Close() })
	c := NewCache(m, CacheConfig{Size: 2, Hit: func() { hits.Add(1) }})
	ctx := context.Background()
	completed(t, c, "a")
	completed(t, c, "b")
	if _, err := c.Lookup(ctx, "a"); err != nil { // a is now the most recent
		t.Fatal(err)
	}
	completed(t, c, "c") // evicts b
	mustClaim(t, c, "in-flight", lease)
	hits.Store(0)
	for _, key := range []string{"c", "a", "b", "in-flight"} { // b last: looked up, it is cached again
		if _, err := c.Lookup(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if got := hits.Load(); got != 2 {
		t.Errorf("%d of c, a, b (evicted), in-flight answered from the cache, want 2", got)
	}
	if c.lru.Len() != 2 || len(c.entries) != 2 {
		t.Errorf("cache holds %d entries (%d indexed), want 2", c.lru.Len(), len(c.entries))
	}
	if _, ok := c.entries["in-flight"]; ok {
		t.Error("an in-flight record was cached")
	}
	if _, err := c.Lookup(ctx, "nothing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup of an unknown key = %v, want ErrNotFound", err)
	}
}

// TestCachedQueueOverPostgres runs both suites against the cache in front
// of PostgreSQL's records and queue.
func TestCachedQueueOverPostgres(t *testing.T) {
	testQueue(t, func(t *testing.T) (queueStore, func() queueStore) {
		url := postgres.Get(t).NewDatabase(t)
		s := NewCachedQueue(openPostgres(t, nil, PostgresConfig{URL: url}), CacheConfig{Size: 1000})
		return s, func() queueStore {
			return NewCachedQueue(openPostgres(t, nil, PostgresConfig{URL: url}), CacheConfig{Size: 1000})
		}
	})
}

// TestCachedQueueDuplicateDuringOutage checks a duplicate of an async
// event that was delivered is answered from the cache with the database
// stopped.
func TestCachedQueueDuplicateDuringOutage(t *testing.T) {
	srv := pgtest.New(t)
	c := NewCachedQueue(openPostgres(t, srv, PostgresConfig{}), CacheConfig{Size: 10})
	mustEnqueue(t, c, "k")
	d := takeOne(t, c, lease)
	if err := c.Succeed(context.Background(), d, replayed, keep); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	won, rec, err := c.Enqueue(context.Background(), "k", queueReq)
	if err != nil || won || rec.State != Completed || rec.Delivery.Attempts != 1 {
		t.Errorf("Enqueue of a delivered event during the outage = %v, %+v, %v; want the completed record", won, rec, err)
	}
}
