// Package redisconf is the Redis store's settings: its environment
// variables (REDIS_*), their defaults and help, and their validation. It
// is apart from redisstore, and links no Redis client, so that the
// configuration can read and check it without linking the store's
// driver; redisstore.FromSettings turns it into the store's Config.
package redisconf

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/webhook-dedup/webhook-dedup/setting"
)

// Settings are the Redis store's environment variables. The desc tag is
// what -h and docs/configuration.md say about each.
type Settings struct {
	URL string `env:"REDIS_URL" desc:"redis://, rediss:// or unix:// URL; empty (and no REDIS_CLUSTER_ADDRS or REDIS_SENTINEL_ADDRS): embedded in-memory store, one replica only"`

	ClusterAddrs     setting.List  `env:"REDIS_CLUSTER_ADDRS" desc:"comma-separated host:port seeds of a Redis Cluster (instead of REDIS_URL)"`
	SentinelAddrs    setting.List  `env:"REDIS_SENTINEL_ADDRS" desc:"comma-separated host:port of the Sentinels watching REDIS_SENTINEL_MASTER (instead of REDIS_URL)"`
	SentinelMaster   string        `env:"REDIS_SENTINEL_MASTER" desc:"the master's name in the Sentinels' configuration (required with REDIS_SENTINEL_ADDRS)"`
	SentinelUsername string        `env:"REDIS_SENTINEL_USERNAME" desc:"ACL username for the Sentinels; empty: none"`
	SentinelPassword string        `env:"REDIS_SENTINEL_PASSWORD" desc:"password for the Sentinels; empty: none"`
	Username         string        `env:"REDIS_USERNAME" desc:"ACL username for Redis; empty: the URL's, or the default user"`
	Password         string        `env:"REDIS_PASSWORD" desc:"password for Redis; empty: the URL's, or none"`
	PasswordFile     string        `env:"REDIS_PASSWORD_FILE" desc:"file holding the Redis password (a mounted Secret), read at start and trimmed; instead of REDIS_PASSWORD"`
	TLS              bool          `env:"REDIS_TLS" envDefault:"false" desc:"TLS to the cluster nodes or the Sentinels and their servers (for REDIS_URL, write rediss://)"`
	TLSCAFile        string        `env:"REDIS_TLS_CA_FILE" desc:"PEM CA certificates that sign the Redis servers' certificates; empty: the system's roots"`
	TLSCertFile      string        `env:"REDIS_TLS_CERT_FILE" desc:"PEM client certificate for mutual TLS (with REDIS_TLS_KEY_FILE)"`
	TLSKeyFile       string        `env:"REDIS_TLS_KEY_FILE" desc:"PEM private key of REDIS_TLS_CERT_FILE"`
	TLSServerName    string        `env:"REDIS_TLS_SERVER_NAME" desc:"name every Redis certificate must carry; empty: the host dialled"`
	PoolSize         int           `env:"REDIS_POOL_SIZE" envDefault:"0" desc:"most connections to each Redis server; 0: ten per CPU"`
	DialTimeout      time.Duration `env:"REDIS_DIAL_TIMEOUT" envDefault:"2s" desc:"limit on opening a connection to Redis"`
	// Timeout is STORE_TIMEOUT when REDIS_TIMEOUT is unset (Complete).
	Timeout        time.Duration `env:"REDIS_TIMEOUT" desc:"limit on each Redis store operation, the wait for a pooled connection included; at most UPSTREAM_TIMEOUT/4; empty: STORE_TIMEOUT"`
	WaitReplicas   int           `env:"REDIS_WAIT_REPLICAS" envDefault:"0" desc:"replicas that must acknowledge a claim and a completion (WAIT) before they count; 0: asynchronous replication"`
	WaitTimeout    time.Duration `env:"REDIS_WAIT_TIMEOUT" envDefault:"250ms" desc:"how long to wait for those acknowledgements (a shortfall is a store error); less than REDIS_TIMEOUT"`
	CompactRecords bool          `env:"REDIS_COMPACT_RECORDS" envDefault:"false" desc:"write completed records in the compact form, 16 bytes less each, which releases before 0.4.0 cannot read: set it once none runs and none will be rolled back to; false: the form every release reads"`
	CheckInterval  time.Duration `env:"REDIS_CHECK_INTERVAL" envDefault:"5s" desc:"how often Redis's eviction policy, evicted keys, memory use and lost records are checked (logged, and exported as webhook_dedup_redis_* metrics)"`
}

// Mode is how Redis is reached.
type Mode string

// The ways to reach Redis, each chosen by its own variable.
const (
	Standalone Mode = "standalone" // REDIS_URL
	Cluster    Mode = "cluster"    // REDIS_CLUSTER_ADDRS
	Sentinel   Mode = "sentinel"   // REDIS_SENTINEL_ADDRS
)

