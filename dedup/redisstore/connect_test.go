package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// open is OpenRedis that fails the test on error and closes the store at
// its end.
func open(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// ackTimeout is the WaitTimeout of tests that expect every WAIT to be
// satisfied: generous, as a replica on a busy test machine may take more
// than the default 250ms to acknowledge.
const ackTimeout = 2 * time.Second

// aclUser is redis-server arguments creating the user "dedup" (password
// "s3cret") with the least the store needs, as docs/stores.md advises, on the
// tests' keys: the conformance suite's stores each have a key prefix
// "qN:" (redisBackends), and so a queue tagged "{qN:}".
var aclUser = []string{"--user", "dedup", "on", ">s3cret", "~dedup-test:*", "~tls:*", "~q*", "~{q*",
	"+@read", "+@write", "+@scripting", "+@connection", "+wait", "+time", "+cluster|shards", "+cluster|slots"}

// TestRedisCluster runs the conformance suite on a Redis Cluster of three
// masters with a replica each, without and with WAIT, and checks that WAIT
// counts the replica of the master that holds the key.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	// +info, as docs/stores.md advises, for the monitor and readiness (the
	// TLS test's user goes without it).
	cl := redistest.NewCluster(t, redistest.ClusterConfig{ReplicasPerMaster: 1, Args: slices.Concat(aclUser, []string{"+info"})})
	// Two seeds: the client discovers the other nodes.
	seeds := cl.Addrs()[:2]
	t.Run("conformance", func(t *testing.T) {
		storetest.Run(t, redisBackends(Config{ClusterAddrs: seeds}))
	})
	t.Run("conformance waiting for one replica, as an ACL user", func(t *testing.T) {
		storetest.Run(t, redisBackends(Config{ClusterAddrs: seeds, Username: "dedup", Password: "s3cret", WaitReplicas: 1, WaitTimeout: ackTimeout}))
	})
	t.Run("INFO from every master, as an ACL user", func(t *testing.T) {
		s := open(t, Config{ClusterAddrs: seeds, Username: "dedup", Password: "s3cret"})
		infos, err := s.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		addrs := map[string]bool{}
		for _, info := range infos {
			if info.RunID == "" || info.Policy == "" || info.UsedMemory == 0 {
				t.Errorf("INFO of %s: %+v; want run_id, maxmemory_policy and used_memory", info.Addr, info)
			}
			addrs[info.Addr] = true
		}
		if len(addrs) != 3 {
			t.Errorf("INFO from %d masters (%v), want all 3", len(addrs), addrs)
		}
		if err := s.Ping(context.Background()); err != nil {
			t.Error(err)
		}
	})
	t.Run("client kind", func(t *testing.T) {
		s := open(t, Config{ClusterAddrs: seeds})
		if _, ok := s.client.(cluster); !ok {
			t.Errorf("cluster addresses gave a %T, want a cluster", s.client)
		}
	})
	// Last: it stops a replica.
	t.Run("replica down", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// s waits briefly, for the writes meant to go unacknowledged; acked
		// waits as long as a loaded machine may need, for the writes a
		// replica that is up must acknowledge.
		s := open(t, Config{ClusterAddrs: seeds, WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
		acked := open(t, Config{ClusterAddrs: seeds, WaitReplicas: 1, WaitTimeout: ackTimeout})
		key := "replica-down:" + t.Name()
		master, err := cl.MasterOf(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		replicas, err := cl.ReplicasOf(ctx, master)
		if err != nil || len(replicas) != 1 {
			t.Fatalf("replicas of %s: %v, %v; want one", master.Addr, replicas, err)
		}
		// A key on another master, whose replica stays up.
		other := ""
		for i := 0; other == ""; i++ {
			k := fmt.Sprintf("replica-up:%d", i)
			if m, err := cl.MasterOf(ctx, k); err == nil && m != master {
				other = k
			}
		}
		replicas[0].Stop()
		// The master sees its replica's connection close.
		storetest.Eventually(t, "the master to lose its replica", func() bool {
			r, err := cl.ReplicasOf(ctx, master)
			return err == nil && len(r) == 0
		})

		if _, _, err := s.Claim(ctx, key, storetest.Lease); !errors.Is(err, ErrNotReplicated) {
			t.Errorf("Claim with the key's replica down = %v, want ErrNotReplicated", err)
		}
		if _, err := s.Lookup(ctx, key); !errors.Is(err, dedup.ErrNotFound) {
			t.Errorf("a claim no replica acknowledged was kept: Lookup = %v", err)
		}
		c, _ := storetest.MustClaim(t, acked, other, storetest.Lease)
		if err := acked.Complete(ctx, c, storetest.Replayed, storetest.Keep); err != nil {
			t.Errorf("Complete on a master whose replica is up: %v", err)
		}

		// A completion no replica acknowledges is retried, then reported;
		// the record stays on the master.
		w0 := open(t, Config{ClusterAddrs: seeds})
		c, _ = storetest.MustClaim(t, w0, key, storetest.Lease)
		// Long enough for one attempt to get its WAIT's answer on a loaded
		// machine: an attempt the deadline cuts short reports the answer
		// before it, and with none before, only the cut.
		short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
		defer cancelShort()
		if err := s.Complete(short, c, storetest.Replayed, storetest.Keep); !errors.Is(err, ErrNotReplicated) {
			t.Errorf("Complete with the key's replica down = %v, want ErrNotReplicated", err)
		}
		if rec := storetest.MustLookup(t, s, key); rec.State != dedup.Completed {
			t.Errorf("after an unacknowledged Complete: state %v, want completed on the master", rec.State)
		}

		replicas[0].Start()
		if err := cl.WaitHealthy(ctx); err != nil {
			t.Fatal(err)
		}
		if _, _, err := acked.Claim(ctx, key+"/again", storetest.Lease); err != nil {
			t.Errorf("Claim once the replica is back: %v", err)
		}
	})
}

// TestRedisSentinel runs the conformance suite on a master found through
// three Sentinels, without and with WAIT, then fails the master over.
func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	sn := redistest.NewSentinel(t, redistest.SentinelConfig{})
	cfg := Config{SentinelAddrs: sn.Addrs(), SentinelMaster: sn.MasterName}
	waiting := cfg
	waiting.WaitReplicas, waiting.WaitTimeout = 1, ackTimeout
	t.Run("conformance", func(t *testing.T) {
		storetest.Run(t, redisBackends(cfg))
	})
	t.Run("conformance waiting for one replica", func(t *testing.T) {
		storetest.Run(t, redisBackends(waiting))
	})
	// Last: it kills the master.
	t.Run("completion rides out a failover", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, w1 := open(t, cfg), open(t, waiting)
		done, _ := storetest.MustClaim(t, w1, "failover/completed", storetest.Lease)
		if err := w1.Complete(ctx, done, storetest.Replayed, storetest.Keep); err != nil {
			t.Fatal(err)
		}
		pending, _ := storetest.MustClaim(t, w1, "failover/pending", storetest.Lease)

		old, err := sn.Master(ctx)
		if err != nil {
			t.Fatal(err)
		}
		old.Stop()
		start := time.Now()
		// The Sentinels take a second to notice, and another to promote
		// the replica: Complete retries meanwhile.
		if err := s.Complete(ctx, pending, storetest.Replayed, storetest.Keep); err != nil {
			t.Errorf("Complete across the failover: %v", err)
		}
		t.Logf("Complete took %s across the failover", time.Since(start).Round(time.Millisecond))
		if _, err := sn.WaitFailover(ctx, old); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"failover/completed", "failover/pending"} {
			if rec, err := s.Lookup(ctx, key); err != nil || rec.State != dedup.Completed {
				t.Errorf("after the failover %s is %v, %v; want completed", key, rec.State, err)
			}
		}
		// With the old master back as a replica, WAIT is satisfied again.
		if err := sn.Rejoin(ctx, old); err != nil {
			t.Fatal(err)
		}
		c, _ := storetest.MustClaim(t, w1, "failover/after", storetest.Lease)
		if err := w1.Complete(ctx, c, storetest.Replayed, storetest.Keep); err != nil {
			t.Errorf("Complete once the old master is a replica: %v", err)
		}
	})
}

