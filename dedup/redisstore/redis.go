package redisstore

import (
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/storeop"
	"go.uber.org/zap"
)

// Every script touches one key, so each runs unchanged on Redis Cluster.
var (
	//go:embed claim.lua
	claimLua string
	//go:embed complete.lua
	completeLua string
	//go:embed release.lua
	releaseLua string
	//go:embed lookup.lua
	lookupLua string

	claimScript    = redis.NewScript(claimLua)
	completeScript = redis.NewScript(completeLua)
	// completeCompatScript is complete.lua without its flags line, for
	// Redis before 7, which reads a script's first line as Lua.
	completeCompatScript = redis.NewScript(completeLua[strings.IndexByte(completeLua, '\n')+1:])
	releaseScript        = redis.NewScript(releaseLua)
	lookupScript         = redis.NewScript(lookupLua)
)

// Client is what the Redis store sends its commands through, whichever
// its topology: *redis.Client (also from redis.NewFailoverClient) and
// *redis.ClusterClient satisfy it.
type Client interface {
	redis.Scripter
	Ping(ctx context.Context) *redis.StatusCmd
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// Store is a store kept in Redis: one key per event ID, written and read
// with single-key commands and scripts. It is safe for concurrent use.
type Store struct {
	// client is the client of the topology Open found (one server or a
	// cluster): what differs between them is asked of it.
	client topology
	// scripts runs the scripts: client, or the batching wrapper of
	// a standalone client (see pipelined).
	scripts Client
	// waitReplicas is how many replicas must acknowledge a claim or a
	// completion; zero: no WAIT.
	waitReplicas int
	// waitTimeout bounds each WAIT.
	waitTimeout time.Duration
	// completeFlagged is complete.lua with its flags line (a field so a
	// test can stand in a script an older server cannot compile).
	completeFlagged *redis.Script
	// opTimeout bounds each operation (each attempt, for Complete's
	// retries), its wait for a pooled connection included; zero: only
	// the caller's ctx bounds it.
	opTimeout time.Duration
	// lateReleases holds a slot for each background release of a claim
	// whose answer was lost (see releaseLate); when all are taken, such a
	// claim is left to its lease.
	lateReleases chan struct{}
	// owner checks that the key prefix is this app's (see CheckOwner).
	owner storeop.Owner
	// compact writes completed records in the compact form where it
	// holds them (Config.CompactRecords); false: the binary form only.
	compact bool
	// noScriptFlags is set once the server refused complete.lua's flags
	// line (Redis before 7): from then on completions run without them.
	noScriptFlags atomic.Bool

	// The async queue (redisqueue.go): its keys, this process's name in
	// the consumer group, where to say the group was lost.
	queue    queueKeys
	consumer string
	log      *zap.Logger
	// groupSeen is set once a Take found the consumer group: its loss
	// after that means Redis lost data.
	groupSeen atomic.Bool
	// lost holds the Takes whose answer was lost, for the next Take of
	// their lane to fence them and hand their deliveries out again (see
	// lostTakes).
	lost lostTakes
	// turns moves the start of each rest-lane Take's round of routes.
	turns atomic.Uint64
	// lastPrune is when this process last pruned the group's consumers
	// (unix ns).
	lastPrune atomic.Int64
	// aof says whether Enqueue also waits for the master's fsync
	// (WAITAOF), found out once.
	aofOnce sync.Once
	aof     bool
}

// newStore returns a store that uses c, with its async queue named under
// the hash tag {webhook-dedup}. Close closes c.
func newStore(c topology) *Store {
	return &Store{
		client: c, scripts: c, completeFlagged: completeScript, lateReleases: make(chan struct{}, maxLateReleases),
		queue: newQueueKeys(""), consumer: consumerName(), log: zap.NewNop(),
	}
}

// Close closes the client.
func (s *Store) Close() error { return s.client.Close() }

// Claim takes key for lease if no record holds it, in one round trip (two
// with WaitReplicas). If the key is free it returns the new Claim and a
// Record in state Absent (the state before the claim); otherwise a zero
// Claim and the record that holds the key. A claim too few replicas
// acknowledged is given up again and reported as an error.
func (s *Store) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error) {
	if err := storeop.CheckClaim(ctx, key, lease); err != nil {
		return dedup.Claim{}, dedup.Record{}, err
	}
	if err := s.owner.Checked(ctx); err != nil {
		return dedup.Claim{}, dedup.Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	for range 2 {
		c, rec, found, err := s.claim(ctx, key, lease)
		if err != nil {
			return dedup.Claim{}, dedup.Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
		}
		if found {
			return c, rec, nil
		}
		// The marker of an async event whose record is gone: clear it,
		// and claim again.
		if err := s.clearMarker(ctx, key); err != nil {
			return dedup.Claim{}, dedup.Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
		}
	}
	return dedup.Claim{}, dedup.Record{}, fmt.Errorf("dedup: claim %s: %w: the key's async marker came back", key, codec.ErrBadRecord)
}

// claim is one try of Claim. found is false when the key held the marker
// of an async event whose record is gone.
func (s *Store) claim(ctx context.Context, key string, lease time.Duration) (c dedup.Claim, rec dedup.Record, found bool, err error) {
	tok := codec.NewToken()
	value := codec.EncodeInFlight(tok, time.Now().UnixMilli())
	var v any
	octx, cancel := s.bound(ctx)
	defer cancel()
	err = s.onMaster(octx, key, func(c Client, replicate func() error) error {
		var err error
		v, err = claimScript.Run(octx, c, []string{key}, value, storeop.Millis(lease)).Result()
		if err != nil || !won(v) {
			return err
		}
		if err := replicate(); err != nil {
			// Give the claim up at once: kept, it would answer the
			// sender's retries in-flight until the lease expires.
			if rerr := releaseScript.Run(octx, c, []string{key}, codec.OwnerPrefix(tok)).Err(); rerr != nil {
				s.releaseLate(key, tok, lease)
			}
			return err
		}
		return nil
	})
	if err != nil && mayHaveRun(err) {
		// The claim may have been written and only its answer lost (a
		// stalled Redis runs it once it wakes up): the caller is told it
		// failed, so give the key up rather than leave it in flight,
		// answering the sender's retries 409 for the whole lease.
		s.releaseLate(key, tok, lease)
	}
	if err != nil {
		return dedup.Claim{}, dedup.Record{}, false, err
	}
	if won(v) {
		return dedup.Claim{Key: key, Token: hex.EncodeToString(tok[:])}, dedup.Record{State: dedup.Absent}, true, nil
	}
	rec, found, err = s.heldBy(octx, key, v)
	return dedup.Claim{}, rec, found, err
}

// won reports whether the claim script's answer means the caller owns the key.
func won(v any) bool {
	n, ok := v.(int64)
	return ok && n == 1
}

// Complete replaces c's in-flight record with a completed one holding res,
// kept for ttl. If c no longer owns its key it returns ErrNotOwner and
// changes nothing.
//
// The upstream has acted by now, and a record lost here lets a later
// duplicate through, so Complete retries for a few seconds (within ctx) a
// write that failed for a reason that passes: a lost connection, a
// failover in progress, replicas slow to acknowledge.
func (s *Store) Complete(ctx context.Context, c dedup.Claim, res dedup.Result, ttl time.Duration) error {
	tok, err := storeop.CheckComplete(ctx, c, res, ttl)
	if err != nil {
		return err
	}
	// The same value on every attempt: the script accepts it again if an
	// earlier attempt wrote it but its answer was lost.
	value := s.completed(res, time.Now().Unix(), ttl)
	err = storeop.Retry(ctx, transient, func(ctx context.Context) error {
		octx, cancel := s.bound(ctx)
		defer cancel()
		err := s.onMaster(octx, c.Key, func(conn Client, replicate func() error) error {
			n, err := s.complete(octx, conn, c.Key, codec.OwnerPrefix(tok), value, storeop.Millis(ttl))
			if err != nil {
				return err
			}
			if n != 1 {
				return dedup.ErrNotOwner
			}
			return replicate()
		})
		if err != nil && storeop.Expired(octx) != nil && storeop.Expired(ctx) == nil {
			return fmt.Errorf("%w: %w", errAttemptTimedOut, err)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, err)
	}
	return nil
}

// completed is the value of a completed record: the compact form when
// the store writes it and it holds res, else the 12-byte binary one.
func (s *Store) completed(res dedup.Result, since int64, ttl time.Duration) []byte {
	if s.compact {
		if v, ok := codec.EncodeCompact(res, since, ttl); ok {
			return v
		}
	}
	return codec.EncodeCompleted(res, since)
}

// complete runs complete.lua: with its allow-oom flag, unless the server
// does not know script flags.
func (s *Store) complete(ctx context.Context, conn redis.Scripter, key string, args ...any) (int64, error) {
	if !s.noScriptFlags.Load() {
		n, err := s.completeFlagged.Run(ctx, conn, []string{key}, args...).Int64()
		if !flagsRefused(err) {
			return n, err
		}
		s.noScriptFlags.Store(true)
	}
	return completeCompatScript.Run(ctx, conn, []string{key}, args...).Int64()
}

// flagsRefused reports whether err is a server before Redis 7 failing to
// compile a script that starts with a "#!lua flags=" line.
func flagsRefused(err error) bool {
	if err == nil {
		return false // before errors.As, whose target would escape on every completion
	}
	var answered redis.Error
	return errors.As(err, &answered) && strings.Contains(err.Error(), "Error compiling script")
}

// Release deletes c's in-flight record so the event can be claimed again.
// If c no longer owns its key it returns ErrNotOwner and changes nothing.
func (s *Store) Release(ctx context.Context, c dedup.Claim) error {
	tok, err := storeop.CheckOwned(ctx, "release", c.Key, c.Token)
	if err != nil {
		return err
	}
	octx, cancel := s.bound(ctx)
	defer cancel()
	n, err := releaseScript.Run(octx, s.scripts, []string{c.Key}, codec.OwnerPrefix(tok)).Int64()
	if err != nil {
		return fmt.Errorf("dedup: release %s: %w", c.Key, err)
	}
	if n != 1 {
		return fmt.Errorf("dedup: release %s: %w", c.Key, dedup.ErrNotOwner)
	}
	return nil
}

// Lookup returns the record for key, or ErrNotFound.
func (s *Store) Lookup(ctx context.Context, key string) (dedup.Record, error) {
	if err := ctx.Err(); err != nil {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	if err := s.owner.Checked(ctx); err != nil {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	octx, cancel := s.bound(ctx)
	defer cancel()
	v, err := lookupScript.Run(octx, s.scripts, []string{key}).Result()
	if errors.Is(err, redis.Nil) {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, dedup.ErrNotFound)
	}
	if err != nil {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	rec, found, err := s.heldBy(octx, key, v)
	if err == nil && !found {
		err = dedup.ErrNotFound
	}
	if err != nil {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	return rec, nil
}

// Forget deletes the record for key, whatever its state, and reports
// whether there was one. An async event is taken out of the queue too.
func (s *Store) Forget(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	octx, cancel := s.bound(ctx)
	defer cancel()
	// GETDEL, not DEL: only the marker of an async event sends Forget to
	// the queue's keys, which a sync-only deployment's ACL may not cover.
	old, err := s.client.Do(octx, "GETDEL", key).Text()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	if old != asyncMarker {
		return true, nil
	}
	n, err := queueForgetScript.Run(octx, s.scripts, s.queue.settleKeys(key), queueGroup, key, s.queue.tag).Int64()
	if err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	return n > 0, nil
}

// Ping checks that Redis answers and accepts writes (ErrOutOfMemory when
// it refuses them), and that the key prefix is this app's
// (ErrPrefixOwned).
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	octx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.client.Ping(octx).Err(); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	if err := s.writable(ctx); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	if err := s.owner.Checked(ctx); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	return nil
}

// bound limits ctx to one operation's time (opTimeout).
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.opTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.opTimeout)
}

// maxLateReleases bounds the background releases under way at once: in a
// long stall, a busy proxy would otherwise start one per failed claim.
const maxLateReleases = 1024

// lateReleaseFor bounds how long a background release keeps trying.
const lateReleaseFor = 30 * time.Second

// mayHaveRun reports whether a failed call may still have reached Redis,
// or may yet: its answer timed out or was cut off, or the caller gave up
// waiting. Not an answer from Redis (which says what was done), a closed
// client, or a connection that was never opened.
func mayHaveRun(err error) bool {
	var answered redis.Error
	var op *net.OpError
	switch {
	case errors.As(err, &answered), errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, ErrNotReplicated): // the claim was answered; Claim released it
		return false
	case errors.As(err, &op) && op.Op == "dial":
		return false
	}
	return true
}

// releaseLate gives up, in the background, a claim of key under tok whose
// answer was lost, for as long as its lease and lateReleaseFor allow. The
// claim may land only when a stalled Redis wakes up, so one answer that
// the key is not tok's is not taken as final: the release is tried again
// until that answer comes twice, opTimeout apart, by which time a claim
// still queued on another connection has run.
func (s *Store) releaseLate(key string, tok [codec.TokenLen]byte, lease time.Duration) {
	select {
	case s.lateReleases <- struct{}{}:
	default:
		return // enough already under way: the lease bounds this one
	}
	go func() {
		defer func() { <-s.lateReleases }()
		ctx, cancel := context.WithTimeout(context.Background(), min(lease, lateReleaseFor))
		defer cancel()
		pause := 50 * time.Millisecond
		var notOurs time.Time
		for {
			octx, cancelOp := s.bound(ctx)
			n, err := releaseScript.Run(octx, s.client, []string{key}, codec.OwnerPrefix(tok)).Int64()
			cancelOp()
			switch {
			case err == nil && n == 1:
				return
			case err == nil && notOurs.IsZero():
				notOurs = time.Now()
			case err == nil && time.Since(notOurs) >= s.opTimeout:
				return
			case errors.Is(err, redis.ErrClosed):
				return
			}
			if !storeop.Sleep(ctx, pause) {
				return
			}
			pause = min(2*pause, time.Second)
		}
	}()
}

// recordWithTTL decodes the {value, pttl} pair the claim and lookup scripts
// return.
func recordWithTTL(v any) (dedup.Record, error) {
	pair, ok := v.([]any)
	if !ok || len(pair) != 2 {
		return dedup.Record{}, fmt.Errorf("%w: script answered %T", codec.ErrBadRecord, v)
	}
	value, ok1 := pair[0].(string)
	pttl, ok2 := pair[1].(int64)
	if !ok1 || !ok2 {
		return dedup.Record{}, fmt.Errorf("%w: script answered %T, %T", codec.ErrBadRecord, pair[0], pair[1])
	}
	rec, err := codec.DecodeRecordAt(value, time.Now().Unix())
	if err != nil {
		return dedup.Record{}, err
	}
	rec.TTL = ttlOf(pttl)
	return rec, nil
}

// ttlOf is a record's TTL from its key's PTTL: -1 (no expiry, only if set
// by hand) is none (0); 0 is a record in its last millisecond, which
// still expires, so 1ms: read as one that never does, a cache in front
// of the store would keep it for its own TTL after Redis dropped it.
func ttlOf(pttl int64) time.Duration {
	if pttl < 0 {
		return 0
	}
	return max(time.Duration(pttl)*time.Millisecond, time.Millisecond)
}

// onMaster runs f against the master that holds key; f calls replicate
// after a write to wait until WaitReplicas replicas acknowledge it. WAIT
// counts the acknowledgements of the writes made on the connection it is
// sent on, so with WaitReplicas set f gets a connection of its own from the
// pool of key's master: on a cluster, the node serving key's slot, asked
// directly, as WAIT cannot be routed by key. Without WaitReplicas, f gets
// the shared client and replicate does nothing.
func (s *Store) onMaster(ctx context.Context, key string, f func(c Client, replicate func() error) error) error {
	if s.waitReplicas == 0 {
		return f(s.scripts, func() error { return nil })
	}
	node, err := s.client.master(ctx, key)
	if err != nil {
		return err
	}
	conn := node.Conn()
	defer conn.Close()
	err = f(conn, func() error {
		n, err := conn.Wait(ctx, s.waitReplicas, s.waitTimeout).Result()
		if err != nil {
			return err
		}
		if n < int64(s.waitReplicas) {
			return fmt.Errorf("%w: %d of %d within %s", ErrNotReplicated, n, s.waitReplicas, s.waitTimeout)
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrNotReplicated) && !errors.Is(err, dedup.ErrNotOwner) {
		s.client.failed(ctx)
	}
	return err
}

// errAttemptTimedOut marks an attempt cut short by opTimeout while its
// caller's context lasts: worth another try.
var errAttemptTimedOut = errors.New("attempt timed out")

// transient reports whether a failed write may succeed if tried again
// soon: the connection was lost, a failover or a resharding is under way,
// or replicas were slow to acknowledge.
func transient(err error) bool {
	switch {
	case errors.Is(err, ErrNotReplicated), errors.Is(err, errAttemptTimedOut):
		return true
	case errors.Is(err, dedup.ErrNotOwner), errors.Is(err, codec.ErrBadRecord), errors.Is(err, redis.ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	var answered redis.Error
	if errors.As(err, &answered) {
		_, moved := redis.IsMovedError(err)
		_, ask := redis.IsAskError(err)
		return moved || ask || redis.IsClusterDownError(err) || redis.IsTryAgainError(err) ||
			redis.IsReadOnlyError(err) || redis.IsLoadingError(err) || redis.IsMasterDownError(err)
	}
	return true // refused, reset or timed out
}

// Features is what Redis can do: records and the async queue, shared by
// every replica, kept across restarts as far as Redis's own persistence
// keeps them (appendonly; see CheckDurability).
func Features() dedup.Features { return dedup.Features{Queue: true, Durable: true, Shared: true} }

// Backend is s as the program uses it: its records and its queue. The
// monitor's checks (NewMonitor) are the caller's to add to its Jobs.
func (s *Store) Backend() dedup.Backend {
	return dedup.Backend{Features: Features(), Store: s, Queue: s, Close: s.Close}
}
