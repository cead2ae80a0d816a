package diskstore

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/storeop"
	bolt "go.etcd.io/bbolt"
)

// depth is the depth of the queue (Stats' Depth) as b's write sees it:
// what the transactions before it committed, and what the writes before
// it in its own transaction changed.
func (d *Store) depth(b diskBuckets, now int64) int {
	return d.counts.depth(now) + b.tally.waiting
}

// Enqueue claims key and stores req for delivery in one transaction,
// committed to the file before it returns. If the key was free it returns
// true; otherwise false and the record that holds the key. With maxDepth,
// the depth is checked in the same transaction: exact, as one process
// holds the file.
func (d *Store) Enqueue(ctx context.Context, key string, req dedup.Request, maxDepth int) (bool, dedup.Record, error) {
	if err := ctx.Err(); err != nil {
		return false, dedup.Record{}, fmt.Errorf("dedup: enqueue %s: %w", key, err)
	}
	payload := codec.EncodeRequest(req)
	var (
		won, full bool
		rec       dedup.Record
	)
	err := d.write(func(b diskBuckets) error {
		now := time.Now().UnixMilli()
		k := []byte(key)
		won, full = false, false
		if s, ok := b.get(k, now); ok {
			var err error
			rec, err = s.record(now)
			return err
		}
		if maxDepth > 0 && d.depth(b, now) >= maxDepth {
			full = true
			return nil
		}
		won = true
		if err := b.deleteAll(k); err != nil { // an expired record
			return err
		}
		a := codec.Async{State: dedup.Queued, Accepted: now, At: now}
		if req.OrderKey != "" {
			head, err := b.join(k, req.OrderKey, req.OrderBlock)
			if err != nil {
				return err
			}
			if !head {
				a.At = codec.Waiting
			}
		}
		if err := b.requests.Put(k, payload); err != nil {
			return err
		}
		return b.putAsync(k, req.Route, codec.Async{}, a, 0)
	})
	if err == nil && full {
		err = dedup.ErrQueueFull
	}
	if err != nil {
		return false, dedup.Record{}, fmt.Errorf("dedup: enqueue %s: %w", key, err)
	}
	return won, rec, nil
}

