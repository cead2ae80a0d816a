package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/storeop"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// Each topology's client fits Client.
var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
)

func openRedis(t testing.TB, srv *redistest.Server) *Store {
	t.Helper()
	s, err := Open(Config{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestRedis(t *testing.T) {
	storetest.Run(t, redisBackends(Config{URL: redistest.New(t).URL()}))
}

// TestRedisCached runs the conformance suite through the cache of
// completed records (CACHE_SIZE), over Redis.
func TestRedisCached(t *testing.T) {
	open := redisBackends(Config{URL: redistest.New(t).URL()})
	storetest.Run(t, func(t *testing.T) (dedup.Backend, func() dedup.Backend) {
		b, again := open(t)
		cached := func(b dedup.Backend) dedup.Backend { return dedup.WithCache(b, dedup.CacheConfig{Size: 100}) }
		return cached(b), func() dedup.Backend { return cached(again()) }
	})
}

func BenchmarkRedis(b *testing.B) {
	b.Run("store", func(b *testing.B) { storetest.Bench(b, openRedis(b, redistest.New(b)).Backend()) })
	// The cache answers duplicates of completed events from memory.
	b.Run("cached", func(b *testing.B) {
		storetest.Bench(b, dedup.WithCache(openRedis(b, redistest.New(b)).Backend(), dedup.CacheConfig{Size: 10000}))
	})
}

func TestRedisPingAcrossOutage(t *testing.T) {
	srv := redistest.New(t)
	s := openRedis(t, srv)
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping with Redis up: %v", err)
	}
	srv.Stop()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping with Redis stopped succeeded")
	}
	if _, _, err := s.Claim(ctx, "outage", storetest.Lease); err == nil {
		t.Fatal("Claim with Redis stopped succeeded")
	}
	srv.Start()
	storetest.Eventually(t, "Ping to succeed after Redis restarts", func() bool { return s.Ping(ctx) == nil })
	if _, rec, err := s.Claim(ctx, "outage", storetest.Lease); err != nil || rec.State != dedup.Absent {
		t.Errorf("Claim after restart = %v, %v; want a fresh claim", rec.State, err)
	}
}

func TestOpenRedisBadURL(t *testing.T) {
	for _, tc := range []struct {
		name, url, want string
	}{
		{"empty", "", "no Redis"},
		{"no scheme", "localhost:6379", "redis://"},
		{"other scheme", "http://localhost:6379", "redis://"},
		{"unparseable", "redis://user:s3cret@%zz:6379", "invalid"},
		{"bad database", "redis://:s3cret@localhost:6379/zero", "database"},
		{"bad option", "redis://localhost:6379?dial_timeout=soon", "dial_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(Config{URL: tc.url})
			if err == nil {
				_ = s.Close()
				t.Fatal("OpenRedis succeeded")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "dedup: ") || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q, want it to start with \"dedup: \" and mention %q", msg, tc.want)
			}
			if strings.Contains(msg, "s3cret") {
				t.Errorf("error %q repeats the password", msg)
			}
		})
	}
}

func TestOpenRedisDefaults(t *testing.T) {
	for _, tc := range []struct {
		name        string
		url         string
		dial, read  time.Duration
		minPoolSize int
	}{
		{"defaults", "redis://localhost:6379", 2 * time.Second, time.Second, 10},
		{"URL options win", "redis://localhost:6379?dial_timeout=5s&read_timeout=3s&pool_size=1", 5 * time.Second, 3 * time.Second, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(Config{URL: tc.url})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			opt := s.client.(server).Options()
			if opt.DialTimeout != tc.dial || opt.ReadTimeout != tc.read || opt.PoolSize < tc.minPoolSize {
				t.Errorf("DialTimeout %s, ReadTimeout %s, PoolSize %d; want %s, %s, at least %d",
					opt.DialTimeout, opt.ReadTimeout, opt.PoolSize, tc.dial, tc.read, tc.minPoolSize)
			}
			if !opt.ContextTimeoutEnabled {
				t.Error("ContextTimeoutEnabled is off: request deadlines would not bound Redis calls")
			}
		})
	}
}

