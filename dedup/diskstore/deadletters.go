package diskstore

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	bolt "go.etcd.io/bbolt"
)

// Requeue puts a dead-lettered event back in the queue as a new first
// attempt, accepted now (so RETRY_MAX_AGE counts afresh).
func (d *Store) Requeue(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: requeue %s: %w", key, err)
	}
	err := d.write(func(b diskBuckets) error {
		now := time.Now().UnixMilli()
		k := []byte(key)
		s, ok := b.get(k, now)
		if !ok {
			return dedup.ErrNotFound
		}
		a, err := codec.DecodeAsync(s.value)
		if err != nil || a.State != dedup.Failed {
			return dedup.ErrNotFailed
		}
		at, err := b.requeued(k, now)
		if err != nil {
			return err
		}
		next := codec.Async{State: dedup.Queued, Accepted: now, At: at}
		return b.putAsync(k, b.routeOf(k), a, next, 0)
	})
	if err != nil {
		return fmt.Errorf("dedup: requeue %s: %w", key, err)
	}
	return nil
}

// DeadLetters lists up to limit failed events, oldest failure first, from
// cursor (empty: the first page), and the cursor of the next page.
func (d *Store) DeadLetters(ctx context.Context, cursor string, limit int) ([]dedup.DeadLetter, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", fmt.Errorf("dedup: dead letters: %w", err)
	}
	if limit <= 0 {
		return nil, "", fmt.Errorf("dedup: dead letters: limit %d is not positive", limit)
	}
	after, err := hex.DecodeString(cursor)
	if err != nil || (cursor != "" && len(after) < 8) {
		return nil, "", fmt.Errorf("%w %q", dedup.ErrBadCursor, cursor)
	}
	var (
		out  []dedup.DeadLetter
		next string
	)
	err = d.view(func(tx *bolt.Tx) error {
		b := buckets(tx)
		now := time.Now().UnixMilli()
		c := b.dead.Cursor()
		k, _ := c.First()
		if len(after) > 0 {
			k, _ = c.Seek(after)
			if bytes.Equal(k, after) {
				k, _ = c.Next()
			}
		}
		for ; k != nil; k, _ = c.Next() {
			s, ok := b.get(k[8:], now)
			if !ok {
				continue // expired; the sweep deletes it
			}
			if len(out) == limit {
				next = hex.EncodeToString(after)
				return nil
			}
			a, err := codec.DecodeAsync(s.value)
			if err != nil {
				return err
			}
			out = append(out, dedup.DeadLetter{
				Key:        string(k[8:]),
				Attempts:   a.Attempts,
				LastStatus: a.LastStatus,
				LastError:  a.LastError,
				FailedAt:   time.UnixMilli(a.At),
			})
			after = bytes.Clone(k)
		}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("dedup: dead letters: %w", err)
	}
	return out, next, nil
}

// Stats reports the queue's depth, its oldest event's age and the number
// of dead letters, from the counts kept in memory (queueCounts): it costs
// the same whatever the backlog, and does not touch the file.
func (d *Store) Stats(ctx context.Context) (dedup.QueueStats, error) {
	if err := ctx.Err(); err != nil {
		return dedup.QueueStats{}, fmt.Errorf("dedup: stats: %w", err)
	}
	return d.counts.stats(time.Now()), nil
}

// count is the number of keys in bucket, for tests.
func (d *Store) count(bucket []byte) int {
	n := 0
	_ = d.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucket).Stats().KeyN
		return nil
	})
	return n
}
