package stores

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/redisstore"
	"github.com/webhook-dedup/webhook-dedup/dedup/redisstore/redisconf"
)

// durabilityTimeout bounds the start-up check of Redis's persistence.
const durabilityTimeout = 5 * time.Second

// openRedis connects to Redis in the mode config chose, handing the store
// only that mode's addresses. To serve, it checks Redis once (a KEY_PREFIX
// that another APP_NAME owns stops the start; a Redis not reachable yet
// does not: the store refuses claims until the owner check passes), adds
// the monitor that keeps checking it to the Backend's jobs, and, with
// async routes, says at start whether Redis keeps what they accept.
func openRedis(ctx context.Context, cfg *config.Config, env Env) (dedup.Backend, error) {
	// go-redis logs through a process-wide logger; route it through ours.
	redis.SetLogger(newRedisLogger(env.Log))
	rc := redisstore.FromSettings(cfg.Redis)
	rc.AppName, rc.KeyPrefix, rc.Logger = cfg.AppName, cfg.KeyPrefix, env.Log.Named("store")
	st, err := redisstore.Open(rc)
	if err != nil {
		return dedup.Backend{}, configError(fmt.Errorf("%s: %w", cfg.Store.Variable, err))
	}
	env.Log.Info("store: redis", zap.String("mode", string(cfg.Redis.Mode())), zap.Bool("tls", rc.TLS != nil),
		zap.Int("wait_replicas", rc.WaitReplicas), zap.Duration("timeout", rc.Timeout))
	if cfg.Redis.Mode() != redisconf.Standalone && rc.WaitReplicas == 0 {
		env.Log.Info("REDIS_WAIT_REPLICAS is 0: a failover may lose the last records the master acknowledged, and let a duplicate through")
	}
	b := st.Backend()
	if !env.Serving {
		return b, nil
	}
	m := redisstore.NewMonitor(st, redisstore.MonitorConfig{KeyPrefix: cfg.KeyPrefix, Interval: cfg.Redis.CheckInterval, Logger: env.Log.Named("redis"), Registerer: env.Registerer})
	switch err := m.Check(ctx); {
	case errors.Is(err, dedup.ErrPrefixOwned):
		_ = st.Close()
		return dedup.Backend{}, configError(prefixOwned(err, cfg))
	case err != nil:
		env.Log.Warn("redis not checked at start; checking again every REDIS_CHECK_INTERVAL", zap.Error(err))
	}
	b.Jobs = append(b.Jobs, m.Run)
	if cfg.AsyncRoutes() {
		logDurability(ctx, st, env.Log)
	}
	return b, nil
}

// prefixOwned is the start-up error for a KEY_PREFIX another APP_NAME
// owns: two apps sharing one would answer each other's events as
// duplicates.
func prefixOwned(err error, cfg *config.Config) error {
	return fmt.Errorf("APP_NAME: %w: set KEY_PREFIX to a prefix of this app's own (e.g. KEY_PREFIX=webhook-dedup:%s:), as two apps sharing one would answer each other's events as duplicates", err, cfg.AppName)
}

// logDurability logs, once at start, whether Redis keeps the events async
// routes answer 202: at error level when its settings lose them (the proxy
// keeps running: the operator decides), at warn when they cannot be read.
func logDurability(ctx context.Context, st *redisstore.Store, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(ctx, durabilityTimeout)
	defer cancel()
	d, err := st.CheckDurability(ctx)
	switch {
	case err != nil:
		log.Warn("could not check whether Redis keeps accepted async events (appendonly, maxmemory-policy)", zap.Error(err))
	case !d.Readable:
		log.Warn("async delivery on Redis: "+d.String(), zap.String("reason", d.Unread))
	case !d.OK():
		log.Error("async delivery on Redis may lose events already answered 202: "+d.String(),
			zap.String("appendonly", d.AppendOnly), zap.String("appendfsync", d.AppendFsync), zap.String("maxmemory_policy", d.MaxmemoryPolicy))
	default:
		log.Info("async delivery on Redis: "+d.String(),
			zap.String("appendonly", d.AppendOnly), zap.String("appendfsync", d.AppendFsync), zap.String("maxmemory_policy", d.MaxmemoryPolicy))
	}
}

// redisLogger carries go-redis's own messages (dial failures while Redis is
// down) into the log, at most one line a second for each message, so that
// an outage does not flood it.
type redisLogger struct{ log *zap.Logger }

func newRedisLogger(log *zap.Logger) redisLogger {
	sampled := log.Named("redis").WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, 1, 0)
	}))
	return redisLogger{log: sampled}
}

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn(fmt.Sprintf(format, v...))
}