// TestRedisCompact runs the store's conformance cases with compact
// records written (the queue's records are the same either way).
func TestRedisCompact(t *testing.T) {
	open := redisBackends(Config{URL: redistest.New(t).URL(), CompactRecords: true})
	storetest.Run(t, func(t *testing.T) (dedup.Backend, func() dedup.Backend) {
		b, _ := open(t)
		b.Queue, b.Wake, b.Features.Queue, b.Features.Wake = nil, nil, false, false
		return b, nil
	})
}

// TestRedisRecordForms: a completed record is written in the form its
// store's setting asks for where that form holds it (the compact one kept
// by Redis as an integer, the binary one as a 12-byte embstr), and read
// back alike by a store of either setting: releases side by side on one
// Redis, during a rolling upgrade or a rollback, read each other's records.
func TestRedisRecordForms(t *testing.T) {
	srv := redistest.New(t)
	raw := rawClient(t, srv)
	ctx := context.Background()
	stores := map[bool]*Store{}
	for _, compact := range []bool{false, true} {
		s, err := Open(Config{URL: srv.URL(), CompactRecords: compact})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[compact] = s
	}
	fp := storetest.Replayed.Fingerprint
	for _, tc := range []struct {
		name    string
		compact bool
		res     dedup.Result
		ttl     time.Duration
		enc     string // OBJECT ENCODING
		len     int64  // STRLEN
	}{
		{"binary, 200", false, dedup.Result{Status: 200, Fingerprint: fp}, 96 * time.Hour, "embstr", codec.CompletedLen},
		{"compact, 200", true, dedup.Result{Status: 200, Fingerprint: fp}, 96 * time.Hour, "int", 0},
		{"compact, 204 without fingerprint", true, dedup.Result{Status: 204}, time.Hour, "int", 0},
		{"compact, Adyen's 31 days", true, dedup.Result{Status: 202, Fingerprint: fp}, 31 * 24 * time.Hour, "int", 0},
		{"compact asked, 299: binary", true, dedup.Result{Status: 299, Fingerprint: fp}, time.Hour, "embstr", codec.CompletedLen},
		{"compact asked, 60 days: binary", true, dedup.Result{Status: 200, Fingerprint: fp}, 60 * 24 * time.Hour, "embstr", codec.CompletedLen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "webhook-dedup:stripe:evt_1NvYwq2eZvKYlo2CqCvP3X7T/" + tc.name
			c, _ := storetest.MustClaim(t, stores[tc.compact], key, storetest.Lease)
			before := time.Now()
			if err := stores[tc.compact].Complete(ctx, c, tc.res, tc.ttl); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			if enc := raw.ObjectEncoding(ctx, key).Val(); enc != tc.enc {
				t.Errorf("OBJECT ENCODING = %q, want %q", enc, tc.enc)
			}
			if n := raw.StrLen(ctx, key).Val(); tc.len != 0 && n != tc.len {
				t.Errorf("STRLEN = %d, want %d", n, tc.len)
			}
			usage := raw.MemoryUsage(ctx, key).Val()
			t.Logf("%d-byte key, MEMORY USAGE %d bytes", len(key), usage)
			for _, compact := range []bool{false, true} {
				rec := storetest.MustLookup(t, stores[compact], key)
				if rec.State != dedup.Completed || rec.Result.Status != tc.res.Status || !rec.Result.SameBody(tc.res.Fingerprint) || rec.Result.KnownBody() != tc.res.KnownBody() {
					t.Errorf("read by a store with CompactRecords %v: %+v, want %+v", compact, rec, tc.res)
				}
				if rec.Since.Before(before.Truncate(time.Second)) || rec.Since.After(after) || rec.TTL <= 0 || rec.TTL > tc.ttl {
					t.Errorf("read by a store with CompactRecords %v: Since %s, TTL %s; want between %s and %s, TTL in (0, %s]", compact, rec.Since, rec.TTL, before, after, tc.ttl)
				}
			}
		})
	}
}

