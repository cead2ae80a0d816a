package redisstore

import (
	"reflect"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/redisstore/redisconf"
	"github.com/webhook-dedup/webhook-dedup/setting"
)

// TestFromSettings: the store gets only the addresses of the mode the
// settings chose, and TLS only when they ask for it.
func TestFromSettings(t *testing.T) {
	common := redisconf.Settings{
		Username: "u", Password: "p", PoolSize: 7, DialTimeout: 2 * time.Second, Timeout: time.Second,
		WaitReplicas: 1, WaitTimeout: 250 * time.Millisecond,
		SentinelMaster: "m", SentinelUsername: "su", SentinelPassword: "sp",
		TLSCAFile: "ca.pem", TLSCertFile: "c.pem", TLSKeyFile: "k.pem", TLSServerName: "redis.internal",
	}
	base := Config{Username: "u", Password: "p", PoolSize: 7, DialTimeout: 2 * time.Second, Timeout: time.Second, WaitReplicas: 1, WaitTimeout: 250 * time.Millisecond}
	tls := &TLS{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem", ServerName: "redis.internal"}
	for _, tc := range []struct {
		name   string
		change func(*redisconf.Settings)
		want   func(*Config)
	}{
		{"standalone", func(s *redisconf.Settings) { s.URL = "redis://r:6379" }, func(c *Config) { c.URL = "redis://r:6379" }},
		{"standalone, rediss://", func(s *redisconf.Settings) { s.URL = "rediss://r:6379" }, func(c *Config) { c.URL, c.TLS = "rediss://r:6379", tls }},
		{"cluster", func(s *redisconf.Settings) { s.ClusterAddrs = setting.List{"a:1", "b:2"} }, func(c *Config) { c.ClusterAddrs = []string{"a:1", "b:2"} }},
		{"cluster, TLS", func(s *redisconf.Settings) { s.ClusterAddrs, s.TLS = setting.List{"a:1"}, true }, func(c *Config) { c.ClusterAddrs, c.TLS = []string{"a:1"}, tls }},
		{"sentinel", func(s *redisconf.Settings) { s.SentinelAddrs = setting.List{"s:26379"} }, func(c *Config) {
			c.SentinelAddrs, c.SentinelMaster, c.SentinelUsername, c.SentinelPassword = []string{"s:26379"}, "m", "su", "sp"
		}},
	} {
		s := common
		tc.change(&s)
		want := base
		tc.want(&want)
		if got := FromSettings(s); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: FromSettings = %+v, want %+v", tc.name, got, want)
		}
	}
}
