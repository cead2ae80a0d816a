package redisstore

import (
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/storeop"
)

// The async queue on Redis.
//
// Key scheme. The claim of an async event and the enqueue of its request
// are one Lua script, and a script on Redis Cluster may only touch keys of
// one hash slot. So every key of the queue, and the record of every async
// event, is named under one hash tag made of the key prefix, {KEY_PREFIX}
// (default {webhook-dedup:}):
//
//	{p}K              the async event's record, a hash (K is its sync key,
//	                  dedup.EventKey, prefix included); its field rt is
//	                  the route it was accepted on (none: the empty route)
//	{p}#req:K         its request (encodeRequest), until it is delivered
//	{p}#stream:R      the stream of route R's events to deliver, read by
//	                  the consumer group "webhook-dedup" that every replica
//	                  shares: each route is a lane of its own (dedup.Lane)
//	{p}#retry:R       sorted set: route R's events waiting for a retry, by
//	                  when due
//	{p}#cursor:R      where XAUTOCLAIM's walk of R's pending list is
//	{p}#stream, {p}#retry, {p}#cursor
//	                  the same for the empty route: the names the previous
//	                  version gave its one queue, so what it queued is
//	                  delivered as the empty route's (and moves to its
//	                  request's route at its first retry)
//	{p}#routes        set: the routes other than the empty one that have a
//	                  stream (the rest lane's, and Stats')
//	{p}#open          sorted set: events accepted and not settled, by when
//	                  accepted (queue depth and oldest age)
//	{p}#dead          sorted set: dead letters, by when they expire
//	{p}#fenced        sorted set: the take IDs of Takes whose answer was
//	                  lost, fenced by a later Take so that they lease
//	                  nothing if they run after it (lostTakes), by when
//	                  the mark may go; it expires with the last of them
//
// ('#' never occurs in a namespace, so "#..." never names an event.) The
// scripts name a route's keys themselves (queue_lib.lua), as they name
// the records: all are in the slot of {p}.
//
// The trade-off: the whole async queue, and every async event's record, is
// one slot, so on a cluster one master holds and serves all of it, while
// sync records (K, unchanged) spread over every master. A cluster then
// scales sync traffic, not async; the async queue's size is bounded by one
// node's memory and its throughput by one node's CPU.
//
// Sync and async share K as the arbiter: Enqueue marks K with a one-byte
// marker (asyncMarker, no expiry while the event is open) before it claims
// {p}K, so a sync claim of the same event finds K taken, and an Enqueue of
// an event a sync route claimed finds K held. On one server both are one
// script (queue_accept.lua); on a cluster, where K and {p}K are in
// different slots, two. The marker takes the async record's lifetime when
// the event is settled. A marker left without its record (on a cluster, a
// crash between the two steps) is seen as such and cleared by the next
// claim.
var (
	//go:embed queue_lib.lua
	queueLibLua string
	//go:embed queue_enqueue.lua
	queueEnqueueLua string
	//go:embed queue_accept.lua
	queueAcceptLua string
	//go:embed queue_take.lua
	queueTakeLua string
	//go:embed queue_extend.lua
	queueExtendLua string
	//go:embed queue_settle.lua
	queueSettleLua string
	//go:embed queue_requeue.lua
	queueRequeueLua string
	//go:embed queue_forget.lua
	queueForgetLua string
	//go:embed queue_undo.lua
	queueUndoLua string
	//go:embed queue_lookup.lua
	queueLookupLua string
	//go:embed queue_stats.lua
	queueStatsLua string
	//go:embed queue_dead.lua
	queueDeadLua string
	//go:embed queue_recover.lua
	queueRecoverLua string
	//go:embed queue_prune.lua
	queuePruneLua string
	//go:embed marker.lua
	markerLua string
	//go:embed marker_expire.lua
	markerExpireLua string

	queueEnqueueScript = queueScript(queueEnqueueLua + "return enqueue()\n")
	queueAcceptScript  = queueScript(queueEnqueueLua + queueAcceptLua)
	queueTakeScript    = queueScript(queueTakeLua)
	queueExtendScript  = queueScript(queueExtendLua)
	queueSettleScript  = queueScript(queueSettleLua)
	queueRequeueScript = queueScript(queueRequeueLua)
	queueForgetScript  = queueScript(queueForgetLua)
	queueUndoScript    = queueScript(queueUndoLua)
	queueLookupScript  = redis.NewScript(queueLookupLua)
	queueStatsScript   = queueScript(queueStatsLua)
	queueDeadScript    = redis.NewScript(queueDeadLua)
	queueRecoverScript = queueScript(queueRecoverLua)
	queuePruneScript   = queueScript(queuePruneLua)
	markerScript       = redis.NewScript(markerLua)
	markerExpireScript = redis.NewScript(markerExpireLua)
)