// TestRedisSentinelLaggingReplica shows what WaitReplicas buys: a record
// the master acknowledged but never sent to its replica is lost when the
// replica takes over; with WaitReplicas the same write is reported as an
// error at once (the proxy answers 503, the sender retries), not lost
// later.
func TestRedisSentinelLaggingReplica(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sn := redistest.NewSentinel(t, redistest.SentinelConfig{})
	cfg := Config{SentinelAddrs: sn.Addrs(), SentinelMaster: sn.MasterName}
	s := open(t, cfg)
	cfg.WaitReplicas = 1
	w1 := open(t, cfg)
	master, replica := sn.Servers[0], sn.Servers[1]
	raw := redis.NewClient(&redis.Options{Addr: master.Addr})
	t.Cleanup(func() { _ = raw.Close() })

	// The replica stalls, and the master drops its link to it: what the
	// master writes now reaches no replica.
	replica.Pause()
	t.Cleanup(replica.Resume)
	if err := raw.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	c, _ := storetest.MustClaim(t, s, "lag/unacknowledged", storetest.Lease)
	if err := s.Complete(ctx, c, storetest.Replayed, storetest.Keep); err != nil {
		t.Fatalf("Complete without WAIT: %v", err)
	}
	if _, _, err := w1.Claim(ctx, "lag/refused", storetest.Lease); !errors.Is(err, ErrNotReplicated) {
		t.Errorf("Claim with WAIT and no replica = %v, want ErrNotReplicated", err)
	}

	master.Stop()
	replica.Resume()
	if _, err := sn.WaitFailover(ctx, master); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, "the store to reach the new master", func() bool { return s.Ping(ctx) == nil })
	if _, err := s.Lookup(ctx, "lag/unacknowledged"); !errors.Is(err, dedup.ErrNotFound) {
		t.Errorf("after the failover, the record no replica acknowledged: Lookup = %v; want it lost (ErrNotFound)", err)
	}
	if _, err := s.Lookup(ctx, "lag/refused"); !errors.Is(err, dedup.ErrNotFound) {
		t.Errorf("after the failover, the refused claim: Lookup = %v, want ErrNotFound", err)
	}
}

