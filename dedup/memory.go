package dedup

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"sync"
	"time"
)

// memoryShards splits the map so that concurrent requests for different
// event IDs rarely wait on the same lock.
const memoryShards = 32

// janitorInterval is how often NewMemory's janitor purges expired records.
// Expired records are invisible at once; purging only bounds memory.
const janitorInterval = 10 * time.Second

// Memory is a store kept in this process: the same semantics as Redis,
// for a single replica. It is safe for concurrent use.
type Memory struct {
	seed   maphash.Seed
	shards [memoryShards]memoryShard

	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the janitor has returned
	closeOnce sync.Once
}

type memoryShard struct {
	mu sync.Mutex
	m  map[string]memoryEntry
	_  [48]byte // keeps each lock on its own cache line
}

// memoryEntry is one record. Its Body is owned by the store: copied on the
// way in and on the way out.
type memoryEntry struct {
	state   State
	token   [tokenLen]byte // the owner's, while in flight
	since   int64          // unix milliseconds, as in Redis
	expires time.Time      // monotonic
	result  Result
}

// NewMemory returns an empty store and starts its janitor, which Close
// stops.
func NewMemory() *Memory { return newMemory(janitorInterval) }

func newMemory(every time.Duration) *Memory {
	m := &Memory{
		seed: maphash.MakeSeed(),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	for i := range m.shards {
		m.shards[i].m = make(map[string]memoryEntry)
	}
	go m.janitor(every)
	return m
}

// Close stops the janitor. The store keeps working (expired records stay
// invisible but are no longer purged). Close may be called more than once.
func (m *Memory) Close() error {
	m.closeOnce.Do(func() { close(m.stop) })
	<-m.done
	return nil
}

func (m *Memory) janitor(every time.Duration) {
	defer close(m.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.purge()
		}
	}
}

// purge deletes expired records, one shard at a time so requests on other
// shards are not held up.
func (m *Memory) purge() {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		now := time.Now()
		for k, e := range sh.m {
			if !now.Before(e.expires) {
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
	}
}

// size counts stored records, expired or not.
func (m *Memory) size() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

func (m *Memory) shard(key string) *memoryShard {
	return &m.shards[maphash.String(m.seed, key)%memoryShards]
}

// live returns key's entry if it has not expired. The caller holds sh.mu.
func (sh *memoryShard) live(key string, now time.Time) (memoryEntry, bool) {
	e, ok := sh.m[key]
	if !ok || !now.Before(e.expires) {
		return memoryEntry{}, false
	}
	return e, true
}

// record is what callers see of e: a copy, with TTL in whole
// milliseconds as Redis reports it.
func (e memoryEntry) record(now time.Time) Record {
	res := e.result
	res.Body = bytes.Clone(res.Body)
	return Record{
		State:  e.state,
		Result: res,
		Since:  time.UnixMilli(e.since),
		TTL:    e.expires.Sub(now).Truncate(time.Millisecond),
	}
}

// owns reports whether c holds the in-flight entry for its key. The caller
// holds sh.mu.
func (sh *memoryShard) owns(c Claim, now time.Time) bool {
	tok, ok := parseToken(c.Token)
	if !ok {
		return false
	}
	e, ok := sh.live(c.Key, now)
	return ok && e.state == InFlight && e.token == tok
}

// Claim takes key for lease if no record holds it. If the key is free it
// returns the new Claim and a Record in state Absent (the state before the
// claim); otherwise a zero Claim and the record that holds the key.
func (m *Memory) Claim(ctx context.Context, key string, lease time.Duration) (Claim, Record, error) {
	if err := ctx.Err(); err != nil {
		return Claim{}, Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	if err := checkDuration("lease", lease); err != nil {
		return Claim{}, Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	tok := newToken() // outside the lock: it may be a system call
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := time.Now()
	if e, ok := sh.live(key, now); ok {
		return Claim{}, e.record(now), nil
	}
	sh.m[key] = memoryEntry{
		state:   InFlight,
		token:   tok,
		since:   now.UnixMilli(),
		expires: now.Add(lease),
	}
	return Claim{Key: key, Token: hex.EncodeToString(tok[:])}, Record{State: Absent}, nil
}

// Complete replaces c's in-flight record with a completed one holding a
// copy of res, kept for ttl. If c no longer owns its key it returns
// ErrNotOwner and changes nothing.
func (m *Memory) Complete(ctx context.Context, c Claim, res Result, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, err)
	}
	if err := checkDuration("ttl", ttl); err != nil {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, err)
	}
	if err := checkResult(res); err != nil {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, err)
	}
	if len(res.Body) == 0 {
		res.Body = nil // as Redis returns it
	} else {
		res.Body = bytes.Clone(res.Body)
	}
	sh := m.shard(c.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := time.Now()
	if !sh.owns(c, now) {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, ErrNotOwner)
	}
	sh.m[c.Key] = memoryEntry{
		state:   Completed,
		since:   now.UnixMilli(),
		expires: now.Add(ttl),
		result:  res,
	}
	return nil
}

// Release deletes c's in-flight record so the event can be claimed again.
// If c no longer owns its key it returns ErrNotOwner and changes nothing.
func (m *Memory) Release(ctx context.Context, c Claim) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: release %s: %w", c.Key, err)
	}
	sh := m.shard(c.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.owns(c, time.Now()) {
		return fmt.Errorf("dedup: release %s: %w", c.Key, ErrNotOwner)
	}
	delete(sh.m, c.Key)
	return nil
}

// Lookup returns the record for key, or ErrNotFound.
func (m *Memory) Lookup(ctx context.Context, key string) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := time.Now()
	e, ok := sh.live(key, now)
	if !ok {
		return Record{}, fmt.Errorf("dedup: lookup %s: %w", key, ErrNotFound)
	}
	return e.record(now), nil
}

// Forget deletes the record for key, whatever its state, and reports
// whether there was one.
func (m *Memory) Forget(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.live(key, time.Now())
	delete(sh.m, key)
	return ok, nil
}

// Ping reports only a cancelled context: memory is always there.
func (m *Memory) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	return nil
}
