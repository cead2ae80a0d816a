package dedup

import (
	"bytes"
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"
)

// CacheConfig configures a Cache. Zero values are documented per field.
type CacheConfig struct {
	// Size is the most records kept; the least recently used goes first.
	// Zero or less: 1.
	Size int
	// TTL is the longest a record stays cached, however long the store
	// keeps it: what a forget on another process may take to be seen
	// here. Zero: 1m.
	TTL time.Duration
	// Hit, if set, is called for each claim or lookup answered from the
	// cache (a metric). Nil: nobody is told.
	Hit func()
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
}

// Cache answers claims and lookups of recently completed events from
// process memory, in front of a durable store that stays the authority:
// only completed records are kept (a completed record never changes until
// it expires or is forgotten), each for at most CacheConfig.TTL and never
// past its own expiry, and a Forget through the cache drops its entry at
// once. Everything else goes to the store. A cached duplicate is answered
// even while the store is unreachable. It is safe for concurrent use.
type Cache struct {
	next Store
	cfg  CacheConfig

	mu      sync.Mutex
	lru     list.List // of *cacheEntry, most recently used first
	entries map[string]*list.Element
}

type cacheEntry struct {
	key string
	rec Record
	// expires is when the store's record expires; evict when the entry
	// stops being fresh, whichever comes first.
	expires, evict time.Time
}

// NewCache returns a cache of cfg.Size completed records in front of next.
func NewCache(next Store, cfg CacheConfig) *Cache {
	if cfg.Size < 1 {
		cfg.Size = 1
	}
	if cfg.TTL == 0 {
		cfg.TTL = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Cache{next: next, cfg: cfg, entries: make(map[string]*list.Element, cfg.Size)}
}

// Claim answers a cached completed key without the store; otherwise it
// claims in the store, and caches the completed record it may find.
func (c *Cache) Claim(ctx context.Context, key string, lease time.Duration) (Claim, Record, error) {
	if err := ctx.Err(); err != nil {
		return Claim{}, Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	if rec, ok := c.get(key); ok {
		return Claim{}, rec, nil
	}
	cl, rec, err := c.next.Claim(ctx, key, lease)
	if err == nil && cl == (Claim{}) {
		c.put(key, rec)
	}
	return cl, rec, err
}

// Complete completes in the store and caches the completed record.
func (c *Cache) Complete(ctx context.Context, cl Claim, res Result, ttl time.Duration) error {
	if err := c.next.Complete(ctx, cl, res, ttl); err != nil {
		return err
	}
	c.put(cl.Key, Record{State: Completed, Result: res, Since: c.cfg.Now(), TTL: ttl})
	return nil
}

// Release releases in the store (an in-flight claim is never cached).
func (c *Cache) Release(ctx context.Context, cl Claim) error { return c.next.Release(ctx, cl) }

// Lookup answers a cached completed key without the store; otherwise it
// asks the store, and caches a completed record.
func (c *Cache) Lookup(ctx context.Context, key string) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	if rec, ok := c.get(key); ok {
		return rec, nil
	}
	rec, err := c.next.Lookup(ctx, key)
	if err == nil {
		c.put(key, rec)
	}
	return rec, err
}

// Forget drops the cached entry, then forgets in the store.
func (c *Cache) Forget(ctx context.Context, key string) (bool, error) {
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		c.remove(e)
	}
	c.mu.Unlock()
	return c.next.Forget(ctx, key)
}

// Ping asks the store.
func (c *Cache) Ping(ctx context.Context) error { return c.next.Ping(ctx) }

// get returns a fresh cached record for key, its TTL counted down, with a
// body of its own.
func (c *Cache) get(key string) (Record, bool) {
	now := c.cfg.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return Record{}, false
	}
	ent := e.Value.(*cacheEntry)
	if !now.Before(ent.evict) {
		c.remove(e)
		return Record{}, false
	}
	c.lru.MoveToFront(e)
	rec := ent.rec
	rec.TTL = ent.expires.Sub(now)
	rec.Result.Body = bytes.Clone(rec.Result.Body)
	if c.cfg.Hit != nil {
		c.cfg.Hit()
	}
	return rec, true
}

// put caches rec if it is a completed record, evicting the least recently
// used entry beyond Size.
func (c *Cache) put(key string, rec Record) {
	if rec.State != Completed {
		return
	}
	now := c.cfg.Now()
	ent := &cacheEntry{key: key, rec: rec, evict: now.Add(c.cfg.TTL)}
	ent.rec.Result.Body = bytes.Clone(rec.Result.Body)
	ent.expires = ent.evict // a record without expiry (TTL 0) lives as long as the entry
	if rec.TTL > 0 {
		ent.expires = now.Add(rec.TTL)
		if ent.expires.Before(ent.evict) {
			ent.evict = ent.expires
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		e.Value = ent
		c.lru.MoveToFront(e)
		return
	}
	c.entries[key] = c.lru.PushFront(ent)
	for c.lru.Len() > c.cfg.Size {
		c.remove(c.lru.Back())
	}
}

// remove drops e; c.mu is held.
func (c *Cache) remove(e *list.Element) {
	c.lru.Remove(e)
	delete(c.entries, e.Value.(*cacheEntry).key)
}

// WithCache puts a cache of cfg.Size completed records in front of b's
// store and, when b has one, its queue: the queue stays the store's, and
// the cache also answers an enqueue of a cached completed event (a
// duplicate on an async route) and keeps what a delivery completes. The
// rest of b (its features, wake-ups, jobs and Close) is b's own.
func WithCache(b Backend, cfg CacheConfig) Backend {
	c := NewCache(b.Store, cfg)
	b.Store = c
	if b.Queue != nil {
		b.Queue = &cachedQueue{Queue: b.Queue, c: c}
	}
	return b
}

// cachedQueue is a queue whose enqueues and completions go through a
// Cache: the other calls are the queue's own.
type cachedQueue struct {
	Queue
	c *Cache
}

// Enqueue answers a cached completed key without the store; otherwise it
// enqueues in the store, and caches the completed record it may find.
func (q *cachedQueue) Enqueue(ctx context.Context, key string, req Request, maxDepth int) (bool, Record, error) {
	if err := ctx.Err(); err != nil {
		return false, Record{}, fmt.Errorf("dedup: enqueue %s: %w", key, err)
	}
	if rec, ok := q.c.get(key); ok {
		return false, rec, nil
	}
	won, rec, err := q.Queue.Enqueue(ctx, key, req, maxDepth)
	if err == nil && !won {
		q.c.put(key, rec)
	}
	return won, rec, err
}

// Succeed completes d's event in the store and caches the completed
// record.
func (q *cachedQueue) Succeed(ctx context.Context, d Delivery, res Result, ttl time.Duration) error {
	if err := q.Queue.Succeed(ctx, d, res, ttl); err != nil {
		return err
	}
	q.c.put(d.Claim.Key, Record{State: Completed, Result: res, Since: q.c.cfg.Now(), TTL: ttl, Delivery: DeliveryStatus{Attempts: d.Attempt}})
	return nil
}