// TestRedisTLS runs the conformance suite over mutual TLS, authenticated as
// an ACL user, and checks that each wrong setting is refused.
func TestRedisTLS(t *testing.T) {
	t.Parallel()
	certs := redistest.NewCerts(t)
	// The default user may only PING (the fixture's readiness check), so
	// every store call proves the ACL user is the one logged in. The user
	// may not send INFO: Ping then checks with PING alone.
	srv := redistest.NewTLS(t, certs, append([]string{"--user", "default", "on", "nopass", "-@all", "+ping"}, aclUser...)...)
	good := Config{
		URL: srv.URL(), Username: "dedup", Password: "s3cret",
		TLS: &TLS{CAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile},
	}
	t.Run("conformance", func(t *testing.T) {
		storetest.Run(t, redisBackends(good))
	})
	t.Run("credentials in the URL", func(t *testing.T) {
		cfg := good
		cfg.URL = "rediss://dedup:s3cret@" + srv.Addr
		cfg.Username, cfg.Password = "", ""
		if err := open(t, cfg).Ping(context.Background()); err != nil {
			t.Error(err)
		}
	})
	t.Run("server name localhost", func(t *testing.T) {
		cfg := good
		cfg.TLS = &TLS{CAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile, ServerName: "localhost"}
		if err := open(t, cfg).Ping(context.Background()); err != nil {
			t.Error(err)
		}
	})
	other := redistest.NewCerts(t)
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // in the error
	}{
		{"no client certificate", func(c *Config) { c.TLS = &TLS{CAFile: certs.CAFile} }, ""},
		{"another CA", func(c *Config) {
			c.TLS = &TLS{CAFile: other.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile}
		}, "certificate"},
		{"client certificate of another CA", func(c *Config) {
			c.TLS = &TLS{CAFile: certs.CAFile, CertFile: other.ClientCertFile, KeyFile: other.ClientKeyFile}
		}, ""},
		{"server name the certificate lacks", func(c *Config) {
			c.TLS = &TLS{CAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile, ServerName: "redis.example"}
		}, "redis.example"},
		{"wrong password", func(c *Config) { c.Password = "guess" }, "WRONGPASS"},
		{"default user", func(c *Config) { c.Username, c.Password = "", "" }, "NOPERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := good
			tc.edit(&cfg)
			s := open(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, _, err := s.Claim(ctx, "tls:"+tc.name, storetest.Lease)
			if err == nil {
				t.Fatal("Claim succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Claim = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	t.Run("plain TCP to a TLS port", func(t *testing.T) {
		s := open(t, Config{URL: "redis://" + srv.Addr, Username: "dedup", Password: "s3cret"})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Ping(ctx); err == nil {
			t.Error("Ping over plain TCP to a TLS-only server succeeded")
		}
	})
}

// TestRedisClusterTLS runs the conformance suite on a cluster whose nodes
// speak TLS only, to clients and among themselves.
func TestRedisClusterTLS(t *testing.T) {
	t.Parallel()
	certs := redistest.NewCerts(t)
	cl := redistest.NewCluster(t, redistest.ClusterConfig{Certs: certs})
	storetest.Run(t, redisBackends(Config{
		ClusterAddrs: cl.Addrs()[:1],
		TLS:          &TLS{CAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile},
	}))
}

// TestRedisSentinelTLS runs the conformance suite on a Sentinel setup whose
// Sentinels and servers speak TLS only.
func TestRedisSentinelTLS(t *testing.T) {
	t.Parallel()
	certs := redistest.NewCerts(t)
	sn := redistest.NewSentinel(t, redistest.SentinelConfig{Certs: certs})
	storetest.Run(t, redisBackends(Config{
		SentinelAddrs: sn.Addrs(), SentinelMaster: sn.MasterName, WaitReplicas: 1, WaitTimeout: ackTimeout,
		TLS: &TLS{CAFile: certs.CAFile, CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile},
	}))
}

func TestOpenRedisBadConfig(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	certs := redistest.NewCerts(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"nothing", Config{}, "no Redis"},
		{"URL and cluster", Config{URL: "redis://127.0.0.1:6379", ClusterAddrs: []string{"127.0.0.1:7000"}}, "more than one"},
		{"cluster and sentinel", Config{ClusterAddrs: []string{"127.0.0.1:7000"}, SentinelAddrs: []string{"127.0.0.1:26379"}, SentinelMaster: "m"}, "more than one"},
		{"sentinel without master", Config{SentinelAddrs: []string{"127.0.0.1:26379"}}, "master name"},
		{"address without port", Config{ClusterAddrs: []string{"127.0.0.1"}}, "127.0.0.1"},
		{"TLS with redis://", Config{URL: "redis://127.0.0.1:6379", TLS: &TLS{}}, "rediss://"},
		{"missing CA file", Config{URL: "rediss://127.0.0.1:6379", TLS: &TLS{CAFile: filepath.Join(dir, "absent.pem")}}, "absent.pem"},
		{"CA file without a certificate", Config{ClusterAddrs: []string{"127.0.0.1:7000"}, TLS: &TLS{CAFile: notPEM}}, "no PEM certificate"},
		{"certificate without key", Config{ClusterAddrs: []string{"127.0.0.1:7000"}, TLS: &TLS{CertFile: certs.ClientCertFile}}, "key file"},
		{"key of another certificate", Config{ClusterAddrs: []string{"127.0.0.1:7000"}, TLS: &TLS{CertFile: certs.ClientCertFile, KeyFile: certs.ServerKeyFile}}, "client certificate"},
		{"negative WaitReplicas", Config{URL: "redis://127.0.0.1:6379", WaitReplicas: -1}, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(tc.cfg)
			if err == nil {
				_ = s.Close()
				t.Fatal("OpenRedis succeeded")
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "dedup: ") || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q, want it to start with \"dedup: \" and mention %q", msg, tc.want)
			}
		})
	}
}

