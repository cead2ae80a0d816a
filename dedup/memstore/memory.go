package memstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/storeop"
	"sync"
	"time"
)

// memoryShards splits the map so that concurrent requests for different
// event IDs rarely wait on the same lock.
const memoryShards = 32

// janitorInterval is how often NewMemory's janitor purges expired records.
// Expired records are invisible at once; purging only bounds memory.
const janitorInterval = 10 * time.Second

// Store is a store kept in this process: the same semantics as Redis,
// for a single replica. It is safe for concurrent use.
//
// A completed record lives for the provider's whole retry window (days),
// so the store holds one per event of those days: each costs about 100
// bytes of heap (a 72-byte map slot and the map's slack), whatever the
// length of its key, and the garbage collector never scans them.
type Store struct {
	epoch  time.Time // the zero of the monotonic clock that expiries are kept on
	shards [memoryShards]memoryShard

	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the janitor has returned
	closeOnce sync.Once
}

type memoryShard struct {
	mu sync.Mutex
	m  map[memoryKey]memoryEntry
	// replays holds the kept responses of completed records whose entry
	// has replayed set (REPLAY_RESPONSE): apart, so that m holds no
	// pointers.
	replays map[memoryKey]keptResponse
	_       [40]byte // keeps each lock on its own cache line
}

// memoryKey stands for a record's key: the first 128 bits of its SHA-256.
// Keys of any length then cost the same, and two keys share one only by a
// collision of SHA-256, which no sender can produce.
type memoryKey [16]byte

func newMemoryKey(key string) memoryKey {
	// The stack buffer saves an allocation: []byte(key) makes one for keys
	// over 32 bytes, which most are. Longer keys than buf still work.
	var buf [128]byte
	sum := sha256.Sum256(append(buf[:0], key...))
	return memoryKey(sum[:16])
}

// memoryEntry is one record, free of pointers.
type memoryEntry struct {
	expires  int64    // nanoseconds after the store's epoch, on the monotonic clock
	since    int64    // unix milliseconds, as in Redis
	data     [32]byte // in flight: the owner's token in the first tokenLen bytes; completed: the body's fingerprint
	status   uint16   // the upstream's, when completed
	state    dedup.State
	replayed bool // the shard's replays map holds the response
}

// keptResponse is a completed record's response, kept for replay. The store owns Body:
// it is copied on the way in and on the way out.
type keptResponse struct {
	contentType string
	body        []byte
}

// New returns an empty store and starts its janitor, which Close
// stops.
func New() *Store { return newMemory(janitorInterval) }

func newMemory(every time.Duration) *Store {
	m := &Store{
		epoch: time.Now(),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	for i := range m.shards {
		m.shards[i].m = make(map[memoryKey]memoryEntry)
	}
	go m.janitor(every)
	return m
}

// Close stops the janitor. The store keeps working (expired records stay
// invisible but are no longer purged). Close may be called more than once.
func (m *Store) Close() error {
	m.closeOnce.Do(func() { close(m.stop) })
	<-m.done
	return nil
}

func (m *Store) janitor(every time.Duration) {
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
func (m *Store) purge() {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		now := m.now()
		for k, e := range sh.m {
			if !now.before(e) {
				sh.remove(k, e)
			}
		}
		sh.mu.Unlock()
	}
}

// size counts stored records, expired or not.
func (m *Store) size() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// instant is one reading of the clock: the wall time for a record's Since,
// the monotonic offset from the epoch for its expiry.
type instant struct {
	wall time.Time
	mono int64
}

func (m *Store) now() instant {
	t := time.Now()
	return instant{wall: t, mono: int64(t.Sub(m.epoch))}
}

func (now instant) before(e memoryEntry) bool { return now.mono < e.expires }

func (now instant) after(d time.Duration) int64 { return now.mono + int64(d) }

// locate returns the shard that holds key, and key's stand-in there.
func (m *Store) locate(key string) (*memoryShard, memoryKey) {
	k := newMemoryKey(key)
	return &m.shards[k[0]%memoryShards], k
}

// live returns k's entry if it has not expired. The caller holds sh.mu.
func (sh *memoryShard) live(k memoryKey, now instant) (memoryEntry, bool) {
	e, ok := sh.m[k]
	if !ok || !now.before(e) {
		return memoryEntry{}, false
	}
	return e, true
}

// put stores e under k, dropping the kept response of the entry it
// replaces. The caller holds sh.mu.
func (sh *memoryShard) put(k memoryKey, e memoryEntry) {
	if old, ok := sh.m[k]; ok && old.replayed {
		delete(sh.replays, k)
	}
	sh.m[k] = e
}

// remove deletes e, k's entry. The caller holds sh.mu.
func (sh *memoryShard) remove(k memoryKey, e memoryEntry) {
	if e.replayed {
		delete(sh.replays, k)
	}
	delete(sh.m, k)
}

// record is what callers see of e: a copy, with TTL in whole
// milliseconds as Redis reports it. The caller holds sh.mu.
func (sh *memoryShard) record(k memoryKey, e memoryEntry, now instant) dedup.Record {
	rec := dedup.Record{
		State: e.state,
		Since: time.UnixMilli(e.since),
		TTL:   time.Duration(e.expires - now.mono).Truncate(time.Millisecond),
	}
	if e.state == dedup.Completed {
		rec.Result.Status = int(e.status)
		rec.Result.Fingerprint = e.data
		rec.Result.FullFingerprint = true // it keeps all of it
	}
	if e.replayed {
		r := sh.replays[k]
		rec.Result.ContentType = r.contentType
		rec.Result.Body = bytes.Clone(r.body)
	}
	return rec
}

// owns reports whether tok holds the in-flight entry for key k. The
// caller holds sh.mu.
func (sh *memoryShard) owns(k memoryKey, tok [codec.TokenLen]byte, now instant) bool {
	e, ok := sh.live(k, now)
	return ok && e.state == dedup.InFlight && [codec.TokenLen]byte(e.data[:codec.TokenLen]) == tok
}

// Claim takes key for lease if no record holds it. If the key is free it
// returns the new Claim and a Record in state Absent (the state before the
// claim); otherwise a zero Claim and the record that holds the key.
func (m *Store) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error) {
	if err := storeop.CheckClaim(ctx, key, lease); err != nil {
		return dedup.Claim{}, dedup.Record{}, err
	}
	tok := codec.NewToken() // outside the lock: it may be a system call
	sh, k := m.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := m.now()
	if e, ok := sh.live(k, now); ok {
		return dedup.Claim{}, sh.record(k, e, now), nil
	}
	e := memoryEntry{
		state:   dedup.InFlight,
		since:   now.wall.UnixMilli(),
		expires: now.after(lease),
	}
	copy(e.data[:], tok[:])
	sh.put(k, e)
	return dedup.Claim{Key: key, Token: hex.EncodeToString(tok[:])}, dedup.Record{State: dedup.Absent}, nil
}