// queueScript is a queue script with queue_lib.lua before it: Redis
// scripts cannot share functions (before Redis 7's functions), and each
// needs the lanes' key names.
func queueScript(body string) *redis.Script { return redis.NewScript(queueLibLua + body) }

// asyncMarker is what an async event's sync key holds: the async tag alone,
// which no sync record starts with (release.lua's prefix check of it then
// matches the marker only).
const asyncMarker = string(rune(codec.TagAsync))

// queueGroup is the consumer group every replica reads the streams with.
const queueGroup = "webhook-dedup"

// defaultQueueTag names the queue when the key prefix is empty ("{}" is
// no hash tag).
const defaultQueueTag = "{webhook-dedup}"

// queueKeys are the names of one queue's keys.
type queueKeys struct {
	tag, routes, open, dead, fenced string
	// tagArg is tag as a script's argument, made once: each conversion of
	// a string to an interface allocates, and Enqueue runs per request.
	tagArg any
}

func newQueueKeys(prefix string) queueKeys {
	tag := defaultQueueTag
	if prefix != "" {
		tag = "{" + prefix + "}"
	}
	return queueKeys{
		tag:    tag,
		routes: tag + "#routes",
		open:   tag + "#open",
		dead:   tag + "#dead",
		fenced: tag + "#fenced",
		tagArg: tag,
	}
}

func (q queueKeys) record(key string) string  { return q.tag + key }
func (q queueKeys) request(key string) string { return q.tag + "#req:" + key }

// stream, retry and cursor name route's keys, as lane_key in
// queue_lib.lua does.
func (q queueKeys) stream(route string) string { return q.laneKey("stream", route) }
func (q queueKeys) retry(route string) string  { return q.laneKey("retry", route) }
func (q queueKeys) cursor(route string) string { return q.laneKey("cursor", route) }

func (q queueKeys) laneKey(kind, route string) string {
	if route == "" {
		return q.tag + "#" + kind
	}
	return q.tag + "#" + kind + ":" + route
}

// settleKeys are the KEYS of queue_settle.lua, queue_requeue.lua,
// queue_forget.lua and queue_undo.lua.
func (q queueKeys) settleKeys(key string) []string {
	// Room for the sync key queue_settle.lua takes after them on one
	// server, without a copy.
	return append(make([]string, 0, 5), q.record(key), q.request(key), q.open, q.dead)
}

// laneKeys are the KEYS of the scripts that go through every lane: the
// empty route's stream and the set of the other routes.
func (q queueKeys) laneKeys() []string { return []string{q.stream(""), q.routes} }

// takeKeys are the KEYS of queue_take.lua: laneKeys and the fence of lost
// Takes.
func (q queueKeys) takeKeys() []string { return append(q.laneKeys(), q.fenced) }

// consumerName names this process in the consumer group: host, process ID
// and a random suffix, so that no two processes (nor one restarted) share
// a name, and the pending deliveries of a dead one are taken over by
// XAUTOCLAIM rather than inherited by name. Consumers are never deleted:
// XGROUP DELCONSUMER would drop their pending deliveries.
func consumerName() string {
	host, _ := os.Hostname()
	tok := codec.NewToken()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(tok[:4]))
}

