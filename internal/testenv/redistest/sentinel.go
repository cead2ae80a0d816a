package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelConfig shapes a Sentinel setup. The zero value is a master, one
// replica and three Sentinels that fail over after one second, plain TCP.
type SentinelConfig struct {
	// DownAfter is down-after-milliseconds: how long the master may be
	// unreachable before the Sentinels fail over. Zero: 1s.
	DownAfter time.Duration
	// Certs, if not nil, makes the servers and the Sentinels speak TLS
	// only, to clients and to each other, requiring client certificates.
	Certs *Certs
	// Args are extra redis-server arguments for the master and the replica.
	Args []string
}

// Sentinel is a master and a replica watched by three Sentinels, which
// agree (quorum 2) on failing over to the replica.
type Sentinel struct {
	// MasterName is the name the Sentinels know the master by.
	MasterName string
	// Servers are the master and the replica, in their first roles; roles
	// change with failovers (see Master).
	Servers []*Server
	// Sentinels are the Sentinel processes.
	Sentinels []*Server

	t testing.TB
}

// NewSentinel starts the master, the replica and the Sentinels, and waits
// until the replica is in sync and the Sentinels know each other and can
// authorise a failover. Everything stops when the test ends.
func NewSentinel(t testing.TB, cfg SentinelConfig) *Sentinel {
	t.Helper()
	needRedis(t)
	downAfter := cfg.DownAfter
	if downAfter == 0 {
		downAfter = time.Second
	}
	var tlsArgs []string
	if cfg.Certs != nil {
		tlsArgs = append(cfg.Certs.serverArgs(), "--tls-replication", "yes")
	}
	sn := &Sentinel{MasterName: "mymaster", t: t}
	master := newServer(t, append(slices.Clone(tlsArgs), cfg.Args...)...)
	replica := newServer(t, append(slices.Clone(tlsArgs), cfg.Args...)...)
	replica.Args = append(replica.Args, replicaOf(master)...)
	sn.Servers = []*Server{master, replica}

	const n = 3
	ids := make([]string, n)
	for i := range n {
		s := newServer(t, append(slices.Clone(tlsArgs), "--sentinel")...)
		s.conf = filepath.Join(s.dir, "sentinel.conf")
		sn.Sentinels = append(sn.Sentinels, s)
		ids[i] = newRunID(t)
	}
	for i, s := range sn.Sentinels {
		// Each Sentinel is told of the replica and of the others up front,
		// rather than learning of them from hello messages every 2s.
		var conf strings.Builder
		fmt.Fprintf(&conf, "sentinel myid %s\n", ids[i])
		fmt.Fprintf(&conf, "sentinel monitor %s %s 2\n", sn.MasterName, hostPort(master.Addr))
		fmt.Fprintf(&conf, "sentinel down-after-milliseconds %s %d\n", sn.MasterName, downAfter.Milliseconds())
		// A failover whose election splits the vote is tried again after
		// twice this: 4s rather than the default 6 minutes.
		fmt.Fprintf(&conf, "sentinel failover-timeout %s 2000\n", sn.MasterName)
		fmt.Fprintf(&conf, "sentinel known-replica %s %s\n", sn.MasterName, hostPort(replica.Addr))
		for j, other := range sn.Sentinels {
			if j != i {
				fmt.Fprintf(&conf, "sentinel known-sentinel %s %s %s\n", sn.MasterName, hostPort(other.Addr), ids[j])
			}
		}
		if err := os.WriteFile(s.conf, []byte(conf.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range append(slices.Clone(sn.Servers), sn.Sentinels...) {
		if cfg.Certs != nil {
			s.TLS = cfg.Certs.ClientConfig(t)
		}
		s.Start()
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterStartDeadline)
	defer cancel()
	if err := sn.WaitHealthy(ctx, master); err != nil {
		t.Fatalf("the Sentinel setup never became healthy: %v\n%s", err, sn.logs())
	}
	return sn
}

// Addrs are the Sentinels' host:port.
func (sn *Sentinel) Addrs() []string {
	addrs := make([]string, len(sn.Sentinels))
	for i, s := range sn.Sentinels {
		addrs[i] = s.Addr
	}
	return addrs
}

// Master is the server a running Sentinel names as master now.
func (sn *Sentinel) Master(ctx context.Context) (*Server, error) {
	var last error
	for _, s := range sn.Sentinels {
		if !s.Running() {
			continue
		}
		m, err := sn.askMaster(ctx, s)
		if err == nil {
			return m, nil
		}
		last = err
	}
	return nil, fmt.Errorf("no Sentinel named the master: %w", last)
}

func (sn *Sentinel) askMaster(ctx context.Context, s *Server) (*Server, error) {
	sc := sentinelClient(s)
	defer sc.Close()
	hp, err := sc.GetMasterAddrByName(ctx, sn.MasterName).Result()
	if err != nil {
		return nil, err
	}
	if len(hp) != 2 {
		return nil, fmt.Errorf("GET-MASTER-ADDR-BY-NAME answered %q", hp)
	}
	addr := net.JoinHostPort(hp[0], hp[1])
	for _, srv := range sn.Servers {
		if srv.Addr == addr {
			return srv, nil
		}
	}
	return nil, fmt.Errorf("the Sentinels name %s, which is none of the servers", addr)
}

// WaitHealthy waits until every running Sentinel names master as the
// master and can reach a quorum, and every running replica is in sync.
func (sn *Sentinel) WaitHealthy(ctx context.Context, master *Server) error {
	return Poll(ctx, func() error { return sn.healthy(master) })
}

func (sn *Sentinel) healthy(master *Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range sn.Sentinels {
		if !s.Running() {
			continue
		}
		m, err := sn.askMaster(ctx, s)
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", s.Addr, err)
		}
		if m != master {
			return fmt.Errorf("sentinel %s names %s as master, want %s", s.Addr, m.Addr, master.Addr)
		}
		sc := sentinelClient(s)
		_, err = sc.CkQuorum(ctx, sn.MasterName).Result()
		sc.Close()
		if err != nil {
			return fmt.Errorf("sentinel %s: CKQUORUM: %w", s.Addr, err)
		}
	}
	for _, s := range sn.Servers {
		if !s.Running() {
			continue
		}
		rc := client(s)
		err := replicaInSync(ctx, rc)
		if err == nil && s != master {
			var role string
			role, err = rc.Info(ctx, "replication").Result()
			if err == nil && !strings.Contains(role, "role:slave") {
				err = errors.New("not a replica yet")
			}
		}
		rc.Close()
		if err != nil {
			return fmt.Errorf("server %s: %w", s.Addr, err)
		}
	}
	return nil
}

// WaitFailover waits until the Sentinels name a master other than old and
// returns it.
func (sn *Sentinel) WaitFailover(ctx context.Context, old *Server) (*Server, error) {
	var promoted *Server
	err := Poll(ctx, func() error {
		m, err := sn.Master(ctx)
		if err != nil {
			return err
		}
		if m == old {
			return fmt.Errorf("the Sentinels still name %s", old.Addr)
		}
		promoted = m
		return nil
	})
	return promoted, err
}

// Rejoin restarts a stopped former master as a replica of the current
// master, as a container's start script that asks the Sentinels would, and
// waits until it is in sync.
func (sn *Sentinel) Rejoin(ctx context.Context, s *Server) error {
	m, err := sn.Master(ctx)
	if err != nil {
		return err
	}
	if i := slices.Index(s.Args, "--replicaof"); i >= 0 {
		s.Args = slices.Delete(slices.Clone(s.Args), i, i+3)
	}
	s.Args = append(s.Args, replicaOf(m)...)
	s.Start()
	return sn.WaitHealthy(ctx, m)
}

// logs is every process's log, for a failure message.
func (sn *Sentinel) logs() string {
	var b strings.Builder
	for _, s := range append(slices.Clone(sn.Servers), sn.Sentinels...) {
		log, _ := os.ReadFile(s.LogFile())
		fmt.Fprintf(&b, "--- %s\n%s", s.Addr, log)
	}
	return b.String()
}

func replicaOf(master *Server) []string {
	host, port, _ := net.SplitHostPort(master.Addr)
	return []string{"--replicaof", host, port}
}

func hostPort(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	return host + " " + port
}

func newRunID(t testing.TB) string {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func sentinelClient(s *Server) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{
		Addr: s.Addr, TLSConfig: s.TLS, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
}
