package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterConfig shapes a Redis Cluster. The zero value is three masters
// without replicas, a node timeout of one second, plain TCP.
type ClusterConfig struct {
	// ReplicasPerMaster is how many replicas each of the three masters has.
	ReplicasPerMaster int
	// NodeTimeout is cluster-node-timeout: how long a master may be
	// unreachable before its replica takes over. Zero: 1s.
	NodeTimeout time.Duration
	// Certs, if not nil, makes every node speak TLS only, to clients and
	// to each other (cluster bus and replication), requiring client
	// certificates.
	Certs *Certs
	// Args are extra redis-server arguments for every node.
	Args []string
}

// Cluster is a Redis Cluster built with `redis-cli --cluster create`.
type Cluster struct {
	// Nodes are every node, masters first as created; roles change with
	// failovers (see MasterOf).
	Nodes []*Server

	t testing.TB
}

// clusterStartDeadline bounds building the cluster, and waiting for it to
// settle after a failover.
const clusterStartDeadline = 30 * time.Second

// NewCluster starts the nodes, joins them into one cluster with the 16384
// slots spread over three masters, and waits until every node agrees the
// cluster is up and every replica is in sync. The nodes stop when the test
// ends.
func NewCluster(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	needRedis(t)
	timeout := cfg.NodeTimeout
	if timeout == 0 {
		timeout = time.Second
	}
	args := []string{
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(timeout.Milliseconds(), 10),
	}
	if cfg.Certs != nil {
		args = append(args, cfg.Certs.serverArgs()...)
		args = append(args, "--tls-cluster", "yes", "--tls-replication", "yes")
	}
	args = append(args, cfg.Args...)
	c := &Cluster{t: t}
	n := 3 * (1 + cfg.ReplicasPerMaster)
	for range n {
		// The cluster bus gets a port of its own: the default, the
		// client port + 10000, may be taken or past 65535.
		s := newServer(t, append(slices.Clone(args), "--cluster-port", strconv.Itoa(FreePort(t)))...)
		if cfg.Certs != nil {
			s.TLS = cfg.Certs.ClientConfig(t)
		}
		c.Nodes = append(c.Nodes, s)
	}
	for _, s := range c.Nodes {
		s.Start()
	}

	create := append([]string{"--cluster", "create"}, c.Addrs()...)
	create = append(create, "--cluster-replicas", strconv.Itoa(cfg.ReplicasPerMaster), "--cluster-yes")
	if cfg.Certs != nil {
		create = append(create, "--tls", "--cacert", cfg.Certs.CAFile, "--cert", cfg.Certs.ClientCertFile, "--key", cfg.Certs.ClientKeyFile)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterStartDeadline)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", create...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(create, " "), err, out)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("the new cluster never became healthy: %v\n%s", err, c.logs())
	}
	return c
}

// Addrs are every node's host:port.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// node returns the node at addr, or nil.
func (c *Cluster) node(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// running returns the nodes that are up.
func (c *Cluster) running() []*Server {
	var up []*Server
	for _, s := range c.Nodes {
		if s.Running() {
			up = append(up, s)
		}
	}
	return up
}

// slotRange is a range of slots and the address of its master ("" if none).
type slotRange struct {
	start, end int
	master     string
}

// slots asks a running node which master serves each range of slots.
func (c *Cluster) slots(ctx context.Context) ([]slotRange, error) {
	var last error
	for _, s := range c.running() {
		slots, err := withClient(ctx, s, func(rc *redis.Client) ([]slotRange, error) {
			return slotRanges(ctx, rc)
		})
		if err == nil {
			return slots, nil
		}
		last = err
	}
	return nil, fmt.Errorf("no running node answered CLUSTER SHARDS: %w", last)
}

// slotRanges is rc's view of which master serves which slots.
func slotRanges(ctx context.Context, rc *redis.Client) ([]slotRange, error) {
	shards, err := rc.ClusterShards(ctx).Result()
	if err != nil {
		return nil, err
	}
	var ranges []slotRange
	for _, sh := range shards {
		master := ""
		for _, n := range sh.Nodes {
			if n.Role == "master" {
				port := n.Port
				if port == 0 {
					port = n.TLSPort
				}
				master = net.JoinHostPort(n.IP, strconv.FormatInt(port, 10))
			}
		}
		for _, r := range sh.Slots {
			ranges = append(ranges, slotRange{start: int(r.Start), end: int(r.End), master: master})
		}
	}
	return ranges, nil
}

// MasterOf is the node serving key's slot now, as a running node sees it.
func (c *Cluster) MasterOf(ctx context.Context, key string) (*Server, error) {
	slots, err := c.slots(ctx)
	if err != nil {
		return nil, err
	}
	slot := Slot(key)
	for _, sl := range slots {
		if slot >= sl.start && slot <= sl.end {
			if s := c.node(sl.master); s != nil {
				return s, nil
			}
			return nil, fmt.Errorf("slot %d is served by %q, which is not one of the cluster's nodes", slot, sl.master)
		}
	}
	return nil, fmt.Errorf("no master serves slot %d", slot)
}

// WaitHealthy waits until every running node says the cluster is ok and
// that running masters serve all 16384 slots, and every running replica
// has finished syncing with its master.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	return Poll(ctx, c.healthy)
}

