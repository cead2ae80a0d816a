package redisconf

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
	"github.com/webhook-dedup/webhook-dedup/setting"
)

// complete parses environ as the configuration does and completes the
// settings with scope, by default the configuration's defaults with Redis
// chosen when one of its variables is set.
func complete(t *testing.T, environ map[string]string, scope *setting.Scope) (*Settings, setting.Problems) {
	t.Helper()
	var s Settings
	if err := env.ParseWithOptions(&s, env.Options{Environment: environ}); err != nil {
		t.Fatal(err)
	}
	if scope == nil {
		scope = &setting.Scope{Chosen: s.Mode() != "", StoreTimeout: time.Second, UpstreamTimeout: 30 * time.Second}
	}
	return &s, s.Complete(*scope)
}

func joined(ps setting.Problems) string {
	var lines []string
	for _, p := range ps {
		lines = append(lines, p.Error())
	}
	return strings.Join(lines, "\n")
}

func TestModes(t *testing.T) {
	certs := redistest.NewCerts(t)
	dir := t.TempDir()
	secret := filepath.Join(dir, "password")
	if err := os.WriteFile(secret, []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		env   map[string]string
		check func(t *testing.T, c *Settings)
	}{
		{"cluster seeds, spaces trimmed", map[string]string{"REDIS_CLUSTER_ADDRS": " 10.0.0.1:7000, redis-1.redis:7000 ,"}, func(t *testing.T, c *Settings) {
			if want := []string{"10.0.0.1:7000", "redis-1.redis:7000"}; !slices.Equal(c.ClusterAddrs, want) {
				t.Errorf("RedisClusterAddrs = %q, want %q", c.ClusterAddrs, want)
			}
		}},
		{"sentinel", map[string]string{"REDIS_SENTINEL_ADDRS": "s1:26379,s2:26379,s3:26379", "REDIS_SENTINEL_MASTER": "mymaster", "REDIS_SENTINEL_PASSWORD": "x"}, func(t *testing.T, c *Settings) {
			if len(c.SentinelAddrs) != 3 || c.SentinelMaster != "mymaster" {
				t.Errorf("sentinel settings %q %q", c.SentinelAddrs, c.SentinelMaster)
			}
		}},
		{"password file read and trimmed", map[string]string{"REDIS_URL": "redis://r:6379", "REDIS_PASSWORD_FILE": secret}, func(t *testing.T, c *Settings) {
			if c.Password != "s3cret" {
				t.Errorf("RedisPassword = %q, want the file's content trimmed", c.Password)
			}
		}},
		// As the Kubernetes overlay does: $(REDIS_PASSWORD) expanded into REDIS_URL.
		{"same password in URL and variable", map[string]string{"REDIS_URL": "redis://u:s3cret@r:6379/0", "REDIS_PASSWORD": "s3cret", "REDIS_USERNAME": "u"}, nil},
		{"mutual TLS on a cluster", map[string]string{
			"REDIS_CLUSTER_ADDRS": "r:7000", "REDIS_TLS": "true", "REDIS_TLS_CA_FILE": certs.CAFile,
			"REDIS_TLS_CERT_FILE": certs.ClientCertFile, "REDIS_TLS_KEY_FILE": certs.ClientKeyFile, "REDIS_TLS_SERVER_NAME": "redis.internal",
		}, nil},
		{"TLS files with rediss://", map[string]string{"REDIS_URL": "rediss://r:6379", "REDIS_TLS_CA_FILE": certs.CAFile}, nil},
		{"defaults", map[string]string{"REDIS_URL": "redis://r:6379"}, func(t *testing.T, c *Settings) {
			if c.Timeout != time.Second || c.DialTimeout != 2*time.Second || c.WaitReplicas != 0 ||
				c.WaitTimeout != 250*time.Millisecond || c.PoolSize != 0 || c.TLS {
				t.Errorf("timeout %s, dial %s, wait %d/%s, pool %d, TLS %v", c.Timeout, c.DialTimeout,
					c.WaitReplicas, c.WaitTimeout, c.PoolSize, c.TLS)
			}
		}},
		{"wait for a replica", map[string]string{"REDIS_CLUSTER_ADDRS": "r:7000", "REDIS_WAIT_REPLICAS": "1", "REDIS_WAIT_TIMEOUT": "100ms"}, func(t *testing.T, c *Settings) {
			if c.WaitReplicas != 1 || c.WaitTimeout != 100*time.Millisecond {
				t.Errorf("wait %d/%s", c.WaitReplicas, c.WaitTimeout)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, problems := complete(t, tc.env, nil)
			if len(problems) > 0 {
				t.Fatal(joined(problems))
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

func TestErrorsNameTheVariable(t *testing.T) {
	certs := redistest.NewCerts(t)
	dir := t.TempDir()
	secret := filepath.Join(dir, "password")
	empty := filepath.Join(dir, "empty")
	notPEM := filepath.Join(dir, "not.pem")
	for path, content := range map[string]string{secret: "s3cret\n", empty: " \n", notPEM: "not a certificate"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const url, cluster, sentinels = "redis://r:6379", "r:7000", "s:26379"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"seed without port", map[string]string{"REDIS_CLUSTER_ADDRS": "r"}, "REDIS_CLUSTER_ADDRS"},
		{"seed with a bad port", map[string]string{"REDIS_CLUSTER_ADDRS": "r:70000"}, "REDIS_CLUSTER_ADDRS"},
		{"sentinel without master", map[string]string{"REDIS_SENTINEL_ADDRS": sentinels}, "REDIS_SENTINEL_MASTER: required"},
		{"master without sentinels", map[string]string{"REDIS_URL": url, "REDIS_SENTINEL_MASTER": "m"}, "REDIS_SENTINEL_MASTER: needs REDIS_SENTINEL_ADDRS"},
		{"sentinel password without sentinels", map[string]string{"REDIS_URL": url, "REDIS_SENTINEL_PASSWORD": "x"}, "REDIS_SENTINEL_PASSWORD"},
		{"password twice", map[string]string{"REDIS_URL": url, "REDIS_PASSWORD": "a", "REDIS_PASSWORD_FILE": empty}, "REDIS_PASSWORD_FILE: set together with REDIS_PASSWORD"},
		{"password file missing", map[string]string{"REDIS_URL": url, "REDIS_PASSWORD_FILE": filepath.Join(dir, "absent")}, "REDIS_PASSWORD_FILE"},
		{"password file empty", map[string]string{"REDIS_URL": url, "REDIS_PASSWORD_FILE": empty}, "REDIS_PASSWORD_FILE"},
		{"passwords in URL and variable differ", map[string]string{"REDIS_URL": "redis://:a@r:6379", "REDIS_PASSWORD": "b"}, "REDIS_PASSWORD: differs from the password in REDIS_URL"},
		{"password file differs from URL", map[string]string{"REDIS_URL": "redis://:a@r:6379", "REDIS_PASSWORD_FILE": secret}, "REDIS_PASSWORD: differs"},
		{"usernames in URL and variable differ", map[string]string{"REDIS_URL": "redis://u:a@r:6379", "REDIS_USERNAME": "v"}, "REDIS_USERNAME: differs"},
		{"TLS with redis://", map[string]string{"REDIS_URL": url, "REDIS_TLS": "true"}, "REDIS_TLS: REDIS_URL does not start with rediss://"},
		{"CA file with TLS off", map[string]string{"REDIS_CLUSTER_ADDRS": cluster, "REDIS_TLS_CA_FILE": certs.CAFile}, "REDIS_TLS_CA_FILE: TLS is off"},
		{"CA file missing", map[string]string{"REDIS_CLUSTER_ADDRS": cluster, "REDIS_TLS": "true", "REDIS_TLS_CA_FILE": filepath.Join(dir, "absent.pem")}, "REDIS_TLS_CA_FILE"},
		{"CA file not PEM", map[string]string{"REDIS_CLUSTER_ADDRS": cluster, "REDIS_TLS": "true", "REDIS_TLS_CA_FILE": notPEM}, "REDIS_TLS_CA_FILE"},
		{"certificate without key", map[string]string{"REDIS_CLUSTER_ADDRS": cluster, "REDIS_TLS": "true", "REDIS_TLS_CERT_FILE": certs.ClientCertFile}, "REDIS_TLS_KEY_FILE: required"},
		{"key without certificate", map[string]string{"REDIS_CLUSTER_ADDRS": cluster, "REDIS_TLS": "true", "REDIS_TLS_KEY_FILE": certs.ClientKeyFile}, "REDIS_TLS_CERT_FILE: required"},
		{"key of another certificate", map[string]string{"REDIS_CLUSTER_ADDRS": cluster, "REDIS_TLS": "true", "REDIS_TLS_CERT_FILE": certs.ClientCertFile, "REDIS_TLS_KEY_FILE": certs.ServerKeyFile}, "REDIS_TLS_CERT_FILE"},
		{"password without Redis", map[string]string{"REDIS_PASSWORD": "x"}, "REDIS_PASSWORD: set, but no Redis is configured"},
		{"TLS without Redis", map[string]string{"REDIS_TLS": "true"}, "REDIS_TLS: set, but no Redis"},
		{"WAIT without Redis", map[string]string{"REDIS_WAIT_REPLICAS": "1"}, "REDIS_WAIT_REPLICAS: set, but no Redis"},
		{"negative pool", map[string]string{"REDIS_URL": url, "REDIS_POOL_SIZE": "-1"}, "REDIS_POOL_SIZE"},
		{"zero dial timeout", map[string]string{"REDIS_URL": url, "REDIS_DIAL_TIMEOUT": "0s"}, "REDIS_DIAL_TIMEOUT"},
		{"zero check interval", map[string]string{"REDIS_URL": url, "REDIS_CHECK_INTERVAL": "0s"}, "REDIS_CHECK_INTERVAL: must be a positive duration"},
		{"negative timeout", map[string]string{"REDIS_URL": url, "REDIS_TIMEOUT": "-1s"}, "REDIS_TIMEOUT"},
		{"timeout near UPSTREAM_TIMEOUT", map[string]string{"REDIS_URL": url, "REDIS_TIMEOUT": "5s"}, "REDIS_TIMEOUT: 5s is more than a quarter of UPSTREAM_TIMEOUT"},
		{"negative WAIT", map[string]string{"REDIS_URL": url, "REDIS_WAIT_REPLICAS": "-1"}, "REDIS_WAIT_REPLICAS"},
		{"WAIT timeout not below REDIS_TIMEOUT", map[string]string{"REDIS_URL": url, "REDIS_WAIT_REPLICAS": "1", "REDIS_TIMEOUT": "200ms", "REDIS_WAIT_TIMEOUT": "200ms"}, "REDIS_WAIT_TIMEOUT: 200ms must be less than REDIS_TIMEOUT"},
		{"WAIT timeout zero", map[string]string{"REDIS_URL": url, "REDIS_WAIT_REPLICAS": "1", "REDIS_WAIT_TIMEOUT": "0s"}, "REDIS_WAIT_TIMEOUT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scope := &setting.Scope{StoreTimeout: time.Second, UpstreamTimeout: 10 * time.Second}
			scope.Chosen = tc.env["REDIS_URL"] != "" || tc.env["REDIS_CLUSTER_ADDRS"] != "" || tc.env["REDIS_SENTINEL_ADDRS"] != ""
			_, problems := complete(t, tc.env, scope)
			if got := joined(problems); !strings.Contains(got, tc.want) {
				t.Errorf("Complete = %q, want a problem containing %q", got, tc.want)
			}
		})
	}
}

// TestPasswordsNotInProblems: the problems never repeat a password.
func TestPasswordsNotInProblems(t *testing.T) {
	_, problems := complete(t, map[string]string{
		"REDIS_URL": "redis://:hunter2@r:6379", "REDIS_PASSWORD": "correct-horse", "REDIS_SENTINEL_PASSWORD": "battery-staple",
	}, nil)
	if len(problems) == 0 {
		t.Fatal("Complete found nothing")
	}
	for _, secret := range []string{"hunter2", "correct-horse", "battery-staple"} {
		if got := joined(problems); strings.Contains(got, secret) {
			t.Errorf("problems %q repeat %q", got, secret)
		}
	}
}
