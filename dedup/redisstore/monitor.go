package redisstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/storeop"
	"go.uber.org/zap"
)

// MonitorConfig configures a Monitor.
type MonitorConfig struct {
	// KeyPrefix is the prefix of the store's keys; the data-loss marker
	// is MarkerKey(KeyPrefix).
	KeyPrefix string
	// Interval is the time between checks. Zero: 5s.
	Interval time.Duration
	// Logger receives the findings. Nil: nothing is logged.
	Logger *zap.Logger
	// Registerer gets the webhook_dedup_redis_* metrics. Nil: none.
	Registerer prometheus.Registerer
}

// Monitor watches the Redis a store uses for what would silently let
// duplicates through: an eviction policy that may delete records, records
// evicted, a Redis out of memory, and records lost (a flush, or a restart
// without persistence). It reads INFO (each master's, on a cluster) and a
// marker key written under the key prefix, at start and every Interval.
type Monitor struct {
	s   *Store
	cfg MonitorConfig
	log *zap.Logger

	used, maxMem, canEvict, oom prometheus.Gauge
	dataLoss                    prometheus.Counter
	// evicted exports evictedKeys, INFO's evicted_keys summed over the
	// masters at the last check: a counter that resets when Redis
	// restarts, as Prometheus counters may.
	evicted     prometheus.CounterFunc
	evictedKeys atomic.Int64

	// State between checks, only touched by Check (which Run calls in turn).
	mu sync.Mutex
	// marker is the marker's value last seen; "" before the first check.
	marker string
	// clock is the value of the clock key this process last set; zero
	// before the first check.
	clock int64
	// servers is each server's INFO at the last check that read it, by
	// address.
	servers map[string]ServerInfo
	// told is what was already logged, so a standing condition is logged
	// when it starts or changes, not at every check.
	told map[string]string
}

// NewMonitor returns a monitor of s. Call Check once at start, then Run.
func NewMonitor(s *Store, cfg MonitorConfig) *Monitor {
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "webhook_dedup_redis_" + name, Help: help})
	}
	m := &Monitor{
		s: s, cfg: cfg, log: log,
		used:     gauge("used_memory_bytes", "Memory Redis uses (INFO used_memory, summed over masters)."),
		maxMem:   gauge("maxmemory_bytes", "Redis's maxmemory (summed over masters); 0: no limit."),
		canEvict: gauge("eviction_policy_evicts", "1 when Redis's maxmemory-policy lets it evict records (anything but noeviction), else 0."),
		oom:      gauge("out_of_memory", "1 when Redis is at maxmemory with noeviction and refuses new claims, else 0."),
		dataLoss: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "webhook_dedup_redis_data_loss_total",
			Help: "Times Redis was found to have lost its records (flushed, or restarted without persistence): duplicates of earlier events are forwarded again.",
		}),
		servers: map[string]ServerInfo{},
		told:    map[string]string{},
	}
	m.evicted = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "webhook_dedup_redis_evicted_keys_total",
		Help: "Keys Redis evicted since it started (INFO evicted_keys, summed over masters): each may be a record whose duplicates are forwarded again.",
	}, func() float64 { return float64(m.evictedKeys.Load()) })
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(m.evicted, m.used, m.maxMem, m.canEvict, m.oom, m.dataLoss)
	}
	return m
}