// Complete replaces c's in-flight record with a completed one holding a
// copy of res, kept for ttl. If c no longer owns its key it returns
// ErrNotOwner and changes nothing.
func (m *Store) Complete(ctx context.Context, c dedup.Claim, res dedup.Result, ttl time.Duration) error {
	tok, err := storeop.CheckComplete(ctx, c, res, ttl)
	if err != nil {
		return err
	}
	sh, k := m.locate(c.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := m.now()
	if !sh.owns(k, tok, now) {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, dedup.ErrNotOwner)
	}
	kept := res.ContentType != "" || len(res.Body) > 0
	sh.put(k, memoryEntry{
		state:    dedup.Completed,
		since:    now.wall.UnixMilli(),
		expires:  now.after(ttl),
		data:     res.Fingerprint,
		status:   uint16(res.Status),
		replayed: kept,
	})
	if kept {
		if sh.replays == nil {
			sh.replays = make(map[memoryKey]keptResponse)
		}
		r := keptResponse{contentType: res.ContentType}
		if len(res.Body) > 0 {
			r.body = bytes.Clone(res.Body) // else nil, as Redis returns it
		}
		sh.replays[k] = r
	}
	return nil
}

// Release deletes c's in-flight record so the event can be claimed again.
// If c no longer owns its key it returns ErrNotOwner and changes nothing.
func (m *Store) Release(ctx context.Context, c dedup.Claim) error {
	tok, err := storeop.CheckOwned(ctx, "release", c.Key, c.Token)
	if err != nil {
		return err
	}
	sh, k := m.locate(c.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.owns(k, tok, m.now()) {
		return fmt.Errorf("dedup: release %s: %w", c.Key, dedup.ErrNotOwner)
	}
	delete(sh.m, k) // in flight: no kept response
	return nil
}

// Lookup returns the record for key, or ErrNotFound.
func (m *Store) Lookup(ctx context.Context, key string) (dedup.Record, error) {
	if err := ctx.Err(); err != nil {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	sh, k := m.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := m.now()
	e, ok := sh.live(k, now)
	if !ok {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, dedup.ErrNotFound)
	}
	return sh.record(k, e, now), nil
}

// Forget deletes the record for key, whatever its state, and reports
// whether there was one.
func (m *Store) Forget(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	sh, k := m.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, stored := sh.m[k]
	if stored {
		sh.remove(k, e)
	}
	return stored && m.now().before(e), nil
}

// Ping reports only a cancelled context: memory is always there.
func (m *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	return nil
}

// Features is what the in-memory store can do: deduplicate within this one
// process, until it exits. No queue: an accepted event would not survive
// a restart.
func Features() dedup.Features { return dedup.Features{} }

// Backend is m as the program uses it.
func (m *Store) Backend() dedup.Backend {
	return dedup.Backend{Features: Features(), Store: m, Close: m.Close}
}
