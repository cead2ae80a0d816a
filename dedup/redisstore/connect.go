package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/storeop"
	"go.uber.org/zap"
)

// Config says how to reach Redis: one server (URL), a Redis Cluster
// (ClusterAddrs) or a master found through Sentinels (SentinelAddrs).
// Exactly one of the three must be set.
type Config struct {
	// URL is redis://[user:password@]host:port[/db][?option=value],
	// rediss:// for TLS, or unix:///path/to/socket, as read by
	// redis.ParseURL. Options in the query (dial_timeout, pool_size, ...)
	// win over the fields below.
	URL string
	// ClusterAddrs are host:port addresses of some nodes of a Redis
	// Cluster; the client discovers the rest.
	ClusterAddrs []string
	// SentinelAddrs are host:port addresses of the Sentinels that watch
	// SentinelMaster, the master's name in their configuration.
	SentinelAddrs  []string
	SentinelMaster string
	// SentinelUsername and SentinelPassword authenticate to the Sentinels.
	// Empty: no authentication.
	SentinelUsername, SentinelPassword string

	// Username and Password authenticate to Redis (a Password alone is the
	// default user's). If set, they replace the URL's. Empty: the URL's,
	// or no authentication.
	Username, Password string
	// TLS, if not nil, connects with TLS. Nil: plain TCP, unless the URL
	// is rediss://, which means TLS with the zero RedisTLS.
	TLS *TLS

	// PoolSize is the most connections kept to each Redis server. Zero:
	// ten per CPU.
	PoolSize int
	// DialTimeout bounds opening a connection. Zero: 2s.
	DialTimeout time.Duration
	// Timeout bounds each store operation (Claim, Release, Lookup,
	// Forget, Ping, and each of Complete's attempts), its wait for a
	// pooled connection included; with WaitReplicas, WaitTimeout is
	// added. Zero: 1s.
	Timeout time.Duration

	// WaitReplicas is how many replicas must acknowledge a won claim and a
	// completion (Redis's WAIT) before the store reports them done; fewer
	// within WaitTimeout is an error wrapping ErrNotReplicated. Zero: no
	// WAIT; replication stays asynchronous, and a failover can lose the
	// last writes a master acknowledged.
	WaitReplicas int
	// WaitTimeout bounds each WAIT. Zero: 250ms.
	WaitTimeout time.Duration

	// CompactRecords writes completed records in the compact form (a
	// 64-bit integer, 16 bytes less in Redis's memory each; see
	// codec.EncodeCompact), which releases before 0.4.0 cannot read.
	// Records of either form are read whatever it says. False: the 12-byte
	// binary form every release reads, so that older ones running beside
	// this one, or brought back, read its records.
	CompactRecords bool

	// AppName, if not empty, is the identity of the deployment whose
	// records these are (APP_NAME): the store makes it the owner of
	// KeyPrefix, and refuses claims, lookups and pings (ErrPrefixOwned)
	// when another app owns it. Empty: no check.
	AppName string
	// KeyPrefix is the prefix of the store's keys (KEY_PREFIX). The owner
	// key is OwnerKey(KeyPrefix), checked only with AppName; the async
	// queue's keys, and the records of async events, are named under the
	// hash tag {KeyPrefix} (see redisqueue.go). Empty: the tag
	// {webhook-dedup}.
	KeyPrefix string
	// Logger is told when the async queue's consumer group had to be
	// created again (Redis lost data). Nil: nothing is logged.
	Logger *zap.Logger
}

// TLS is how to check the Redis servers' certificates and which
// certificate to present for mutual TLS. The minimum version is TLS 1.2.
type TLS struct {
	// CAFile is a PEM file of the CA certificates that sign the servers'
	// certificates. Empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// servers that require one (tls-auth-clients). Both or neither. Empty:
	// no client certificate.
	CertFile, KeyFile string
	// ServerName is the name every server's certificate must carry. Empty:
	// the host each connection dials.
	ServerName string
}

// Defaults for what the configuration leaves unset: short timeouts, so a
// Redis outage costs a request a second or two rather than go-redis's
// default minutes of retries, and a pool large enough for one connection
// per concurrent request on a busy proxy.
const (
	defaultDialTimeout = 2 * time.Second
	defaultTimeout     = time.Second
	defaultWaitTimeout = 250 * time.Millisecond
)