func (c *Cluster) healthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range c.running() {
		err := func() error {
			rc := client(s)
			defer rc.Close()
			info, err := rc.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return errors.New("cluster_state is not ok")
			}
			slots, err := slotRanges(ctx, rc)
			if err != nil {
				return err
			}
			covered := 0
			for _, sl := range slots {
				if m := c.node(sl.master); m == nil || !m.Running() {
					return fmt.Errorf("slots %d-%d are served by %q, which is down", sl.start, sl.end, sl.master)
				}
				covered += sl.end - sl.start + 1
			}
			if covered != 16384 {
				return fmt.Errorf("%d of 16384 slots served", covered)
			}
			return replicaInSync(ctx, rc)
		}()
		if err != nil {
			return fmt.Errorf("node %s: %w", s.Addr, err)
		}
	}
	return nil
}

// replicaInSync fails while rc is a replica whose link to its master is
// down or still loading the master's data, or a master with a replica not
// yet online (a master counts a replica for WAIT only once it is).
func replicaInSync(ctx context.Context, rc *redis.Client) error {
	repl, err := rc.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if strings.Contains(repl, "role:slave") &&
		(!strings.Contains(repl, "master_link_status:up") || strings.Contains(repl, "master_sync_in_progress:1")) {
		return errors.New("replica not in sync with its master")
	}
	for _, line := range strings.Split(repl, "\n") {
		if strings.HasPrefix(line, "slave") && strings.Contains(line, ":ip=") && !strings.Contains(line, "state=online") {
			return fmt.Errorf("master has a replica not online yet: %s", strings.TrimSpace(line))
		}
	}
	return nil
}

// WaitPromoted waits until the slots victim served as a master are served
// by another running node and the cluster is ok again, and returns the
// node that took them over.
func (c *Cluster) WaitPromoted(ctx context.Context, victim *Server, slot int) (*Server, error) {
	var promoted *Server
	err := Poll(ctx, func() error {
		slots, err := c.slots(ctx)
		if err != nil {
			return err
		}
		for _, sl := range slots {
			if slot < sl.start || slot > sl.end {
				continue
			}
			m := c.node(sl.master)
			if m == nil || m == victim || !m.Running() {
				return fmt.Errorf("slot %d still served by %q", slot, sl.master)
			}
			promoted = m
			return c.healthy()
		}
		return fmt.Errorf("no master for slot %d", slot)
	})
	return promoted, err
}

// Slot is the cluster hash slot of key (CRC16 of the key, or of its
// {hash tag}, modulo 16384).
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// logs is every node's log, for a failure message.
func (c *Cluster) logs() string {
	var b strings.Builder
	for _, s := range c.Nodes {
		log, _ := os.ReadFile(s.LogFile())
		fmt.Fprintf(&b, "--- %s\n%s", s.Addr, log)
	}
	return b.String()
}

// client is a go-redis client for s alone, without retries: the fixtures
// poll instead.
func client(s *Server) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: s.Addr, TLSConfig: s.TLS, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
}

func withClient[T any](ctx context.Context, s *Server, f func(*redis.Client) (T, error)) (T, error) {
	rc := client(s)
	defer rc.Close()
	return f(rc)
}

// ReplicasOf are the nodes replicating from master now, as master sees it.
func (c *Cluster) ReplicasOf(ctx context.Context, master *Server) ([]*Server, error) {
	info, err := withClient(ctx, master, func(rc *redis.Client) (string, error) {
		return rc.Info(ctx, "replication").Result()
	})
	if err != nil {
		return nil, err
	}
	var replicas []*Server
	for _, line := range strings.Split(info, "\n") {
		// slave0:ip=127.0.0.1,port=6380,state=online,offset=42,lag=0
		if !strings.HasPrefix(line, "slave") || !strings.Contains(line, ":ip=") {
			continue
		}
		var ip, port string
		for _, field := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			k, v, _ := strings.Cut(field, "=")
			switch k {
			case "ip":
				ip = v
			case "port":
				port = v
			}
		}
		if s := c.node(net.JoinHostPort(ip, port)); s != nil {
			replicas = append(replicas, s)
		}
	}
	return replicas, nil
}