// modes are the variables that choose Redis, in the order messages list
// them, each with the mode it chooses.
var modes = []struct {
	variable string
	mode     Mode
}{{"REDIS_URL", Standalone}, {"REDIS_CLUSTER_ADDRS", Cluster}, {"REDIS_SENTINEL_ADDRS", Sentinel}}

// Choices are the variables that choose Redis, in the order messages list
// them, each with whether it is set: REDIS_URL, REDIS_CLUSTER_ADDRS,
// REDIS_SENTINEL_ADDRS.
func (s *Settings) Choices() []setting.Choice {
	choices := make([]setting.Choice, len(modes))
	for i, m := range modes {
		choices[i] = setting.Choice{Variable: m.variable, Set: s.set(m.mode)}
	}
	return choices
}

// set reports whether the variable of mode is set.
func (s *Settings) set(mode Mode) bool {
	switch mode {
	case Standalone:
		return s.URL != ""
	case Cluster:
		return len(s.ClusterAddrs) > 0
	case Sentinel:
		return len(s.SentinelAddrs) > 0
	}
	return false
}

// Mode is the mode of the first of Choices that is set; empty if none is.
func (s *Settings) Mode() Mode {
	for _, m := range modes {
		if s.set(m.mode) {
			return m.mode
		}
	}
	return ""
}

// Complete validates the settings against scope, and fills in what they
// derive: Password from REDIS_PASSWORD_FILE, Timeout from STORE_TIMEOUT.
// Settings of a Redis not chosen are refused where they would otherwise
// be ignored in silence.
func (s *Settings) Complete(scope setting.Scope) setting.Problems {
	var bad setting.Problems
	if s.URL != "" {
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
			bad.Add("REDIS_URL", "not a redis://, rediss:// or unix:// URL")
		}
	}
	for _, list := range []struct {
		name  string
		addrs []string
	}{{"REDIS_CLUSTER_ADDRS", s.ClusterAddrs}, {"REDIS_SENTINEL_ADDRS", s.SentinelAddrs}} {
		for _, a := range list.addrs {
			host, port, err := net.SplitHostPort(a)
			if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
				bad.Add(list.name, "%q is not host:port", a)
			}
		}
	}
	sentinel := len(s.SentinelAddrs) > 0
	if sentinel && s.SentinelMaster == "" {
		bad.Add("REDIS_SENTINEL_MASTER", "required with REDIS_SENTINEL_ADDRS")
	}
	for _, v := range []struct{ name, value string }{
		{"REDIS_SENTINEL_MASTER", s.SentinelMaster},
		{"REDIS_SENTINEL_USERNAME", s.SentinelUsername},
		{"REDIS_SENTINEL_PASSWORD", s.SentinelPassword},
	} {
		if v.value != "" && !sentinel {
			bad.Add(v.name, "needs REDIS_SENTINEL_ADDRS")
		}
	}
	s.completeAuth(&bad)
	tlsFiles := s.completeTLS(&bad, scope.Chosen)

	if !scope.Chosen {
		// Without Redis these would be ignored in silence, and the proxy
		// would run on the embedded store the operator did not mean.
		redisOnly := append([]struct{ name, value string }{
			{"REDIS_USERNAME", s.Username}, {"REDIS_PASSWORD", s.Password}, {"REDIS_PASSWORD_FILE", s.PasswordFile},
		}, tlsFiles...)
		if s.TLS {
			redisOnly = append(redisOnly, struct{ name, value string }{"REDIS_TLS", "true"})
		}
		if s.WaitReplicas > 0 {
			redisOnly = append(redisOnly, struct{ name, value string }{"REDIS_WAIT_REPLICAS", strconv.Itoa(s.WaitReplicas)})
		}
		for _, v := range redisOnly {
			if v.value != "" {
				bad.Add(v.name, "set, but no Redis is configured (REDIS_URL, REDIS_CLUSTER_ADDRS or REDIS_SENTINEL_ADDRS)")
			}
		}
	}

	if s.PoolSize < 0 {
		bad.Add("REDIS_POOL_SIZE", "must not be negative, got %d", s.PoolSize)
	}
	if s.DialTimeout <= 0 {
		bad.Add("REDIS_DIAL_TIMEOUT", "must be a positive duration, got %s", s.DialTimeout)
	}
	if s.CheckInterval <= 0 {
		bad.Add("REDIS_CHECK_INTERVAL", "must be a positive duration, got %s", s.CheckInterval)
	}
	// Every forwarded request waits for the store before and after the
	// app: the store must answer far sooner than the app may take.
	limit := scope.UpstreamTimeout / 4
	switch {
	case s.Timeout == 0:
		s.Timeout = scope.StoreTimeout
	case s.Timeout < 0:
		bad.Add("REDIS_TIMEOUT", "must be a positive duration, got %s", s.Timeout)
	case limit > 0 && s.Timeout > limit:
		bad.Add("REDIS_TIMEOUT", "%s is more than a quarter of UPSTREAM_TIMEOUT (%s): the store must answer far sooner than the app", s.Timeout, scope.UpstreamTimeout)
	}
	if s.WaitReplicas < 0 {
		bad.Add("REDIS_WAIT_REPLICAS", "must not be negative, got %d", s.WaitReplicas)
	}
	if s.WaitReplicas > 0 {
		if s.WaitTimeout <= 0 {
			bad.Add("REDIS_WAIT_TIMEOUT", "must be a positive duration, got %s", s.WaitTimeout)
		} else if s.Timeout > 0 && s.WaitTimeout >= s.Timeout {
			bad.Add("REDIS_WAIT_TIMEOUT", "%s must be less than REDIS_TIMEOUT (%s), which bounds the WAIT's reply", s.WaitTimeout, s.Timeout)
		}
	}
	return bad
}