// noRetries turns go-redis's own retries of a command off (MaxRetries
// -1). A call whose answer timed out may have run, or may yet run once a
// stalled Redis wakes, and go-redis sent it again as it was: both ran,
// and the caller got one answer. For a Take, whose every run leases what
// is due under the tokens it was given, the other run's deliveries then
// waited out their whole lease, held by no worker (a Redis frozen for 3
// s delayed them by LEASE_TTL). The store recovers every lost answer
// itself (lostTakes, releaseLate, the workers' writes tried again), and
// can only if the call's error reaches it.
const noRetries = -1

// ErrNotReplicated means fewer replicas than RedisConfig.WaitReplicas
// acknowledged a write in time: it is on the master, but a failover now
// could lose it.
var ErrNotReplicated = errors.New("dedup: too few replicas acknowledged the write")

// Open connects to the Redis cfg describes. It does not wait for Redis
// to answer: use Ping for that (a proxy may start before its Redis).
func Open(cfg Config) (*Store, error) {
	if cfg.WaitReplicas < 0 {
		return nil, fmt.Errorf("dedup: WaitReplicas %d is negative", cfg.WaitReplicas)
	}
	client, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	s := newStore(client)
	s.queue = newQueueKeys(cfg.KeyPrefix)
	if cfg.Logger != nil {
		s.log = cfg.Logger
	}
	s.waitReplicas = cfg.WaitReplicas
	s.compact = cfg.CompactRecords
	s.waitTimeout = orDefault(cfg.WaitTimeout, defaultWaitTimeout)
	ownerKey := OwnerKey(cfg.KeyPrefix)
	s.owner = storeop.Owner{App: cfg.AppName, Where: ownerKey, Read: func(ctx context.Context) (string, error) {
		return s.readOwner(ctx, cfg.AppName, ownerKey)
	}}
	// Timeout bounds a whole operation, not only each read: its wait for
	// a pooled connection (and on a cluster, go-redis sending a timed-out
	// call again) would otherwise stretch it to several times that. With
	// WAIT, an operation is two round trips.
	s.opTimeout = orDefault(cfg.Timeout, defaultTimeout)
	if cfg.WaitReplicas > 0 {
		s.opTimeout += s.waitTimeout
	}
	if s.scripts, err = client.scripter(cfg.WaitReplicas > 0); err != nil {
		_ = client.Close()
		return nil, err
	}
	return s, nil
}

// newClient builds the go-redis client for cfg's mode: a *redis.Client for
// one server or through Sentinels, a *redis.ClusterClient for a cluster;
// each as the topology the store asks what differs between them.
func newClient(cfg Config) (topology, error) {
	modes := 0
	for _, set := range []bool{cfg.URL != "", len(cfg.ClusterAddrs) > 0, len(cfg.SentinelAddrs) > 0} {
		if set {
			modes++
		}
	}
	switch {
	case modes == 0:
		return nil, errors.New("dedup: no Redis configured: set a URL, cluster addresses or Sentinel addresses")
	case modes > 1:
		return nil, errors.New("dedup: more than one of a URL, cluster addresses and Sentinel addresses")
	case cfg.URL != "":
		c, err := newURLClient(cfg)
		if err != nil {
			return nil, err
		}
		return server{Client: c, direct: true}, nil
	}
	addrs := cfg.ClusterAddrs
	if len(addrs) == 0 {
		addrs = cfg.SentinelAddrs
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("dedup: redis address %q: %w", a, err)
		}
	}
	var tlsConfig *tls.Config
	if cfg.TLS != nil {
		var err error
		if tlsConfig, err = cfg.TLS.config(); err != nil {
			return nil, err
		}
	}
	pool := orDefault(cfg.PoolSize, 10*runtime.GOMAXPROCS(0))
	timeout := orDefault(cfg.Timeout, defaultTimeout)
	if len(cfg.ClusterAddrs) > 0 {
		return cluster{redis.NewClusterClient(&redis.ClusterOptions{
			// A copy: go-redis appends the nodes it discovers to Addrs,
			// which would write into the caller's array (and race with
			// any other client made from it).
			Addrs:    slices.Clone(cfg.ClusterAddrs),
			Username: cfg.Username, Password: cfg.Password, TLSConfig: tlsConfig,
			DialTimeout: orDefault(cfg.DialTimeout, defaultDialTimeout),
			ReadTimeout: timeout, WriteTimeout: timeout,
			PoolSize: pool,
			// See newURLClient. Still, a command whose answer timed
			// out goes to the node again within MaxRedirects, which
			// MOVED and ASK need.
			MaxRetries:               noRetries,
			DialerRetries:            1,
			ContextTimeoutEnabled:    true,
			MaintNotificationsConfig: noMaintNotifications(),
		})}, nil
	}
	if cfg.SentinelMaster == "" {
		return nil, errors.New("dedup: Sentinel addresses without a master name")
	}
	return server{Client: redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:       cfg.SentinelMaster,
		SentinelAddrs:    slices.Clone(cfg.SentinelAddrs),
		SentinelUsername: cfg.SentinelUsername, SentinelPassword: cfg.SentinelPassword,
		Username: cfg.Username, Password: cfg.Password, TLSConfig: tlsConfig,
		DialTimeout: orDefault(cfg.DialTimeout, defaultDialTimeout),
		ReadTimeout: timeout, WriteTimeout: timeout,
		PoolSize:              pool,
		MinIdleConns:          runtime.GOMAXPROCS(0),
		MaxRetries:            noRetries,
		DialerRetries:         1,
		ContextTimeoutEnabled: true,
	})}, nil
}