var _ dedup.Queue = (*Store)(nil)

// Enqueue claims key and queues req for delivery. On one server it is one
// round trip (more with WaitReplicas): one script marks the sync key,
// claims the event's async record and adds it to the stream, atomically.
// On a cluster the sync key is in another slot than the queue, so it is
// two: the marker first, then the script that claims the async record and
// adds it to the stream. If the key was free it returns true; otherwise
// false and the record that holds it, and queues nothing. With
// WaitReplicas, the enqueue counts only once that many replicas
// acknowledged it (and, on Redis 7.2 and later with appendonly on, once
// the master fsync'd it to its append-only file); if they do not, it is
// taken back and reported as an error wrapping ErrNotReplicated. (On a
// cluster the marker is not waited for: a failover that loses it loses
// only a sync route's view of the event, not the event.) The script
// checks maxDepth itself, against the queue every replica shares.
func (s *Store) Enqueue(ctx context.Context, key string, req dedup.Request, maxDepth int) (bool, dedup.Record, error) {
	if err := ctx.Err(); err != nil {
		return false, dedup.Record{}, fmt.Errorf("dedup: enqueue %s: %w", key, err)
	}
	if err := s.owner.Checked(ctx); err != nil {
		return false, dedup.Record{}, fmt.Errorf("dedup: enqueue %s: %w", key, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	won, rec, err := s.enqueue(ctx, key, req, maxDepth)
	if err != nil {
		return false, dedup.Record{}, fmt.Errorf("dedup: enqueue %s: %w", key, err)
	}
	return won, rec, nil
}

// enqueue is Enqueue's work: queue_accept.lua on one node, marker.lua then
// queue_enqueue.lua on a cluster.
func (s *Store) enqueue(ctx context.Context, key string, req dedup.Request, maxDepth int) (bool, dedup.Record, error) {
	oneNode := s.client.oneNode()
	script := queueAcceptScript
	if !oneNode {
		v, err := markerScript.Run(ctx, s.scripts, []string{key}, asyncMarker).Result()
		if err != nil {
			return false, dedup.Record{}, err
		}
		if !won(v) {
			rec, err := recordWithTTL(v)
			return false, rec, err
		}
		script = queueEnqueueScript
	}
	tok := codec.NewToken()
	qtok := hex.EncodeToString(tok[:])
	// queue_accept.lua's KEYS and ARGV are queue_enqueue.lua's and the
	// sync key's marker after them.
	keys := []string{s.queue.record(key), s.queue.request(key), s.queue.open, key}
	args := []any{key, codec.EncodeRequest(req), qtok, req.Route, s.queue.tagArg, queueGroup,
		max(maxDepth, 0), req.OrderKey, orderBlock(req), asyncMarker}
	if !oneNode {
		keys, args = keys[:3], args[:9]
	}
	var answer any
	err := s.onMaster(ctx, s.queue.open, func(c Client, replicate func() error) error {
		var err error
		answer, err = script.Run(ctx, c, keys, args...).Result()
		if err != nil {
			return err
		}
		if _, won := answer.(string); !won {
			return nil
		}
		if err := s.replicateQueued(ctx, c, replicate); err != nil {
			// Take it back: a 503 must leave nothing queued.
			_ = queueUndoScript.Run(ctx, c, s.queue.settleKeys(key), queueGroup, key, qtok, s.queue.tag).Err()
			_ = s.clearMarker(ctx, key)
			return err
		}
		return nil
	})
	if err != nil {
		return false, dedup.Record{}, err
	}
	switch a := answer.(type) {
	case string:
		return true, dedup.Record{}, nil
	case int64:
		if a != 0 {
			break
		}
		// The key was free, the queue full. queue_accept.lua took its
		// marker back itself.
		if !oneNode {
			s.unmark(ctx, key)
		}
		return false, dedup.Record{}, dedup.ErrQueueFull
	case []any:
		if len(a) == 2 { // queue_accept.lua: a sync record holds the key
			rec, err := recordWithTTL(a)
			return false, rec, err
		}
	}
	rec, err := asyncFromReply(answer)
	if err != nil {
		return false, dedup.Record{}, err
	}
	if !oneNode && rec.TTL > 0 {
		// The marker was missing (it is set now): it goes with the record.
		// queue_accept.lua gave it the record's lifetime itself.
		s.expireMarker(ctx, key, rec.TTL)
	}
	return false, rec, nil
}

// orderBlock is queue_enqueue.lua's flag of an event whose dead letter
// holds its order key.
func orderBlock(req dedup.Request) string {
	if req.OrderKey != "" && req.OrderBlock {
		return "1"
	}
	return "0"
}

// replicateQueued waits for what WaitReplicas asks: on Redis 7.2 and later
// with appendonly on, first for the master's fsync (WAITAOF 1 0), then for
// the replicas (WAIT). c is the master's connection onMaster gave, the one
// the write went through.
func (s *Store) replicateQueued(ctx context.Context, c Client, replicate func() error) error {
	if s.waitReplicas == 0 {
		return nil
	}
	if s.waitAOF(ctx) {
		n, err := c.Do(ctx, "WAITAOF", 1, 0, storeop.Millis(s.waitTimeout)).Slice()
		if err != nil {
			return err
		}
		if len(n) != 2 || n[0] != int64(1) {
			return fmt.Errorf("%w: the master's append-only file was not fsync'd within %s", ErrNotReplicated, s.waitTimeout)
		}
	}
	return replicate()
}

// waitAOF reports whether the master offers WAITAOF (Redis 7.2 and later)
// with appendonly on, asking once.
func (s *Store) waitAOF(ctx context.Context) bool {
	s.aofOnce.Do(func() {
		info, err := s.client.Do(ctx, "COMMAND", "INFO", "WAITAOF").Slice()
		if err != nil || len(info) == 0 || info[0] == nil {
			return
		}
		v, err := configGet(ctx, s.client, "appendonly")
		s.aof = err == nil && v == "yes"
	})
	return s.aof
}

// str is v as text: go-redis hands script strings as string and
// numbers as int64.
func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	default:
		return ""
	}
}

