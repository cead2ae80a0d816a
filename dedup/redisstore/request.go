package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
)

var (
	//go:embed queue_request.lua
	queueRequestLua    string
	queueRequestScript = redis.NewScript(queueRequestLua)
)

// Request returns the request key's event was queued with ({p}#req:K,
// kept until the event is delivered, and as long as its dead letter).
// Without an async record, the sync key tells a sync route's record
// (ErrNoRequest) from none (ErrNotFound).
func (s *Store) Request(ctx context.Context, key string) (dedup.Request, error) {
	if err := ctx.Err(); err != nil {
		return dedup.Request{}, fmt.Errorf("dedup: request %s: %w", key, err)
	}
	if err := s.owner.Checked(ctx); err != nil {
		return dedup.Request{}, fmt.Errorf("dedup: request %s: %w", key, err)
	}
	octx, cancel := s.bound(ctx)
	defer cancel()
	v, err := queueRequestScript.Run(octx, s.scripts, []string{s.queue.record(key), s.queue.request(key)}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		if _, err := s.Lookup(ctx, key); err != nil {
			return dedup.Request{}, fmt.Errorf("dedup: request: %w", err) // names the key
		}
		return dedup.Request{}, fmt.Errorf("dedup: request %s: %w", key, dedup.ErrNoRequest)
	case err != nil:
		return dedup.Request{}, fmt.Errorf("dedup: request %s: %w", key, err)
	}
	payload, ok := v.(string)
	if !ok {
		return dedup.Request{}, fmt.Errorf("dedup: request %s: %w", key, dedup.ErrNoRequest)
	}
	req, err := codec.DecodeRequest([]byte(payload))
	if err != nil {
		return dedup.Request{}, fmt.Errorf("dedup: request %s: %w", key, err)
	}
	return req, nil
}
