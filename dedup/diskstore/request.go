package diskstore

import (
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
)

// Request returns the request key's event was queued with, read from the
// requests bucket in the transaction that finds its record live: the
// request goes with the record (deleteAll) and when it is delivered.
func (d *Store) Request(ctx context.Context, key string) (dedup.Request, error) {
	if err := ctx.Err(); err != nil {
		return dedup.Request{}, fmt.Errorf("dedup: request %s: %w", key, err)
	}
	var req dedup.Request
	err := d.view(func(tx *bolt.Tx) error {
		b := buckets(tx)
		if _, ok := b.get([]byte(key), time.Now().UnixMilli()); !ok {
			return dedup.ErrNotFound
		}
		v := b.requests.Get([]byte(key))
		if v == nil {
			return dedup.ErrNoRequest
		}
		var err error
		req, err = codec.DecodeRequest(v) // shares no memory with v
		return err
	})
	if err != nil {
		return dedup.Request{}, fmt.Errorf("dedup: request %s: %w", key, err)
	}
	return req, nil
}