// settle runs queue_settle.lua for d with the outcome's arguments, and
// reports whether it kept a dead letter without expiry (one that holds
// its order key); tried is the attempt to add to the event's history
// (attemptLine).
func (s *Store) settle(ctx context.Context, op string, d dedup.Delivery, tried string, args ...any) (kept bool, err error) {
	key := d.Claim.Key
	if _, err := storeop.CheckOwned(ctx, op, key, d.Claim.Token); err != nil {
		return false, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	all := append([]any{queueGroup, key, d.Claim.Token, s.queue.tag, op}, args...)
	for len(all) < settleArgs {
		all = append(all, "")
	}
	all = append(all, tried, dedup.HistoryLen)
	keys := s.queue.settleKeys(key)
	if s.client.oneNode() {
		// The marker's lifetime in the same step (markApart).
		keys = append(keys, key)
		all = append(all, asyncMarker)
	}
	n, err := queueSettleScript.Run(ctx, s.scripts, keys, all...).Int64()
	if err != nil {
		return false, fmt.Errorf("dedup: %s %s: %w", op, key, err)
	}
	if n != 1 && n != 2 {
		return false, fmt.Errorf("dedup: %s %s: %w", op, key, dedup.ErrNotOwner)
	}
	return n == 2, nil
}

// markApart gives key's marker the lifetime ttl of the record a succeed
// or a fail settled, on a cluster: on one server queue_settle.lua gave it
// in the settle's own step, a round trip less per delivery.
func (s *Store) markApart(ctx context.Context, key string, ttl time.Duration) {
	if !s.client.oneNode() {
		s.expireMarker(ctx, key, ttl)
	}
}

// expireMarker gives key's marker the lifetime of its async record. It is
// best effort: a marker left behind is cleared by the next claim of key.
func (s *Store) expireMarker(ctx context.Context, key string, ttl time.Duration) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_ = markerExpireScript.Run(ctx, s.scripts, []string{key}, asyncMarker, storeop.Millis(ttl)).Err()
}

