package redisstore

import (
	"strings"

	"github.com/webhook-dedup/webhook-dedup/dedup/redisstore/redisconf"
)

// FromSettings is the Config the environment's settings describe: only
// the addresses of the mode they chose (the first of its Choices
// set), TLS when REDIS_TLS or a rediss:// URL asks for it. AppName,
// KeyPrefix and Logger, which are not Redis's own settings, are left to
// the caller.
func FromSettings(s redisconf.Settings) Config {
	cfg := Config{
		Username:       s.Username,
		Password:       s.Password,
		PoolSize:       s.PoolSize,
		DialTimeout:    s.DialTimeout,
		Timeout:        s.Timeout,
		WaitReplicas:   s.WaitReplicas,
		WaitTimeout:    s.WaitTimeout,
		CompactRecords: s.CompactRecords,
	}
	switch s.Mode() {
	case redisconf.Standalone:
		cfg.URL = s.URL
	case redisconf.Cluster:
		cfg.ClusterAddrs = s.ClusterAddrs
	case redisconf.Sentinel:
		cfg.SentinelAddrs, cfg.SentinelMaster = s.SentinelAddrs, s.SentinelMaster
		cfg.SentinelUsername, cfg.SentinelPassword = s.SentinelUsername, s.SentinelPassword
	}
	if s.TLS || strings.HasPrefix(cfg.URL, "rediss://") {
		cfg.TLS = &TLS{CAFile: s.TLSCAFile, CertFile: s.TLSCertFile, KeyFile: s.TLSKeyFile, ServerName: s.TLSServerName}
	}
	return cfg
}
