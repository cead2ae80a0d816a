package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/storeop"
	"go.uber.org/zap"
)

// Take hands out at most n due deliveries of lane in one script, drawing
// on the streams of the lane's routes only: first what a Take of this
// process leased but never heard back about (lostTakes), then, route by
// route, retries whose time has come go back onto the stream, XAUTOCLAIM
// takes over entries whose holder has not settled them for lease, and
// XREADGROUP reads new ones. Every replica passes the same lease
// (LEASE_TTL): a delivery is taken over once it has been held that long.
func (s *Store) Take(ctx context.Context, lane dedup.Lane, n int, lease time.Duration) ([]dedup.Delivery, error) {
	if take, err := storeop.CheckTake(ctx, n, lease); !take {
		return nil, err
	}
	if err := s.owner.Checked(ctx); err != nil {
		return nil, fmt.Errorf("dedup: take: %w", err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	lost := s.lost.claim(laneID(lane))
	// Whether the group was seen before this Take was sent: one found
	// missing then was lost. Read later, a Take of another lane that ran
	// after this one's recreation (and found the group) would have set it,
	// and a new queue would be logged as one Redis lost.
	seen := s.groupSeen.Load()
	out, missing, err := s.take(ctx, lane, n, lease, lost)
	if err != nil {
		s.lost.restore(lost)
		return nil, fmt.Errorf("dedup: take: %w", err)
	}
	if missing {
		// A consumer group is gone: create it again, queue again what
		// its stream lost, and take what is left to take. What was
		// taken already is handed out whatever happens next: its
		// leases are written.
		err := s.recreateGroups(ctx, seen)
		if err == nil && len(out) < n {
			var more []dedup.Delivery
			more, _, err = s.take(ctx, lane, n-len(out), lease, nil)
			out = append(out, more...)
		}
		if err != nil && len(out) == 0 {
			return nil, fmt.Errorf("dedup: take: %w", err)
		}
	}
	s.groupSeen.Store(true)
	s.maybePrune(ctx)
	return out, nil
}

// take runs queue_take.lua once as a new call (newTakeCall), passing the
// lost Takes to resolve, and reports whether a consumer group was
// missing. Once it has answered, the lost Takes are resolved: fenced, and
// what they leased handed out again or given back to the queue.
func (s *Store) take(ctx context.Context, lane dedup.Lane, n int, lease time.Duration, lost []lostTake) (out []dedup.Delivery, missing bool, err error) {
	return s.takeAs(ctx, lane, n, lease, newTakeCall(n), lost)
}

// takeAs runs queue_take.lua as call, which must be new to the script but
// for a test playing a lost Take that runs late. When the script may have
// run but its answer did not come back (a timeout, a cut connection),
// call is remembered (lostTakes): the next Take of lane fences its take
// ID, and the deliveries it leased under its tokens go to that Take, not
// to their lease's end.
func (s *Store) takeAs(ctx context.Context, lane dedup.Lane, n int, lease time.Duration, call takeCall, lost []lostTake) (out []dedup.Delivery, missing bool, err error) {
	args := []any{queueGroup, s.consumer, n, storeop.Millis(lease), s.queue.tag}
	if lane.Rest {
		args = append(args, "rest", s.turns.Add(1)%(1<<40), len(lane.Except))
		for _, r := range lane.Except {
			args = append(args, r)
		}
	} else {
		args = append(args, "route", lane.Route, 0)
	}
	args = append(args, call.id, len(lost))
	var toks []string
	for _, lt := range lost {
		args = append(args, lt.id)
		toks = append(toks, lt.tokens...)
	}
	args = append(args, len(toks))
	for _, tok := range toks {
		args = append(args, tok)
	}
	for _, tok := range call.tokens {
		args = append(args, tok)
	}
	v, err := queueTakeScript.Run(ctx, s.scripts, s.queue.takeKeys(), args...).Slice()
	if err != nil {
		if mayHaveRun(err) {
			s.lost.add(laneID(lane), call)
		}
		return nil, false, err
	}
	var items []any
	ok := len(v) == 2
	if ok {
		items, ok = v[0].([]any)
	}
	if !ok {
		s.lost.add(laneID(lane), call)
		return nil, false, fmt.Errorf("%w: script answered %d values", codec.ErrBadRecord, len(v))
	}
	out = make([]dedup.Delivery, 0, len(items))
	for _, item := range items {
		f, ok := item.([]any)
		if !ok || len(f) != 6 {
			// Nothing handed out: every lease it wrote is lost to
			// the caller, as if the answer had not come back.
			s.lost.add(laneID(lane), call)
			return nil, false, fmt.Errorf("%w: script answered %T", codec.ErrBadRecord, item)
		}
		key, _ := f[0].(string)
		tok, _ := f[2].(string)
		attempt, _ := f[3].(int64)
		accepted, _ := strconv.ParseInt(str(f[4]), 10, 64)
		payload, _ := f[5].(string)
		d := dedup.Delivery{Claim: dedup.Claim{Key: key, Token: tok}, Attempt: int(attempt), AcceptedAt: time.UnixMilli(accepted)}
		req, err := codec.DecodeRequest([]byte(payload))
		if err != nil {
			// Never deliverable: dead-letter it rather than hand it
			// out again after every lease.
			_ = s.Fail(ctx, d, 0, "the stored request cannot be read: "+err.Error(), storeop.UnreadableKeep)
			continue
		}
		d.Request = req
		out = append(out, d)
	}
	gone, _ := v[1].(int64)
	return out, gone == 1, nil
}

// Extend renews d's lease for lease from now, in one script: its lease end
// moves, and its entry's idle time starts again, so that neither check of
// a takeover passes before the new end. ErrNotOwner if d's token no longer
// holds it.
func (s *Store) Extend(ctx context.Context, d dedup.Delivery, lease time.Duration) error {
	if _, err := storeop.CheckExtend(ctx, d, lease); err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	key := d.Claim.Key
	n, err := queueExtendScript.Run(ctx, s.scripts, []string{s.queue.record(key)},
		queueGroup, key, d.Claim.Token, s.queue.tag, storeop.Millis(lease), s.consumer).Int64()
	if err != nil {
		return fmt.Errorf("dedup: extend %s: %w", key, err)
	}
	if n != 1 {
		return fmt.Errorf("dedup: extend %s: %w", key, dedup.ErrNotOwner)
	}
	return nil
}

// Consumers of processes gone are deleted from the groups by a Take, at
// most once per pruneEvery per process, once idle for consumerIdle with
// nothing pending. A live consumer polls all the time, and one deleted
// anyway is created again by its next read.
const (
	pruneEvery   = time.Hour
	consumerIdle = 24 * time.Hour
)

// maybePrune deletes the groups' dead consumers if it is time. It is best
// effort: a failure only leaves them listed until the next time.
func (s *Store) maybePrune(ctx context.Context) {
	now := time.Now().UnixNano()
	last := s.lastPrune.Load()
	if now-last < int64(pruneEvery) || !s.lastPrune.CompareAndSwap(last, now) {
		return
	}
	_, _ = s.pruneConsumers(ctx, consumerIdle)
}

// pruneConsumers deletes, from every route's group, the consumers idle for
// idle with nothing pending, and says how many.
func (s *Store) pruneConsumers(ctx context.Context, idle time.Duration) (int64, error) {
	return queuePruneScript.Run(ctx, s.scripts, s.queue.laneKeys(), queueGroup, idle.Milliseconds(), s.consumer, s.queue.tag).Int64()
}

// recreateGroups creates the consumer groups that are missing (with their
// streams): on a new Redis, or one that lost its data (restarted without
// persistence, failed over to a replica that had not received the group,
// or flushed). Events still listed as open are queued again; the log says
// what happened: a loss if seen (a Take of this process had found the
// group before the one that found it missing was sent) or events were
// queued again, else a new queue.
func (s *Store) recreateGroups(ctx context.Context, seen bool) error {
	v, err := queueRecoverScript.Run(ctx, s.scripts, append(s.queue.laneKeys(), s.queue.open), queueGroup, s.queue.tag).Slice()
	if err != nil {
		return fmt.Errorf("recreate the consumer groups and queue the open events again: %w", err)
	}
	if len(v) != 2 {
		return fmt.Errorf("recreate the consumer groups: %w: script answered %d values", codec.ErrBadRecord, len(v))
	}
	created, _ := v[0].(int64)
	n, _ := v[1].(int64)
	stream := s.queue.stream("")
	switch {
	case created == 0 && n == 0:
		// Another process recreated them first, and says so.
	case seen || n > 0:
		s.log.Error("the async queue's consumer group was missing from Redis, which lost data this proxy had written "+
			"(a restart without persistence, a failover to a replica that had not received it, or a flush); recreated it. "+
			"Events accepted before and not yet delivered are lost unless their records survived; those that did are queued again",
			zap.String("stream", stream), zap.Int64("groups", created), zap.Int64("requeued", n))
	default:
		s.log.Info("created the async queue's consumer group (a new queue; had this Redis held one, it lost it)",
			zap.String("stream", stream))
	}
	return nil
}