// Succeed completes d's event with res, kept for ttl, and drops its request.
func (s *Store) Succeed(ctx context.Context, d dedup.Delivery, res dedup.Result, ttl time.Duration) error {
	if err := storeop.CheckDuration("ttl", ttl); err != nil {
		return fmt.Errorf("dedup: succeed %s: %w", d.Claim.Key, err)
	}
	if err := codec.CheckResult(res); err != nil {
		return fmt.Errorf("dedup: succeed %s: %w", d.Claim.Key, err)
	}
	if _, err := s.settle(ctx, "succeed", d, attemptLine(d, res.Status, ""), codec.EncodeCompleted(res, time.Now().Unix()), storeop.Millis(ttl), res.Status); err != nil {
		return err
	}
	s.markApart(ctx, d.Claim.Key, ttl)
	return nil
}

// Retry gives d back to the queue, due again at next.
func (s *Store) Retry(ctx context.Context, d dedup.Delivery, next time.Time, status int, reason string) error {
	if err := codec.CheckResult(dedup.Result{Status: status}); err != nil {
		return fmt.Errorf("dedup: retry %s: %w", d.Claim.Key, err)
	}
	// The request's route: the lane of an event the previous version
	// queued, whose record has none (queue_settle.lua).
	_, err := s.settle(ctx, "retry", d, attemptLine(d, status, reason), next.UnixMilli(), status, reason, d.Request.Route)
	return err
}

// Fail dead-letters d's event, kept with its request for keep.
func (s *Store) Fail(ctx context.Context, d dedup.Delivery, status int, reason string, keep time.Duration) error {
	if err := storeop.CheckDuration("keep", keep); err != nil {
		return fmt.Errorf("dedup: fail %s: %w", d.Claim.Key, err)
	}
	if err := codec.CheckResult(dedup.Result{Status: status}); err != nil {
		return fmt.Errorf("dedup: fail %s: %w", d.Claim.Key, err)
	}
	kept, err := s.settle(ctx, "fail", d, attemptLine(d, status, reason), storeop.Millis(keep), status, reason)
	if err != nil {
		return err
	}
	if kept {
		keep = 0 // the marker lives as long as its record
	}
	s.markApart(ctx, d.Claim.Key, keep)
	return nil
}

// Requeue puts a dead-lettered event back in its route's lane as a new
// first attempt, accepted now (so RETRY_MAX_AGE counts afresh).
func (s *Store) Requeue(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: requeue %s: %w", key, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	n, err := queueRequeueScript.Run(ctx, s.scripts, s.queue.settleKeys(key), key, s.queue.tag, queueGroup).Int64()
	if err == nil && n == 0 {
		// No async event: a sync record is not failed; nothing is unknown.
		err = dedup.ErrNotFound
		if _, lerr := s.Lookup(ctx, key); lerr == nil {
			err = dedup.ErrNotFailed
		}
	}
	if err == nil && n == -1 {
		err = dedup.ErrNotFailed
	}
	if err != nil {
		return fmt.Errorf("dedup: requeue %s: %w", key, err)
	}
	s.expireMarker(ctx, key, 0)
	return nil
}