// Run checks every Interval until ctx ends. The findings go to the log
// and the metrics.
func (m *Monitor) Run(ctx context.Context) {
	storeop.Every(ctx, m.cfg.Interval, func() bool {
		err := m.Check(ctx)
		if ctx.Err() != nil {
			return true
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		switch {
		case errors.Is(err, dedup.ErrPrefixOwned):
			m.tell("check", err.Error(), func() {
				m.log.Error("the key prefix holds another app's records: claims are refused; give this app a KEY_PREFIX of its own", zap.Error(err))
			})
		case err != nil:
			m.tell("check", err.Error(), func() { m.log.Warn("redis check failed", zap.Error(err)) })
		default:
			m.tell("check", "", func() {})
		}
		return false
	})
}

// Check checks once: the owner of the key prefix (an error wrapping
// ErrPrefixOwned when another app owns it), the data-loss marker, and
// each server's INFO. It returns an error when Redis could not be asked.
func (m *Monitor) Check(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	// INFO first: on a full Redis the marker may not be writable, and
	// that is when the memory figures matter most.
	infos, infoErr := m.s.Info(ctx)
	ownerErr := m.s.CheckOwner(ctx)
	lost, markerErr := m.checkMarker(ctx)
	back, clockErr := m.checkClock(ctx, lost)
	lost = lost || back
	var answered redis.Error
	switch {
	case errors.As(infoErr, &answered):
		m.tell("info", "refused", func() {
			m.log.Warn("Redis does not let this client read INFO: eviction, memory and restarts are not monitored", zap.Error(infoErr))
		})
		infoErr = nil
	case infoErr == nil:
		m.tell("info", "", func() {})
		lost = m.checkServers(infos) || lost
	}
	if lost {
		m.dataLoss.Inc()
	}
	return errors.Join(ownerErr, markerErr, clockErr, infoErr)
}

// checkClock advances the clock key and reports whether it went back. It
// is only ever incremented, by every monitor sharing the key prefix, so a
// value no higher than the last this process set means Redis holds older
// data than it did: restored from a snapshot, or a replica promoted
// without the latest writes, while the marker survived. markerLost says
// the marker check already reported the loss (an emptied Redis also
// empties the clock), which is then not reported twice.
func (m *Monitor) checkClock(ctx context.Context, markerLost bool) (bool, error) {
	octx, cancel := m.s.bound(ctx)
	defer cancel()
	key := ClockKey(m.cfg.KeyPrefix)
	n, err := m.s.client.Do(octx, "INCR", key).Int64()
	if err != nil {
		return false, fmt.Errorf("dedup: redis clock %s: %w", key, err)
	}
	before := m.clock
	m.clock = n
	if before == 0 || n > before || markerLost {
		return false, nil
	}
	m.log.Error("Redis went back in time: it holds older data than it did (restored from a snapshot, or a replica promoted without the latest writes); events accepted since then may be lost, events completed since then are forwarded again, and deliveries under way since then may be made twice",
		zap.String("key", key), zap.Int64("clock", n), zap.Int64("last_seen", before))
	return true, nil
}

// checkMarker writes the marker if it is missing and reports whether one
// seen before is gone: a new value means someone (this process or
// another replica) had to write it again.
func (m *Monitor) checkMarker(ctx context.Context) (bool, error) {
	fresh := codec.NewToken()
	value := time.Now().UTC().Format(time.RFC3339) + " " + hex.EncodeToString(fresh[:])
	octx, cancel := m.s.bound(ctx)
	defer cancel()
	key := MarkerKey(m.cfg.KeyPrefix)
	got, err := setNXGetScript.Run(octx, m.s.scripts, []string{key}, value).Text()
	if err != nil {
		return false, fmt.Errorf("dedup: redis marker %s: %w", key, err)
	}
	before := m.marker
	m.marker = got
	if before == "" || got == before {
		return false, nil
	}
	m.log.Error("Redis lost its records: the marker key written at start is gone (flushed, restarted without persistence, or evicted); duplicates of earlier events will be forwarded again",
		zap.String("key", key))
	return true, nil
}

// checkServers logs and exports what INFO says, and reports whether a
// server restarted with far fewer keys than it had: its records are lost.
func (m *Monitor) checkServers(infos []ServerInfo) bool {
	var evicted, used, maxMem int64
	evicts, oom, lost := false, false, false
	for _, info := range infos {
		evicted += info.EvictedKeys
		used += info.UsedMemory
		maxMem += info.MaxMemory
		prev, seen := m.servers[info.Addr]
		m.servers[info.Addr] = info
		evicts = evicts || info.CanEvict()
		m.tell("policy "+info.Addr, info.Policy, func() {
			if info.CanEvict() {
				m.log.Error("Redis may evict records: its maxmemory-policy is not noeviction, so under memory pressure it deletes records and their duplicates are forwarded again; set maxmemory-policy noeviction",
					zap.String("redis", info.Addr), zap.String("maxmemory_policy", info.Policy), zap.Int64("maxmemory", info.MaxMemory))
			}
		})
		if !info.AOF {
			m.tell("aof "+info.Addr, "off", func() {
				m.log.Warn("Redis persistence: appendonly is off, so a restart loses every record written since the last snapshot, if snapshots are configured, and duplicates of those events are forwarded again",
					zap.String("redis", info.Addr))
			})
		}
		if info.OutOfMemory() {
			oom = true
		}
		if !seen {
			continue
		}
		if info.EvictedKeys > prev.EvictedKeys && prev.RunID == info.RunID {
			m.log.Error("Redis evicted keys: records among them let their duplicates through",
				zap.String("redis", info.Addr), zap.Int64("evicted", info.EvictedKeys-prev.EvictedKeys), zap.Int64("evicted_total", info.EvictedKeys))
		}
		if prev.RunID != info.RunID {
			m.log.Info("Redis restarted", zap.String("redis", info.Addr), zap.Int64("keys_before", prev.Keys), zap.Int64("keys_now", info.Keys))
			if info.Keys*2 < prev.Keys {
				lost = true
				m.log.Error("Redis restarted without its records: it lost most of its keys; duplicates of earlier events will be forwarded again",
					zap.String("redis", info.Addr), zap.Int64("keys_before", prev.Keys), zap.Int64("keys_now", info.Keys))
			}
		}
	}
	m.tell("oom", fmt.Sprint(oom), func() {
		if oom {
			m.log.Error("Redis is out of memory (maxmemory with noeviction): new webhooks are refused (503) until memory is freed or maxmemory raised")
		}
	})
	m.evictedKeys.Store(evicted)
	m.used.Set(float64(used))
	m.maxMem.Set(float64(maxMem))
	m.canEvict.Set(boolGauge(evicts))
	m.oom.Set(boolGauge(oom))
	return lost
}

// tell runs say when what differs from the value last told for topic.
func (m *Monitor) tell(topic, what string, say func()) {
	if m.told[topic] == what {
		return
	}
	m.told[topic] = what
	say()
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
