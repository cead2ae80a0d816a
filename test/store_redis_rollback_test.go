package test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/webhook-dedup/webhook-dedup/dedup/redisstore"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// TestRedisRollbackDetected: Redis restored from a snapshot taken a few
// seconds earlier (the data-loss marker survives it, the records written
// since do not) is detected: logged at error saying what it means, and
// counted in webhook_dedup_redis_data_loss_total.
func TestRedisRollbackDetected(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	env := asyncEnv(app.URL, map[string]string{"REDIS_URL": srv.URL(), "REDIS_CHECK_INTERVAL": "100ms"})
	px := launch(t, env)
	px.waitHealthy()
	px.awaitReady(t)
	queueEvents(t, px, github, 2)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = raw.Close() })
	ctx := context.Background()
	clock := redisstore.ClockKey("webhook-dedup:")
	if err := raw.Save(ctx).Err(); err != nil { // the snapshot restored below
		t.Fatal(err)
	}
	saved, err := raw.Get(ctx, clock).Int64()
	if err != nil {
		t.Fatalf("the monitor's clock at the snapshot: %v", err)
	}
	// Events accepted after the snapshot, and several checks.
	queueEvents(t, px, stripe, 2)
	// The monitor moves its clock once each REDIS_CHECK_INTERVAL.
	b := px.bounds()
	await(t, 3*b.cfg.Redis.CheckInterval+b.observed(), func() error {
		if n, err := raw.Get(ctx, clock).Int64(); err != nil || n < saved+3 {
			return fmt.Errorf("the clock stood at %d (%v), want the monitor to move it past %d", n, err, saved+2)
		}
		return nil
	})
	srv.Stop()
	srv.Start()
	px.awaitLog(t, "Redis went back in time", 1)
	px.awaitMetric(t, "webhook_dedup_redis_data_loss_total", nil, 1)
}