func TestRedisForeignValue(t *testing.T) {
	srv := redistest.New(t)
	s := openRedis(t, srv)
	raw := rawClient(t, srv)
	ctx := context.Background()
	for _, v := range []string{"hello", "", "\x01short", "\x02short"} {
		if err := raw.Set(ctx, "foreign", v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Claim(ctx, "foreign", storetest.Lease); !errors.Is(err, codec.ErrBadRecord) {
			t.Errorf("Claim over %q = %v, want errBadRecord", v, err)
		}
		if _, err := s.Lookup(ctx, "foreign"); !errors.Is(err, codec.ErrBadRecord) {
			t.Errorf("Lookup of %q = %v, want errBadRecord", v, err)
		}
	}
}

// TestRedisScriptCacheFlushed checks the EVALSHA-then-EVAL fallback: after
// a restart or SCRIPT FLUSH, Redis no longer knows the scripts.
func TestRedisScriptCacheFlushed(t *testing.T) {
	srv := redistest.New(t)
	s := openRedis(t, srv)
	raw := rawClient(t, srv)
	ctx := context.Background()
	c, _ := storetest.MustClaim(t, s, "flushed", storetest.Lease)
	if err := raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, c, storetest.Replayed, storetest.Keep); err != nil {
		t.Fatalf("Complete after SCRIPT FLUSH: %v", err)
	}
	if err := raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, rec, err := s.Claim(ctx, "flushed", storetest.Lease); err != nil || rec.State != dedup.Completed {
		t.Errorf("Claim after SCRIPT FLUSH = %v, %v; want completed", rec.State, err)
	}
}

// TestRedisClaimRetryKeepsOwnership runs the claim script twice with the
// same value, as go-redis does when an answer is lost and it retries: the
// second run must not report the caller's own claim as someone else's.
func TestRedisClaimRetryKeepsOwnership(t *testing.T) {
	s := openRedis(t, redistest.New(t))
	ctx := context.Background()
	value := codec.EncodeInFlight(codec.NewToken(), time.Now().UnixMilli())
	for i := range 2 {
		n, err := claimScript.Run(ctx, s.client, []string{"retried"}, value, storeop.Millis(storetest.Lease)).Int64()
		if err != nil || n != 1 {
			t.Errorf("run #%d = %d, %v; want 1 (owned)", i+1, n, err)
		}
	}
}

// TestRedisCompleteWhenFull: on a full Redis with noeviction a new claim is
// refused, but a claim already taken can still be completed: its record
// replaces one about as large, and refusing it would leave an event the
// app processed in flight, to be forwarded again when its lease ends.
func TestRedisCompleteWhenFull(t *testing.T) {
	srv := redistest.New(t)
	s := openRedis(t, srv)
	ctx := context.Background()
	c, _ := storetest.MustClaim(t, s, "full:done", storetest.Lease)
	srv.FillMemory(t)
	if _, _, err := s.Claim(ctx, "full:new", storetest.Lease); err == nil {
		t.Error("a new claim on a full Redis succeeded; want Redis's OOM error")
	}
	if err := s.Complete(ctx, c, dedup.Result{Status: 200, Fingerprint: storetest.Replayed.Fingerprint}, storetest.Keep); err != nil {
		t.Fatalf("Complete on a full Redis: %v", err)
	}
	if rec, err := s.Lookup(ctx, "full:done"); err != nil || rec.State != dedup.Completed {
		t.Errorf("after Complete: %v, %v; want completed", rec.State, err)
	}
	if s.noScriptFlags.Load() {
		t.Error("Redis 7 refused complete.lua's flags")
	}
}

// TestRedisCompleteWithoutScriptFlags: a server that cannot compile the
// flags line (Redis before 7, simulated by a flagged script that does not
// compile) still completes, with the plain script from then on.
func TestRedisCompleteWithoutScriptFlags(t *testing.T) {
	s := openRedis(t, redistest.New(t))
	s.completeFlagged = redis.NewScript("#!lua flags=allow-oom\nthis is not lua")
	ctx := context.Background()
	for i := range 2 {
		key := "noflags:" + strconv.Itoa(i)
		c, _ := storetest.MustClaim(t, s, key, storetest.Lease)
		if err := s.Complete(ctx, c, dedup.Result{Status: 200}, storetest.Keep); err != nil {
			t.Fatalf("Complete #%d: %v", i+1, err)
		}
		if rec, err := s.Lookup(ctx, key); err != nil || rec.State != dedup.Completed {
			t.Errorf("after Complete #%d: %v, %v; want completed", i+1, rec.State, err)
		}
	}
	if !s.noScriptFlags.Load() {
		t.Error("the store did not fall back to the script without flags")
	}
}