// TestOpenRedisModeDefaults checks each mode's client gets the short
// timeouts, the pool and the request-bound deadlines.
func TestOpenRedisModeDefaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		options func(topology) (dial, read, write time.Duration, pool int, ctxTimeout bool)
	}{
		{"cluster", Config{ClusterAddrs: []string{"127.0.0.1:7000"}}, func(c topology) (time.Duration, time.Duration, time.Duration, int, bool) {
			o := c.(cluster).Options()
			return o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolSize, o.ContextTimeoutEnabled
		}},
		{"sentinel", Config{SentinelAddrs: []string{"127.0.0.1:26379"}, SentinelMaster: "m"}, func(c topology) (time.Duration, time.Duration, time.Duration, int, bool) {
			o := c.(server).Options()
			return o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolSize, o.ContextTimeoutEnabled
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, tc.cfg)
			dial, read, write, pool, ctxTimeout := tc.options(s.client)
			if dial != defaultDialTimeout || read != defaultTimeout || write != defaultTimeout || pool < 10 || !ctxTimeout {
				t.Errorf("DialTimeout %s, ReadTimeout %s, WriteTimeout %s, PoolSize %d, ContextTimeoutEnabled %v; want %s, %s, %s, at least 10, true",
					dial, read, write, pool, ctxTimeout, defaultDialTimeout, defaultTimeout, defaultTimeout)
			}
			set := tc.cfg
			set.DialTimeout, set.Timeout, set.PoolSize = 3*time.Second, 300*time.Millisecond, 7
			dial, read, write, pool, _ = tc.options(open(t, set).client)
			if dial != 3*time.Second || read != 300*time.Millisecond || write != 300*time.Millisecond || pool != 7 {
				t.Errorf("set: DialTimeout %s, ReadTimeout %s, WriteTimeout %s, PoolSize %d; want 3s, 300ms, 300ms, 7", dial, read, write, pool)
			}
		})
	}
}