// newURLClient is the client for one server named by a URL.
func newURLClient(cfg Config) (*redis.Client, error) {
	// Checked before parsing so an unparseable URL is not echoed back: it
	// may carry a password.
	scheme, _, _ := strings.Cut(cfg.URL, "://")
	if scheme != "redis" && scheme != "rediss" && scheme != "unix" {
		return nil, errors.New("dedup: redis URL must start with redis://, rediss:// or unix://")
	}
	opt, err := redis.ParseURL(cfg.URL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the URL, password included
		}
		return nil, fmt.Errorf("dedup: redis URL: %w", err)
	}
	if cfg.TLS != nil {
		if opt.TLSConfig == nil {
			return nil, errors.New("dedup: TLS settings with a redis:// URL: use rediss://")
		}
		tlsConfig, err := cfg.TLS.config()
		if err != nil {
			return nil, err
		}
		// Keep what the URL asked for (skip_verify); add the files.
		opt.TLSConfig.RootCAs = tlsConfig.RootCAs
		opt.TLSConfig.Certificates = tlsConfig.Certificates
		if tlsConfig.ServerName != "" {
			opt.TLSConfig.ServerName = tlsConfig.ServerName
		}
	}
	if cfg.Username != "" {
		opt.Username = cfg.Username
	}
	if cfg.Password != "" {
		opt.Password = cfg.Password
	}
	opt.DialTimeout = orDefault(opt.DialTimeout, orDefault(cfg.DialTimeout, defaultDialTimeout))
	opt.ReadTimeout = orDefault(opt.ReadTimeout, orDefault(cfg.Timeout, defaultTimeout))
	opt.WriteTimeout = orDefault(opt.WriteTimeout, orDefault(cfg.Timeout, defaultTimeout))
	opt.PoolSize = orDefault(opt.PoolSize, orDefault(cfg.PoolSize, 10*runtime.GOMAXPROCS(0)))
	opt.MinIdleConns = orDefault(opt.MinIdleConns, runtime.GOMAXPROCS(0))
	// One attempt, one dial: go-redis's 5 dial attempts made each call
	// take about 1.5s to fail while Redis was down, where about 0.1s is
	// enough to tell. The URL cannot set this option. Nor, whatever its
	// max_retries says, can it have a command sent twice (noRetries).
	opt.MaxRetries = noRetries
	opt.DialerRetries = 1
	// A request's deadline bounds its Redis call too.
	opt.ContextTimeoutEnabled = true
	opt.MaintNotificationsConfig = noMaintNotifications()
	return redis.NewClient(opt), nil
}

// noMaintNotifications turns off go-redis's maintenance notifications, a
// Redis Enterprise feature. In its default "auto" mode go-redis asks for
// them on every new connection and, when the server says no (as open-source
// Redis does), rewrites options that a client shares with the Conns taken
// from it for WAIT: a data race. (Its failover client already turns them
// off.)
func noMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// config loads the files into a client TLS configuration.
func (t *TLS) config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("dedup: TLS CA file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("dedup: TLS CA file %s holds no PEM certificate", t.CAFile)
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("dedup: a TLS client certificate needs both a certificate file and a key file")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("dedup: TLS client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
