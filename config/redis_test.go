package config

import (
	"strings"
	"testing"
)

// TestRedisComposed: what the Redis settings cannot tell alone, the
// configuration does: two ways to Redis at once, and a value that does not
// parse. The Redis settings' own checks are redisconf's tests.
func TestRedisComposed(t *testing.T) {
	const url, cluster, sentinels = "redis://r:6379", "r:7000", "s:26379"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"URL and cluster", map[string]string{"REDIS_URL": url, "REDIS_CLUSTER_ADDRS": cluster}, "REDIS_CLUSTER_ADDRS: set together with REDIS_URL"},
		{"cluster and sentinel", map[string]string{"REDIS_CLUSTER_ADDRS": cluster, "REDIS_SENTINEL_ADDRS": sentinels, "REDIS_SENTINEL_MASTER": "m"}, "REDIS_SENTINEL_ADDRS: set together with REDIS_CLUSTER_ADDRS"},
		{"TLS not a bool", map[string]string{"REDIS_CLUSTER_ADDRS": cluster, "REDIS_TLS": "sure"}, "REDIS_TLS"},
		{"timeout near UPSTREAM_TIMEOUT", map[string]string{"REDIS_URL": url, "UPSTREAM_TIMEOUT": "10s", "REDIS_TIMEOUT": "5s"}, "REDIS_TIMEOUT: 5s is more than a quarter of UPSTREAM_TIMEOUT"},
		{"password without Redis", map[string]string{"REDIS_PASSWORD": "x"}, "REDIS_PASSWORD: set, but no Redis is configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := base()
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := Load(env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