// Take hands out at most n due deliveries of lane, each leased for lease.
func (d *Store) Take(ctx context.Context, lane dedup.Lane, n int, lease time.Duration) ([]dedup.Delivery, error) {
	if take, err := storeop.CheckTake(ctx, n, lease); !take {
		return nil, err
	}
	// Workers poll: an empty poll reads, and commits nothing.
	var due bool
	err := d.view(func(tx *bolt.Tx) error {
		due = len(buckets(tx).dueIn(lane, time.Now().UnixMilli(), 1)) > 0
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dedup: take: %w", err)
	}
	if !due {
		return nil, nil
	}
	var out []dedup.Delivery
	err = d.write(func(b diskBuckets) error {
		out = out[:0]
		now := time.Now()
		for _, e := range b.dueIn(lane, now.UnixMilli(), n) {
			dl, ok, err := b.take(e, now, lease)
			if err != nil {
				return err
			}
			if ok {
				out = append(out, dl)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dedup: take: %w", err)
	}
	return out, nil
}

// take leases e's event to its taker for lease from now, and reports
// whether it did: not when e is no longer its record's entry (it is
// dropped, rather than stall the lane on it), nor when the event's
// request cannot be read (it is dead-lettered, rather than stall every
// Take on it).
func (b diskBuckets) take(e dueEntry, now time.Time, lease time.Duration) (dedup.Delivery, bool, error) {
	ms := now.UnixMilli()
	a, ok := b.entryRecord(e, ms)
	if !ok {
		return dedup.Delivery{}, false, b.lanes.Bucket(laneName(e.route)).Delete(e.idx)
	}
	key := e.key()
	req, err := codec.DecodeRequest(b.requests.Get(key))
	if err != nil {
		failed := a
		failed.State, failed.At, failed.LastStatus = dedup.Failed, ms, 0
		failed.LastError = "the stored request cannot be read: " + err.Error()
		expires, err := b.settled(key, dedup.Failed, now.Add(storeop.UnreadableKeep).UnixMilli(), ms)
		if err != nil {
			return dedup.Delivery{}, false, err
		}
		return dedup.Delivery{}, false, b.putAsync(key, e.route, a, failed, expires)
	}
	next := a
	next.State = dedup.Delivering
	next.Token = codec.NewToken()
	next.Attempts++
	next.At = now.Add(lease).UnixMilli()
	if err := b.putAsync(key, e.route, a, next, 0); err != nil {
		return dedup.Delivery{}, false, err
	}
	return dedup.Delivery{
		Claim:      dedup.Claim{Key: string(key), Token: hex.EncodeToString(next.Token[:])},
		Request:    req,
		Attempt:    next.Attempts,
		AcceptedAt: time.UnixMilli(a.Accepted),
	}, true, nil
}

// Extend renews dl's lease for lease from now, if dl still holds its
// event.
func (d *Store) Extend(ctx context.Context, dl dedup.Delivery, lease time.Duration) error {
	tok, err := storeop.CheckExtend(ctx, dl, lease)
	if err != nil {
		return err
	}
	err = d.write(func(b diskBuckets) error {
		now := time.Now()
		key := []byte(dl.Claim.Key)
		a, ok := b.heldBy(key, tok, now.UnixMilli())
		if !ok {
			return dedup.ErrNotOwner
		}
		next := a
		next.At = now.Add(lease).UnixMilli()
		return b.putAsync(key, b.routeOf(key), a, next, 0)
	})
	if err != nil {
		return fmt.Errorf("dedup: extend %s: %w", dl.Claim.Key, err)
	}
	return nil
}

// heldBy is key's record if tok holds its delivery: taken with tok, and
// neither taken over, settled nor forgotten since (its lease may have run
// out, but while no one took it over the delivery is still tok's).
func (b diskBuckets) heldBy(key []byte, tok [codec.TokenLen]byte, now int64) (codec.Async, bool) {
	s, ok := b.get(key, now)
	if !ok {
		return codec.Async{}, false
	}
	a, err := codec.DecodeAsync(s.value)
	if err != nil || a.State != dedup.Delivering || a.Token != tok {
		return codec.Async{}, false
	}
	return a, true
}

// settle ends dl's attempt, if dl still holds its event: the record drops
// dl's token and keeps the attempt's status and reason, and change sets
// the rest of its next state and returns its expiry.
func (d *Store) settle(ctx context.Context, op string, dl dedup.Delivery, status int, reason string, change func(next *codec.Async, now time.Time) (expires int64)) error {
	if err := codec.CheckResult(dedup.Result{Status: status}); err != nil {
		return fmt.Errorf("dedup: %s %s: %w", op, dl.Claim.Key, err)
	}
	tok, err := storeop.CheckOwned(ctx, op, dl.Claim.Key, dl.Claim.Token)
	if err != nil {
		return err
	}
	err = d.write(func(b diskBuckets) error {
		now := time.Now()
		key := []byte(dl.Claim.Key)
		s, ok := b.get(key, now.UnixMilli())
		if !ok {
			return dedup.ErrNotOwner
		}
		a, err := codec.DecodeAsync(s.value)
		if err == nil && op == "succeed" && a.State == dedup.Completed && a.Token == tok {
			return nil // done already: a repeat whose first answer was lost
		}
		if err != nil || a.State != dedup.Delivering || a.Token != tok {
			return dedup.ErrNotOwner
		}
		next := a
		if op != "succeed" {
			// A completed record keeps the token that completed it, so
			// that its holder's repeat is recognised.
			next.Token = [codec.TokenLen]byte{}
		}
		next.LastStatus, next.LastError = status, reason
		if err := b.addAttempt(key, dl, status, reason); err != nil {
			return err
		}
		expires, err := b.settled(key, next.State, change(&next, now), now.UnixMilli())
		if err != nil {
			return err
		}
		route := b.routeOf(key) // before a completion drops the request
		if next.State == dedup.Completed {
			if err := b.requests.Delete(key); err != nil {
				return err
			}
		}
		return b.putAsync(key, route, a, next, expires)
	})
	if err != nil {
		return fmt.Errorf("dedup: %s %s: %w", op, dl.Claim.Key, err)
	}
	return nil
}

// Succeed completes dl's event with res, kept for ttl, and drops its request.
func (d *Store) Succeed(ctx context.Context, dl dedup.Delivery, res dedup.Result, ttl time.Duration) error {
	if err := storeop.CheckDuration("ttl", ttl); err != nil {
		return fmt.Errorf("dedup: succeed %s: %w", dl.Claim.Key, err)
	}
	return d.settle(ctx, "succeed", dl, res.Status, "", func(a *codec.Async, now time.Time) int64 {
		a.State, a.At = dedup.Completed, 0
		a.Result, a.Completed = res, now.Unix()
		return now.Add(ttl).UnixMilli()
	})
}

// Retry gives dl back to the queue, due again at next.
func (d *Store) Retry(ctx context.Context, dl dedup.Delivery, next time.Time, status int, reason string) error {
	return d.settle(ctx, "retry", dl, status, reason, func(a *codec.Async, _ time.Time) int64 {
		a.State, a.At = dedup.Queued, next.UnixMilli()
		return 0
	})
}

// Fail dead-letters dl's event, kept with its request for keep.
func (d *Store) Fail(ctx context.Context, dl dedup.Delivery, status int, reason string, keep time.Duration) error {
	if err := storeop.CheckDuration("keep", keep); err != nil {
		return fmt.Errorf("dedup: fail %s: %w", dl.Claim.Key, err)
	}
	return d.settle(ctx, "fail", dl, status, reason, func(a *codec.Async, now time.Time) int64 {
		a.State, a.At = dedup.Failed, now.UnixMilli()
		return now.Add(keep).UnixMilli()
	})
}