// TestRedisStalledClaimReleased: claims sent to a stalled Redis fail once
// their timeout passes (without the bound on the whole operation,
// go-redis's retries got most of them through after the stall, seconds
// late), and leave no key in flight: the senders' retries claim them rather
// than find them in flight for the whole lease.
func TestRedisStalledClaimReleased(t *testing.T) {
	srv := redistest.New(t, "--enable-debug-command", "yes")
	s, err := Open(Config{URL: srv.URL(), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	// Retried: on a loaded machine a first PING, dial and handshake
	// included, can take longer than the 200ms Timeout.
	storetest.Eventually(t, "Redis to answer before the stall", func() bool { return s.Ping(ctx) == nil })
	srv.Stall(t, 2*time.Second)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if _, _, err := s.Claim(ctx, "stalled:"+strconv.Itoa(i), storetest.Lease); err == nil {
				t.Errorf("claim %d on a stalled Redis succeeded", i)
			}
		})
	}
	wg.Wait()
	if err := redistest.WaitPing(srv.Addr, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		storetest.Eventually(t, "a new claim of stalled key "+strconv.Itoa(i)+" to win", func() bool {
			c, _, err := s.Claim(ctx, "stalled:"+strconv.Itoa(i), storetest.Lease)
			return err == nil && c.Token != ""
		})
	}
}

// TestRedisReleaseLate: a claim that landed after its caller was told it
// failed is given up in the background; a key someone else holds is not.
func TestRedisReleaseLate(t *testing.T) {
	s := openRedis(t, redistest.New(t))
	ctx := context.Background()
	tok := codec.NewToken()
	value := codec.EncodeInFlight(tok, time.Now().UnixMilli())
	if n, err := claimScript.Run(ctx, s.client, []string{"late"}, value, storeop.Millis(storetest.Lease)).Int64(); err != nil || n != 1 {
		t.Fatalf("claim = %d, %v", n, err)
	}
	other, _ := storetest.MustClaim(t, s, "held", storetest.Lease)
	s.releaseLate("late", tok, storetest.Lease)
	s.releaseLate("held", tok, storetest.Lease)
	storetest.Eventually(t, "the late claim to be released", func() bool {
		_, err := s.Lookup(ctx, "late")
		return errors.Is(err, dedup.ErrNotFound)
	})
	storetest.Eventually(t, "the background releases to end", func() bool { return len(s.lateReleases) == 0 })
	if err := s.Release(ctx, other); err != nil {
		t.Errorf("the other claim's own release: %v; want it untouched until then", err)
	}
}

// prefixed runs a queue store under a key prefix of its own, so that the
// cases of the queue suite, which share one Redis and use the same keys,
// each see only their own sync keys.
type prefixed struct {
	*Store
	p string
}

func (s prefixed) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error) {
	c, rec, err := s.Store.Claim(ctx, s.p+key, lease)
	c.Key = strings.TrimPrefix(c.Key, s.p)
	return c, rec, err
}

func (s prefixed) Complete(ctx context.Context, c dedup.Claim, res dedup.Result, ttl time.Duration) error {
	c.Key = s.p + c.Key
	return s.Store.Complete(ctx, c, res, ttl)
}

func (s prefixed) Release(ctx context.Context, c dedup.Claim) error {
	c.Key = s.p + c.Key
	return s.Store.Release(ctx, c)
}

func (s prefixed) Lookup(ctx context.Context, key string) (dedup.Record, error) {
	rec, err := s.Store.Lookup(ctx, s.p+key)
	rec.Delivery.BlockedBy = strings.TrimPrefix(rec.Delivery.BlockedBy, s.p)
	return rec, err
}

func (s prefixed) Forget(ctx context.Context, key string) (bool, error) {
	return s.Store.Forget(ctx, s.p+key)
}

func (s prefixed) Enqueue(ctx context.Context, key string, req dedup.Request, maxDepth int) (bool, dedup.Record, error) {
	return s.Store.Enqueue(ctx, s.p+key, req, maxDepth)
}

func (s prefixed) Take(ctx context.Context, lane dedup.Lane, n int, lease time.Duration) ([]dedup.Delivery, error) {
	ds, err := s.Store.Take(ctx, lane, n, lease)
	for i := range ds {
		ds[i].Claim.Key = strings.TrimPrefix(ds[i].Claim.Key, s.p)
	}
	return ds, err
}