// TestOpenRedisNoMaintNotifications: go-redis's maintenance notifications
// stay off, since its "auto" mode races with the Conns taken for WAIT.
func TestOpenRedisNoMaintNotifications(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		mode func(topology) maintnotifications.Mode
	}{
		{"URL", Config{URL: "redis://127.0.0.1:6379"}, func(c topology) maintnotifications.Mode {
			return c.(server).Options().MaintNotificationsConfig.Mode
		}},
		{"cluster", Config{ClusterAddrs: []string{"127.0.0.1:7000"}}, func(c topology) maintnotifications.Mode {
			return c.(cluster).Options().MaintNotificationsConfig.Mode
		}},
		{"sentinel", Config{SentinelAddrs: []string{"127.0.0.1:26379"}, SentinelMaster: "m"}, func(c topology) maintnotifications.Mode {
			return c.(server).Options().MaintNotificationsConfig.Mode
		}},
	} {
		if got := tc.mode(open(t, tc.cfg).client); got != maintnotifications.ModeDisabled {
			t.Errorf("%s: maintenance notifications %q, want %q", tc.name, got, maintnotifications.ModeDisabled)
		}
	}
}

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{io.EOF, true},
		{fmt.Errorf("wrapped: %w", ErrNotReplicated), true},
		{dedup.ErrNotOwner, false},
		{codec.ErrBadRecord, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{redis.ErrClosed, false},
		{redis.Nil, false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