// completeAuth reads REDIS_PASSWORD_FILE into Password, and refuses
// credentials that contradict the URL's.
func (s *Settings) completeAuth(bad *setting.Problems) {
	var urlUser *url.Userinfo
	if u, err := url.Parse(s.URL); err == nil {
		urlUser = u.User
	}
	if s.PasswordFile != "" {
		if s.Password != "" {
			bad.Add("REDIS_PASSWORD_FILE", "set together with REDIS_PASSWORD: choose one")
		} else if b, err := os.ReadFile(s.PasswordFile); err != nil {
			bad.Add("REDIS_PASSWORD_FILE", "%v", err)
		} else if p := strings.TrimSpace(string(b)); p == "" {
			bad.Add("REDIS_PASSWORD_FILE", "%s is empty", s.PasswordFile)
		} else {
			s.Password = p
		}
	}
	// The same password in both is fine (a Kubernetes manifest may expand
	// $(REDIS_PASSWORD) into REDIS_URL); two different ones are a mistake.
	if p, ok := urlUser.Password(); ok && s.Password != "" && p != s.Password {
		bad.Add("REDIS_PASSWORD", "differs from the password in REDIS_URL: set one of them")
	}
	if u := urlUser.Username(); u != "" && s.Username != "" && u != s.Username {
		bad.Add("REDIS_USERNAME", "differs from the username in REDIS_URL: set one of them")
	}
}

// completeTLS checks the TLS settings and their files, and returns the
// TLS variables with their values, for the check that Redis is chosen.
func (s *Settings) completeTLS(bad *setting.Problems, chosen bool) []struct{ name, value string } {
	urlTLS := strings.HasPrefix(s.URL, "rediss://")
	if s.TLS && s.URL != "" && !urlTLS {
		bad.Add("REDIS_TLS", "REDIS_URL does not start with rediss://: write rediss:// for TLS")
	}
	tlsFiles := []struct{ name, value string }{
		{"REDIS_TLS_CA_FILE", s.TLSCAFile}, {"REDIS_TLS_CERT_FILE", s.TLSCertFile},
		{"REDIS_TLS_KEY_FILE", s.TLSKeyFile}, {"REDIS_TLS_SERVER_NAME", s.TLSServerName},
	}
	for _, f := range tlsFiles {
		if f.value != "" && !s.TLS && !urlTLS && chosen {
			bad.Add(f.name, "TLS is off: set REDIS_TLS=true, or write rediss:// in REDIS_URL")
		}
	}
	if s.TLSCAFile != "" {
		if pem, err := os.ReadFile(s.TLSCAFile); err != nil {
			bad.Add("REDIS_TLS_CA_FILE", "%v", err)
		} else if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			bad.Add("REDIS_TLS_CA_FILE", "%s holds no PEM certificate", s.TLSCAFile)
		}
	}
	switch {
	case s.TLSCertFile != "" && s.TLSKeyFile == "":
		bad.Add("REDIS_TLS_KEY_FILE", "required with REDIS_TLS_CERT_FILE")
	case s.TLSCertFile == "" && s.TLSKeyFile != "":
		bad.Add("REDIS_TLS_CERT_FILE", "required with REDIS_TLS_KEY_FILE")
	case s.TLSCertFile != "":
		if _, err := tls.LoadX509KeyPair(s.TLSCertFile, s.TLSKeyFile); err != nil {
			bad.Add("REDIS_TLS_CERT_FILE", "%v", err)
		}
	}
	return tlsFiles
}