func (s prefixed) Extend(ctx context.Context, d dedup.Delivery, lease time.Duration) error {
	d.Claim.Key = s.p + d.Claim.Key
	return s.Store.Extend(ctx, d, lease)
}

func (s prefixed) Succeed(ctx context.Context, d dedup.Delivery, res dedup.Result, ttl time.Duration) error {
	d.Claim.Key = s.p + d.Claim.Key
	return s.Store.Succeed(ctx, d, res, ttl)
}

func (s prefixed) Retry(ctx context.Context, d dedup.Delivery, next time.Time, status int, reason string) error {
	d.Claim.Key = s.p + d.Claim.Key
	return s.Store.Retry(ctx, d, next, status, reason)
}

func (s prefixed) Fail(ctx context.Context, d dedup.Delivery, status int, reason string, keep time.Duration) error {
	d.Claim.Key = s.p + d.Claim.Key
	return s.Store.Fail(ctx, d, status, reason, keep)
}

func (s prefixed) Requeue(ctx context.Context, key string) error {
	return s.Store.Requeue(ctx, s.p+key)
}

func (s prefixed) DeadLetters(ctx context.Context, cursor string, limit int) ([]dedup.DeadLetter, string, error) {
	dls, next, err := s.Store.DeadLetters(ctx, cursor, limit)
	for i := range dls {
		dls[i].Key = strings.TrimPrefix(dls[i].Key, s.p)
	}
	return dls, next, err
}

func (s prefixed) Events(ctx context.Context, q dedup.EventQuery) (dedup.EventPage, error) {
	q.KeyPrefix = s.p + q.KeyPrefix
	page, err := s.Store.Events(ctx, q)
	for i := range page.Events {
		page.Events[i].Key = strings.TrimPrefix(page.Events[i].Key, s.p)
	}
	return page, err
}

func (s prefixed) Request(ctx context.Context, key string) (dedup.Request, error) {
	return s.Store.Request(ctx, s.p+key)
}

// prefixes numbers the key prefixes of redisBackends' stores, so that no
// two share one, whichever test and server they run on.
var prefixes atomic.Int64

// redisBackends opens, for each test of the conformance suite, a store
// with cfg on its own key prefix (and so its own queue).
func redisBackends(cfg Config) storetest.Open {
	return func(t *testing.T) (dedup.Backend, func() dedup.Backend) {
		cfg := cfg
		cfg.KeyPrefix = fmt.Sprintf("q%d:", prefixes.Add(1))
		open := func() dedup.Backend {
			s, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			warm(t, s)
			p := prefixed{s, cfg.KeyPrefix}
			b := s.Backend()
			b.Store, b.Queue = p, p
			return b
		}
		return open(), open
	}
}

// TestRetryCutShortByTheDeadline: an attempt the caller's deadline cuts
// short is not retried and is reported by the failure before it, also when
// it fails before the context's own timer has fired (as a read whose
// deadline passed can, on a loaded machine).
func TestRetryCutShortByTheDeadline(t *testing.T) {
	// Before the retries' own deadline, so that retry keeps this one.
	ctx := &lateTimer{Context: context.Background(), deadline: time.Now().Add(time.Second)}
	calls := 0
	err := storeop.Retry(ctx, transient, func(context.Context) error {
		calls++
		switch calls {
		case 1:
			return ErrNotReplicated
		case 2:
			ctx.deadline = time.Now() // passed; the timer has not fired
			return fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded)
		}
		return dedup.ErrNotOwner // not transient: ends a retry that went on
	})
	if !errors.Is(err, ErrNotReplicated) || !errors.Is(err, context.DeadlineExceeded) || calls != 2 {
		t.Errorf("retry = %v after %d calls; want the failure before the cut, with the deadline, after 2", err, calls)
	}
}

// lateTimer is a context whose deadline can pass while Err is still nil.
type lateTimer struct {
	context.Context
	deadline time.Time
}

func (c *lateTimer) Deadline() (time.Time, bool) { return c.deadline, true }

// warm pings a store just opened until it answers: a new client's first
// call dials, shakes hands over TLS and loads a cluster's slots, which on a
// loaded machine can outlast the 1 s each operation is given, and the
// conformance case's first operation is not the place to find that out.
func warm(t *testing.T, s *Store) {
	t.Helper()
	storetest.Eventually(t, "the store just opened to answer a ping", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return s.Ping(ctx) == nil
	})
}
