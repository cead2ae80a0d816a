package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// monitored opens a store on srv with a monitor that logs to the returned
// observer.
func monitored(t *testing.T, srv *redistest.Server) (*Store, *Monitor, *observer.ObservedLogs) {
	t.Helper()
	s := openRedis(t, srv)
	core, logs := observer.New(zapcore.InfoLevel)
	m := NewMonitor(s, MonitorConfig{KeyPrefix: "mon:", Logger: zap.New(core), Registerer: prometheus.NewRegistry()})
	return s, m, logs
}

// value is a gauge's or a counter's value.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

func TestMonitorEvictionPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy string
		evicts bool
	}{{"noeviction", false}, {"allkeys-lru", true}, {"volatile-lru", true}, {"volatile-ttl", true}, {"allkeys-random", true}} {
		t.Run(tc.policy, func(t *testing.T) {
			_, m, logs := monitored(t, redistest.New(t, "--maxmemory", "64mb", "--maxmemory-policy", tc.policy))
			for range 2 {
				if err := m.Check(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			want, wantLogs := 0.0, 0
			if tc.evicts {
				want, wantLogs = 1, 1
			}
			if got := value(m.canEvict); got != want {
				t.Errorf("webhook_dedup_redis_eviction_policy_evicts = %v, want %v", got, want)
			}
			if got := logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("may evict records").Len(); got != wantLogs {
				t.Errorf("%d error logs about eviction over two checks, want %d", got, wantLogs)
			}
			if got := value(m.maxMem); got != 64<<20 {
				t.Errorf("webhook_dedup_redis_maxmemory_bytes = %v, want %d", got, 64<<20)
			}
			if got := value(m.used); got <= 0 {
				t.Errorf("webhook_dedup_redis_used_memory_bytes = %v, want > 0", got)
			}
		})
	}
}

func TestMonitorEvictedKeys(t *testing.T) {
	srv := redistest.New(t, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
	s, m, logs := monitored(t, srv)
	ctx := context.Background()
	if err := m.Check(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3000 {
		c, _ := storetest.MustClaim(t, s, "evicted:"+strconv.Itoa(i), storetest.Lease)
		if err := s.Complete(ctx, c, dedup.Result{Status: 200, Body: []byte(strings.Repeat("b", 1000))}, storetest.Keep); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if got := value(m.evicted); got == 0 {
		t.Error("webhook_dedup_redis_evicted_keys = 0 after Redis evicted records")
	}
	if logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("Redis evicted keys").Len() != 1 {
		t.Errorf("no error log about evicted keys: %v", logs.All())
	}
}

// TestMonitorDataLoss: a flush, and a restart without persistence, are
// each counted once and logged at error level.
func TestMonitorDataLoss(t *testing.T) {
	srv := redistest.New(t)
	s, m, logs := monitored(t, srv)
	ctx := context.Background()
	raw := rawClient(t, srv)
	for i := range 10 {
		c, _ := storetest.MustClaim(t, s, "lost:"+strconv.Itoa(i), storetest.Lease)
		if err := s.Complete(ctx, c, dedup.Result{Status: 200}, storetest.Keep); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, want float64) { t.Helper(); checkLoss(t, m, what, want) }
	check("first check", 0)
	check("nothing happened", 0)
	if err := raw.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	check("after FLUSHALL", 1)
	check("the check after", 1)
	for i := range 10 {
		if _, _, err := s.Claim(ctx, "lost:"+strconv.Itoa(i), storetest.Lease); err != nil {
			t.Fatal(err)
		}
	}
	srv.Stop()
	srv.Start() // without persistence: empty
	storetest.Eventually(t, "the store to reconnect", func() bool { return s.Ping(ctx) == nil })
	check("after a restart without persistence", 2)
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("Redis restarted without its records").Len(); n != 1 {
		t.Errorf("%d error logs about a restart without the records, want 1 (run_id changed, keys gone)", n)
	}
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("lost").Len(); n < 2 {
		t.Errorf("%d error logs about lost records, want at least 2: %v", n, logs.All())
	}
}

// TestMonitorAnotherMonitorRewritesMarker: a replica that finds the marker
// rewritten by another replica (which noticed the loss first) counts the
// loss too.
func TestMonitorAnotherMonitorRewritesMarker(t *testing.T) {
	srv := redistest.New(t)
	_, a, _ := monitored(t, srv)
	_, b, _ := monitored(t, srv)
	ctx := context.Background()
	raw := rawClient(t, srv)
	for _, m := range []*Monitor{a, b} {
		if err := m.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := raw.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*Monitor{a, b} {
		if err := m.Check(ctx); err != nil {
			t.Fatal(err)
		}
		if got := value(m.dataLoss); got != 1 {
			t.Errorf("webhook_dedup_redis_data_loss_total = %v, want 1", got)
		}
	}
}

// TestRedisOwner: a store whose AppName differs from the one that owns the
// key prefix refuses claims, lookups and pings with ErrPrefixOwned; one
// with the same AppName (a replica) shares it.
func TestRedisOwner(t *testing.T) {
	srv := redistest.New(t)
	open := func(name string) *Store {
		s, err := Open(Config{URL: srv.URL(), AppName: name, KeyPrefix: "shared:"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	ctx := context.Background()
	a, replica, b := open("billing"), open("billing"), open("crm")
	if err := a.CheckOwner(ctx); err != nil {
		t.Fatalf("first owner: %v", err)
	}
	if _, _, err := replica.Claim(ctx, "shared:stripe:evt_1", storetest.Lease); err != nil {
		t.Errorf("a replica's claim: %v", err)
	}
	err := b.CheckOwner(ctx)
	if !errors.Is(err, dedup.ErrPrefixOwned) || !strings.Contains(err.Error(), `"billing"`) {
		t.Errorf("another app's CheckOwner = %v, want ErrPrefixOwned naming billing", err)
	}
	if _, _, err := b.Claim(ctx, "shared:stripe:evt_2", storetest.Lease); !errors.Is(err, dedup.ErrPrefixOwned) {
		t.Errorf("another app's claim = %v, want ErrPrefixOwned", err)
	}
	if _, err := b.Lookup(ctx, "shared:stripe:evt_1"); !errors.Is(err, dedup.ErrPrefixOwned) {
		t.Errorf("another app's lookup = %v, want ErrPrefixOwned", err)
	}
	if err := b.Ping(ctx); !errors.Is(err, dedup.ErrPrefixOwned) {
		t.Errorf("another app's ping = %v, want ErrPrefixOwned", err)
	}
	if _, _, err := b.Enqueue(ctx, "shared:stripe:evt_3", storetest.Request, 0); !errors.Is(err, dedup.ErrPrefixOwned) {
		t.Errorf("another app's enqueue = %v, want ErrPrefixOwned", err)
	}
	if _, err := b.Take(ctx, dedup.AllRoutes, 1, storetest.Lease); !errors.Is(err, dedup.ErrPrefixOwned) {
		t.Errorf("another app's take = %v, want ErrPrefixOwned", err)
	}
}

// TestRedisPingOutOfMemory: PING answers on a full Redis, but Ping says it
// refuses writes, and the monitor exports it.
func TestRedisPingOutOfMemory(t *testing.T) {
	srv := redistest.New(t)
	s, m, logs := monitored(t, srv)
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	raw := rawClient(t, srv)
	srv.FillMemory(t)
	if err := s.Ping(ctx); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("Ping on a full Redis = %v, want ErrOutOfMemory", err)
	}
	_ = m.Check(ctx) // the marker cannot be written: an error
	if got := value(m.oom); got != 1 {
		t.Errorf("webhook_dedup_redis_out_of_memory = %v, want 1", got)
	}
	if logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("out of memory").Len() != 1 {
		t.Errorf("no error log about Redis being out of memory: %v", logs.All())
	}
	if err := raw.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping once memory is free: %v", err)
	}
}

// TestMonitorRollback: Redis restored from a snapshot taken a few checks
// ago (its marker still there, the records since then gone, its clock
// behind) is a loss the marker alone does not see: the clock key tells
// it, once.
func TestMonitorRollback(t *testing.T) {
	srv := redistest.New(t)
	s, m, logs := monitored(t, srv)
	ctx := context.Background()
	raw := rawClient(t, srv)
	check := func(what string, want float64) { t.Helper(); checkLoss(t, m, what, want) }
	check("first check", 0)
	if err := raw.Save(ctx).Err(); err != nil { // the snapshot that comes back
		t.Fatal(err)
	}
	for range 3 {
		check("checks after the snapshot", 0)
	}
	srv.Stop()
	srv.Start() // loads the snapshot: marker there, clock behind
	storetest.Eventually(t, "the store to reconnect", func() bool { return s.Ping(ctx) == nil })
	check("after the rollback", 1)
	check("the check after", 1)
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("Redis went back in time").Len(); n != 1 {
		t.Errorf("%d error logs about Redis going back in time, want 1: %v", n, logs.All())
	}
}

// checkLoss runs one check of m and wants webhook_dedup_redis_data_loss_total
// to stand at want after it; what names the moment.
func checkLoss(t *testing.T, m *Monitor, what string, want float64) {
	t.Helper()
	if err := m.Check(context.Background()); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got := value(m.dataLoss); got != want {
		t.Errorf("%s: webhook_dedup_redis_data_loss_total = %v, want %v", what, got, want)
	}
}
