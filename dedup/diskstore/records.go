package diskstore

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/storeop"
	bolt "go.etcd.io/bbolt"
)

// Claim takes key for lease if no record holds it (sync delivery). If the
// key is free it returns the new Claim and a Record in state Absent;
// otherwise a zero Claim and the record that holds the key, of either
// delivery mode.
func (d *Store) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error) {
	if err := storeop.CheckClaim(ctx, key, lease); err != nil {
		return dedup.Claim{}, dedup.Record{}, err
	}
	tok := codec.NewToken()
	k := []byte(key)
	var (
		won bool
		rec dedup.Record
	)
	err := d.write(func(b diskBuckets) error {
		now := time.Now()
		if s, ok := b.get(k, now.UnixMilli()); ok {
			won = false
			var err error
			rec, err = s.record(now.UnixMilli())
			return err
		}
		won = true
		if err := b.deleteAll(k); err != nil { // an expired record
			return err
		}
		return b.put(k, now.Add(lease).UnixMilli(), codec.EncodeInFlight(tok, now.UnixMilli()))
	})
	if err != nil {
		return dedup.Claim{}, dedup.Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	if !won {
		return dedup.Claim{}, rec, nil
	}
	return dedup.Claim{Key: key, Token: hex.EncodeToString(tok[:])}, dedup.Record{State: dedup.Absent}, nil
}

// ownsSync reports whether tok holds key's sync in-flight record.
func (b diskBuckets) ownsSync(key []byte, tok [codec.TokenLen]byte, now int64) bool {
	s, ok := b.get(key, now)
	return ok && bytes.HasPrefix(s.value, codec.OwnerPrefix(tok)) && len(s.value) == codec.InFlightLen
}

// Complete replaces c's in-flight record with a completed one holding res,
// kept for ttl. If c no longer owns its key it returns ErrNotOwner and
// changes nothing.
func (d *Store) Complete(ctx context.Context, c dedup.Claim, res dedup.Result, ttl time.Duration) error {
	tok, err := storeop.CheckComplete(ctx, c, res, ttl)
	if err != nil {
		return err
	}
	owned := false
	err = d.write(func(b diskBuckets) error {
		now := time.Now()
		owned = b.ownsSync([]byte(c.Key), tok, now.UnixMilli())
		if !owned {
			return nil
		}
		return b.put([]byte(c.Key), now.Add(ttl).UnixMilli(), codec.EncodeCompleted(res, now.Unix()))
	})
	if err == nil && !owned {
		err = dedup.ErrNotOwner
	}
	if err != nil {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, err)
	}
	return nil
}

// Release deletes c's in-flight record so the event can be claimed again.
// If c no longer owns its key it returns ErrNotOwner and changes nothing.
func (d *Store) Release(ctx context.Context, c dedup.Claim) error {
	tok, err := storeop.CheckOwned(ctx, "release", c.Key, c.Token)
	if err != nil {
		return err
	}
	owned := false
	err = d.write(func(b diskBuckets) error {
		owned = b.ownsSync([]byte(c.Key), tok, time.Now().UnixMilli())
		if !owned {
			return nil
		}
		return b.deleteAll([]byte(c.Key))
	})
	if err == nil && !owned {
		err = dedup.ErrNotOwner
	}
	if err != nil {
		return fmt.Errorf("dedup: release %s: %w", c.Key, err)
	}
	return nil
}

// Lookup returns the record for key, or ErrNotFound.
func (d *Store) Lookup(ctx context.Context, key string) (dedup.Record, error) {
	if err := ctx.Err(); err != nil {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	var rec dedup.Record
	err := d.view(func(tx *bolt.Tx) error {
		now := time.Now().UnixMilli()
		b := buckets(tx)
		s, ok := b.get([]byte(key), now)
		if !ok {
			return dedup.ErrNotFound
		}
		var err error
		rec, err = s.record(now)
		if err == nil && len(s.value) > 0 && s.value[0] == codec.TagAsync {
			rec.Delivery.History = b.history([]byte(key))
		}
		if rec.State == dedup.Queued {
			rec.Delivery.BlockedBy = b.blockedBy([]byte(key))
		}
		return err
	})
	if err != nil {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	return rec, nil
}

// Forget deletes the record for key, whatever its state, with its queued
// request if it has one, and reports whether there was one.
func (d *Store) Forget(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	had := false
	err := d.write(func(b diskBuckets) error {
		_, had = b.get([]byte(key), time.Now().UnixMilli())
		return b.deleteAll([]byte(key))
	})
	if err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	return had, nil
}
