package main

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/internal/redistest"
)

// TestCacheKeepsQueue checks the cache in front of a store that keeps an
// async queue still offers the queue, and the Redis monitor still finds
// Redis behind it.
func TestCacheKeepsQueue(t *testing.T) {
	cfg := &config.Config{CacheSize: 10, CacheTTL: time.Minute}
	st := withCache(cfg, dedup.NewMemory(), zap.NewNop(), prometheus.NewRegistry())
	defer st.Close()
	if _, ok := st.(dedup.Queue); ok {
		t.Error("the in-memory store, cached, offers a queue it does not keep")
	}
	pg, err := dedup.OpenPostgres(dedup.PostgresConfig{URL: "postgres://" + redistest.FreeAddr(t) + "/x"})
	if err != nil {
		t.Fatal(err)
	}
	st = withCache(cfg, pg, zap.NewNop(), prometheus.NewRegistry())
	defer st.Close()
	if _, ok := st.(dedup.Queue); !ok {
		t.Error("PostgreSQL, cached, does not offer its queue")
	}
	if _, ok := st.(*dedup.CachedQueue); !ok {
		t.Errorf("PostgreSQL, cached, is a %T, want the cache in front of the queue too", st)
	}
	rs, err := dedup.OpenRedis(dedup.RedisConfig{URL: "redis://" + redistest.FreeAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	st = withCache(cfg, rs, zap.NewNop(), prometheus.NewRegistry())
	defer st.Close()
	if behindCache(st) != dedup.Cacheable(rs) {
		t.Errorf("behind the cache: %T, want the Redis store (its monitor)", behindCache(st))
	}
}

// TestNotificationsBehindCache checks the delivery workers hear of events
// queued elsewhere through the cache, and that a store without
// notifications has none.
func TestNotificationsBehindCache(t *testing.T) {
	cfg := &config.Config{CacheSize: 10, CacheTTL: time.Minute}
	pg, err := dedup.OpenPostgres(dedup.PostgresConfig{URL: "postgres://" + redistest.FreeAddr(t) + "/x"})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	if notifications(pg) == nil || notifications(withCache(cfg, pg, zap.NewNop(), prometheus.NewRegistry())) == nil {
		t.Error("PostgreSQL's notifications are lost")
	}
	m := dedup.NewMemory()
	defer m.Close()
	if notifications(m) != nil {
		t.Error("the in-memory store has notifications")
	}
}