// DeadLetters lists up to limit failed events from cursor (empty: the
// first page), in the order they expire, and the cursor of the next page.
func (s *Store) DeadLetters(ctx context.Context, cursor string, limit int) ([]dedup.DeadLetter, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", fmt.Errorf("dedup: dead letters: %w", err)
	}
	if limit <= 0 {
		return nil, "", fmt.Errorf("dedup: dead letters: limit %d is not positive", limit)
	}
	var score, after string
	if cursor != "" {
		raw, err := hex.DecodeString(cursor)
		var ok bool
		score, after, ok = strings.Cut(string(raw), ":")
		if _, perr := strconv.ParseInt(score, 10, 64); err != nil || !ok || perr != nil {
			return nil, "", fmt.Errorf("%w %q", dedup.ErrBadCursor, cursor)
		}
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	v, err := queueDeadScript.Run(ctx, s.scripts, []string{s.queue.dead}, s.queue.tag, limit, score, after).Slice()
	if err != nil {
		return nil, "", fmt.Errorf("dedup: dead letters: %w", err)
	}
	items, _ := v[0].([]any)
	out := make([]dedup.DeadLetter, 0, len(items))
	var last []any
	for _, item := range items {
		f, ok := item.([]any)
		if !ok || len(f) != 6 {
			return nil, "", fmt.Errorf("dedup: dead letters: %w: script answered %T", codec.ErrBadRecord, item)
		}
		attempts, _ := strconv.Atoi(str(f[2]))
		status, _ := strconv.Atoi(str(f[3]))
		failed, _ := strconv.ParseInt(str(f[5]), 10, 64)
		out = append(out, dedup.DeadLetter{Key: str(f[0]), Attempts: attempts, LastStatus: status, LastError: str(f[4]), FailedAt: time.UnixMilli(failed)})
		last = f
	}
	next := ""
	if more, _ := v[1].(int64); more == 1 && last != nil {
		next = hex.EncodeToString([]byte(str(last[1]) + ":" + str(last[0])))
	}
	return out, next, nil
}

