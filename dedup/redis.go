package dedup

import (
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
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
	releaseScript  = redis.NewScript(releaseLua)
	lookupScript   = redis.NewScript(lookupLua)
)

// Client is what the Redis store needs from go-redis. *redis.Client (also
// from redis.NewFailoverClient), *redis.ClusterClient, *redis.Ring and
// redis.UniversalClient all satisfy it.
type Client interface {
	redis.Scripter
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	Ping(ctx context.Context) *redis.StatusCmd
}

// RedisConfig says how to reach Redis.
type RedisConfig struct {
	// URL is redis://[user:password@]host:port[/db][?option=value] or
	// rediss:// for TLS, as read by redis.ParseURL. Options in the query
	// (dial_timeout, pool_size, ...) override this package's defaults.
	// Required.
	URL string
}

// Defaults for what the URL leaves unset: short timeouts, so a Redis outage
// costs a request a second or two rather than go-redis's default minutes
// of retries, and a pool large enough for one connection per concurrent
// request on a busy proxy.
const (
	defaultDialTimeout  = 2 * time.Second
	defaultReadTimeout  = time.Second
	defaultWriteTimeout = time.Second
)

// Redis is a store kept in Redis: one key per event ID, written and read
// with single-key commands and scripts. It is safe for concurrent use.
type Redis struct {
	client Client
}

// OpenRedis connects to the Redis at cfg.URL. It does not wait for Redis to
// answer: use Ping for that (a proxy may start before its Redis).
func OpenRedis(cfg RedisConfig) (*Redis, error) {
	if cfg.URL == "" {
		return nil, errors.New("dedup: redis URL is empty")
	}
	// Checked before parsing so an unparseable URL is not echoed back: it
	// may carry a password.
	scheme, _, _ := strings.Cut(cfg.URL, "://")
	if scheme != "redis" && scheme != "rediss" {
		return nil, errors.New("dedup: redis URL must start with redis:// or rediss://")
	}
	opt, err := redis.ParseURL(cfg.URL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the URL, password included
		}
		return nil, fmt.Errorf("dedup: redis URL: %w", err)
	}
	if opt.DialTimeout == 0 {
		opt.DialTimeout = defaultDialTimeout
	}
	if opt.ReadTimeout == 0 {
		opt.ReadTimeout = defaultReadTimeout
	}
	if opt.WriteTimeout == 0 {
		opt.WriteTimeout = defaultWriteTimeout
	}
	if opt.PoolSize == 0 {
		opt.PoolSize = 10 * runtime.GOMAXPROCS(0)
	}
	if opt.MinIdleConns == 0 {
		opt.MinIdleConns = runtime.GOMAXPROCS(0)
	}
	// One dial per attempt: go-redis already retries the command
	// (MaxRetries), and nesting its 5 dial attempts inside that made each
	// call take about 1.5s to fail while Redis was down, where about 0.1s
	// is enough to tell. The URL cannot set this option.
	opt.DialerRetries = 1
	// A request's deadline bounds its Redis call too.
	opt.ContextTimeoutEnabled = true
	return NewRedis(redis.NewClient(opt)), nil
}

// NewRedis returns a store that uses c. Close closes c.
func NewRedis(c Client) *Redis {
	return &Redis{client: c}
}

// Close closes the client, if it can be closed.
func (s *Redis) Close() error {
	if c, ok := s.client.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Claim takes key for lease if no record holds it, in one round trip. If
// the key is free it returns the new Claim and a Record in state Absent
// (the state before the claim); otherwise a zero Claim and the record that
// holds the key.
func (s *Redis) Claim(ctx context.Context, key string, lease time.Duration) (Claim, Record, error) {
	if err := ctx.Err(); err != nil {
		return Claim{}, Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	if err := checkDuration("lease", lease); err != nil {
		return Claim{}, Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	tok := newToken()
	value := encodeInFlight(tok, time.Now().UnixMilli())
	v, err := claimScript.Run(ctx, s.client, []string{key}, value, millis(lease)).Result()
	if err != nil {
		return Claim{}, Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	if n, ok := v.(int64); ok && n == 1 {
		return Claim{Key: key, Token: hex.EncodeToString(tok[:])}, Record{State: Absent}, nil
	}
	rec, err := recordWithTTL(v)
	if err != nil {
		return Claim{}, Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	return Claim{}, rec, nil
}

// Complete replaces c's in-flight record with a completed one holding res,
// kept for ttl. If c no longer owns its key it returns ErrNotOwner and
// changes nothing.
func (s *Redis) Complete(ctx context.Context, c Claim, res Result, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, err)
	}
	if err := checkDuration("ttl", ttl); err != nil {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, err)
	}
	if err := checkResult(res); err != nil {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, err)
	}
	tok, ok := parseToken(c.Token)
	if !ok {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, ErrNotOwner)
	}
	value := encodeCompleted(res, time.Now().UnixMilli())
	n, err := completeScript.Run(ctx, s.client, []string{c.Key}, ownerPrefix(tok), value, millis(ttl)).Int64()
	if err != nil {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, err)
	}
	if n != 1 {
		return fmt.Errorf("dedup: complete %s: %w", c.Key, ErrNotOwner)
	}
	return nil
}

// Release deletes c's in-flight record so the event can be claimed again.
// If c no longer owns its key it returns ErrNotOwner and changes nothing.
func (s *Redis) Release(ctx context.Context, c Claim) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: release %s: %w", c.Key, err)
	}
	tok, ok := parseToken(c.Token)
	if !ok {
		return fmt.Errorf("dedup: release %s: %w", c.Key, ErrNotOwner)
	}
	n, err := releaseScript.Run(ctx, s.client, []string{c.Key}, ownerPrefix(tok)).Int64()
	if err != nil {
		return fmt.Errorf("dedup: release %s: %w", c.Key, err)
	}
	if n != 1 {
		return fmt.Errorf("dedup: release %s: %w", c.Key, ErrNotOwner)
	}
	return nil
}

// Lookup returns the record for key, or ErrNotFound.
func (s *Redis) Lookup(ctx context.Context, key string) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	v, err := lookupScript.Run(ctx, s.client, []string{key}).Result()
	if errors.Is(err, redis.Nil) {
		return Record{}, fmt.Errorf("dedup: lookup %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	rec, err := recordWithTTL(v)
	if err != nil {
		return Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	return rec, nil
}

// Forget deletes the record for key, whatever its state, and reports
// whether there was one.
func (s *Redis) Forget(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	n, err := s.client.Del(ctx, key).Result()
	if err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	return n > 0, nil
}

// Ping checks that Redis answers.
func (s *Redis) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	return nil
}

// recordWithTTL decodes the {value, pttl} pair the claim and lookup scripts
// return.
func recordWithTTL(v any) (Record, error) {
	pair, ok := v.([]any)
	if !ok || len(pair) != 2 {
		return Record{}, fmt.Errorf("%w: script answered %T", errBadRecord, v)
	}
	value, ok1 := pair[0].(string)
	pttl, ok2 := pair[1].(int64)
	if !ok1 || !ok2 {
		return Record{}, fmt.Errorf("%w: script answered %T, %T", errBadRecord, pair[0], pair[1])
	}
	rec, err := decodeRecord(value)
	if err != nil {
		return Record{}, err
	}
	if pttl > 0 { // -1: no expiry, only if set by hand; TTL stays 0
		rec.TTL = time.Duration(pttl) * time.Millisecond
	}
	return rec, nil
}