// Stats reports the queue's depth, its oldest event's age, the number of
// dead letters and each route's depth, in one script, across every
// route's lane: O(routes), whatever the backlog.
func (s *Store) Stats(ctx context.Context) (dedup.QueueStats, error) {
	if err := ctx.Err(); err != nil {
		return dedup.QueueStats{}, fmt.Errorf("dedup: stats: %w", err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	v, err := queueStatsScript.Run(ctx, s.scripts, append(s.queue.laneKeys(), s.queue.open, s.queue.dead), queueGroup, s.queue.tag).Slice()
	if err != nil {
		return dedup.QueueStats{}, fmt.Errorf("dedup: stats: %w", err)
	}
	if len(v) != 6 {
		return dedup.QueueStats{}, fmt.Errorf("dedup: stats: %w: script answered %d values", codec.ErrBadRecord, len(v))
	}
	open, _ := v[0].(int64)
	held, _ := v[2].(int64)
	dead, _ := v[3].(int64)
	now, _ := v[4].(int64)
	st := dedup.QueueStats{Depth: int(max(0, open-held)), DeadLetters: int(dead)}
	if oldest, err := strconv.ParseFloat(str(v[1]), 64); err == nil {
		st.OldestAge = max(0, time.Duration(now-int64(oldest))*time.Millisecond)
	}
	byRoute, _ := v[5].([]any)
	for i := 0; i+1 < len(byRoute); i += 2 {
		if n, _ := byRoute[i+1].(int64); n > 0 {
			if st.Routes == nil {
				st.Routes = map[string]int{}
			}
			st.Routes[str(byRoute[i])] = int(n)
		}
	}
	return st, nil
}

// lookupAsync returns key's async record, or ErrNotFound.
func (s *Store) lookupAsync(ctx context.Context, key string) (dedup.Record, error) {
	v, err := queueLookupScript.Run(ctx, s.scripts, []string{s.queue.record(key)}, s.queue.tag, key).Result()
	if errors.Is(err, redis.Nil) {
		return dedup.Record{}, dedup.ErrNotFound
	}
	if err != nil {
		return dedup.Record{}, err
	}
	return asyncFromReply(v)
}

// asyncFromReply decodes the {fields, pttl, now} of an async record that
// queue_enqueue.lua returns, and the {fields, pttl, now, head} of
// queue_lookup.lua.
func asyncFromReply(v any) (dedup.Record, error) {
	r, ok := v.([]any)
	if !ok || len(r) < 3 || len(r) > 4 {
		return dedup.Record{}, fmt.Errorf("%w: script answered %T", codec.ErrBadRecord, v)
	}
	now, _ := r[2].(int64)
	rec, _, err := asyncFields(r[0], r[1], now)
	if err == nil && len(r) == 4 {
		rec.Delivery.BlockedBy = str(r[3])
	}
	return rec, err
}

// asyncFields is the async record whose HGETALL is flat and PTTL pttl, at
// now, and when it was accepted.
func asyncFields(flat, pttl any, now int64) (dedup.Record, time.Time, error) {
	fields, _ := flat.([]any)
	ttl, _ := pttl.(int64)
	f := make(map[string]string, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		f[str(fields[i])] = str(fields[i+1])
	}
	num := func(name string) int64 {
		n, _ := strconv.ParseInt(f[name], 10, 64)
		return n
	}
	st, err := strconv.Atoi(f["s"])
	if err != nil {
		return dedup.Record{}, time.Time{}, fmt.Errorf("%w: async record without a state", codec.ErrBadRecord)
	}
	a := codec.Async{
		State:      dedup.State(st),
		Accepted:   num("t"),
		At:         num("n"),
		LastStatus: int(num("ls")),
		Attempts:   int(num("a")),
		LastError:  f["le"],
	}
	switch a.State {
	case dedup.Queued, dedup.Delivering, dedup.Failed:
	case dedup.Completed:
		rec, err := codec.DecodeRecord(f["r"])
		if err != nil || rec.State != dedup.Completed {
			return dedup.Record{}, time.Time{}, fmt.Errorf("%w: completed async record without its result", codec.ErrBadRecord)
		}
		a.Result, a.Completed = rec.Result, rec.Since.Unix()
	default:
		return dedup.Record{}, time.Time{}, fmt.Errorf("%w: async state %d", codec.ErrBadRecord, st)
	}
	rec := a.Record(now)
	rec.TTL = ttlOf(ttl)
	rec.Delivery.History = codec.DecodeHistory([]byte(f["h"]))
	var accepted time.Time
	if a.Accepted > 0 {
		accepted = time.UnixMilli(a.Accepted)
	}
	return rec, accepted, nil
}

// heldBy resolves the record a claim or lookup found at key: the value
// itself, or, for the marker of an async event, its async record. found is
// false for a marker whose async record is gone.
func (s *Store) heldBy(ctx context.Context, key string, v any) (rec dedup.Record, found bool, err error) {
	if pair, ok := v.([]any); ok && len(pair) == 2 && pair[0] == asyncMarker {
		rec, err := s.lookupAsync(ctx, key)
		if errors.Is(err, dedup.ErrNotFound) {
			return dedup.Record{}, false, nil
		}
		return rec, err == nil, err
	}
	rec, err = recordWithTTL(v)
	return rec, err == nil, err
}

// unmark takes back the marker an enqueue that claimed nothing set, unless
// an enqueue of the same event running at once queued it meanwhile (its
// record then holds the key, and needs the marker). Best effort: a marker
// left behind is cleared by the next claim of key.
func (s *Store) unmark(ctx context.Context, key string) {
	if _, err := s.lookupAsync(ctx, key); errors.Is(err, dedup.ErrNotFound) {
		_ = s.clearMarker(ctx, key)
	}
}

// clearMarker deletes key's marker, if it still holds one: its async record
// is gone (a crash between the marker and the enqueue, or a lost write).
func (s *Store) clearMarker(ctx context.Context, key string) error {
	return releaseScript.Run(ctx, s.scripts, []string{key}, asyncMarker).Err()
}

// configGet reads one setting with CONFIG GET, whose answer is a map
// (RESP3) or a flat list of names and values (RESP2).
func configGet(ctx context.Context, c Client, name string) (string, error) {
	v, err := c.Do(ctx, "CONFIG", "GET", name).Result()
	if err != nil {
		return "", err
	}
	switch m := v.(type) {
	case map[any]any:
		if val, ok := m[name]; ok {
			return str(val), nil
		}
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			if str(m[i]) == name {
				return str(m[i+1]), nil
			}
		}
	}
	return "", fmt.Errorf("CONFIG GET %s: no such setting", name)
}
