// Package config reads webhook-dedup's configuration from environment
// variables, validates all of it at once, and describes it for -h.
package config

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"reflect"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/webhook-dedup/webhook-dedup/dedup/diskstore/diskconf"
	"github.com/webhook-dedup/webhook-dedup/dedup/dynamostore/dynamoconf"
	"github.com/webhook-dedup/webhook-dedup/dedup/pgstore/pgconf"
	"github.com/webhook-dedup/webhook-dedup/dedup/redisstore/redisconf"
	"github.com/webhook-dedup/webhook-dedup/policy"
	"github.com/webhook-dedup/webhook-dedup/providers"
)

// Config is the whole configuration. Every field with an env tag is one
// environment variable, its desc tag what -h and docs/configuration.md say
// about it; a field without one is a store's settings, whose fields are
// variables in the same way, owned by the store's package (Variables lists
// them in their place).
type Config struct {
	UpstreamURL string `env:"UPSTREAM_URL" desc:"the app, e.g. http://127.0.0.1:3000 (required)"`
	ListenAddr  string `env:"LISTEN_ADDR" envDefault:":8080" desc:"where webhooks arrive"`
	AdminAddr   string `env:"ADMIN_ADDR" envDefault:":9090" desc:"/healthz, /readyz, /metrics and the admin API"`
	Routes      string `env:"ROUTES" envDefault:"/=auto" desc:"comma-separated PATH=SOURCE, each optionally followed by ;sync or ;async (overriding DELIVERY), then by async routes' options, each once: ;order=SOURCE (deliver the events that share this key, a header: or json: source or parts joined with +, one at a time in the order they were accepted) and ;rate=N/s or N/m (at most N attempts, retries included, a second or a minute in each process; N up to 10000/s, 600000/m), as in /webhooks/shop=shopify;async;order=json:customer.id;rate=20/s; longest whole-segment prefix wins, matched on the path as frameworks route it (any case, ; parameters dropped, dot segments and repeated slashes resolved, a .format suffix tried)"`

	// Delivery and the async workers' settings (validated in completeDelivery).
	Delivery             policy.DeliveryMode `env:"DELIVERY" envDefault:"sync" desc:"sync (the sender waits for the app's answer) or async (answer at once, deliver in the background with retries; needs a durable store)"`
	DeliveryConcurrency  int                 `env:"DELIVERY_CONCURRENCY" envDefault:"16" desc:"most background delivery attempts at once in this process, per async route (a route whose app hangs holds none of another's), and as many more taken from the queue ahead of them, so that a worker goes on with the next at once"`
	QueueMaxDepth        int                 `env:"QUEUE_MAX_DEPTH" envDefault:"100000" desc:"events waiting for delivery from which a first-seen webhook of an async route is answered 503 queue-full with Retry-After (duplicates are still answered); checked by the store as it enqueues: exactly on DATA_DIR and Redis, on PostgreSQL up to what other replicas queued since this one last read the depth (docs/delivery.md); 0: no bound"`
	AsyncStatus          int                 `env:"ASYNC_STATUS" envDefault:"202" desc:"the answer to a webhook accepted for background delivery: 202 or 200"`
	RetryInitialInterval time.Duration       `env:"RETRY_INITIAL_INTERVAL" envDefault:"1s" desc:"backoff before the second attempt of a failed background delivery (then doubling, with full jitter)"`
	RetryMaxInterval     time.Duration       `env:"RETRY_MAX_INTERVAL" envDefault:"10m" desc:"longest backoff between attempts, also the cap on a Retry-After honoured"`
	OrderOnFailure       OrderOnFailure      `env:"ORDER_ON_FAILURE" envDefault:"skip" desc:"what a route with order= does once the event at the head of a key is dead-lettered: skip (go on with the key's next event) or block (the key waits until that dead letter is retried and completes, or is forgotten)"`
	RetryMaxAttempts     int                 `env:"RETRY_MAX_ATTEMPTS" desc:"attempts, the first included, before an event is dead-lettered; empty: no cap, an event is retried until RETRY_MAX_AGE (the knob for how long to keep trying)"`
	RetryMaxAge          time.Duration       `env:"RETRY_MAX_AGE" envDefault:"72h" desc:"an event still failing this long after it was accepted is dead-lettered"`
	DeadLetterTTL        time.Duration       `env:"DEAD_LETTER_TTL" envDefault:"168h" desc:"how long a dead-lettered event is kept, with its request, for a retry"`
	// Resign and AllowUnverifiedAsync are validated in completeVerified.
	Resign               string `env:"RESIGN" envDefault:"auto" desc:"auto: each background attempt of an event whose preset signs a timestamp in a header (Stripe, Standard Webhooks, Slack, Paddle, Twitch, Zoom, Zendesk, GitLab signing tokens) carries a fresh timestamp and signature, made with the first of the preset's secrets, so the app's own 5-minute check passes however late the retry; off: the headers as received"`
	AllowUnverifiedAsync bool   `env:"ALLOW_UNVERIFIED_ASYNC" envDefault:"false" desc:"let an async route accept a preset's webhooks without verifying their signatures (its secret not set, or PayPal, Adyen, Mailgun); without it that is a configuration error: a forged request carrying a real event ID would be queued and the genuine event answered as a duplicate the app never sees"`

	// The stores' settings, each owned by its store: its variables, their
	// defaults and help, and its validation (its Complete, run by
	// completeStores).
	Redis redisconf.Settings
	Disk  diskconf.Settings

	KeyPrefix string `env:"KEY_PREFIX" envDefault:"webhook-dedup:" desc:"prefix of every store key"`
	AppName   string `env:"APP_NAME" desc:"this deployment's identity, kept with its records (Redis: KEY_PREFIX + owner; PostgreSQL: the owners table): a sidecar finding its KEY_PREFIX owned by another APP_NAME refuses to start; empty: no check"`

	Postgres pgconf.Settings
	// The cache in front of any store (validated by completeCache).
	CacheSize int           `env:"CACHE_SIZE" envDefault:"0" desc:"completed records kept in this process's memory, answering their duplicates without the store; 0: no cache"`
	CacheTTL  time.Duration `env:"CACHE_TTL" envDefault:"1m" desc:"longest a record stays cached (a forget on another replica is seen within it)"`

	DynamoDB dynamoconf.Settings

	StoreTimeout time.Duration `env:"STORE_TIMEOUT" desc:"limit on each store operation, retries included; at most UPSTREAM_TIMEOUT/4; empty: 1s or UPSTREAM_TIMEOUT/4, whichever is less (for Redis, REDIS_TIMEOUT wins where set)"`

	DedupTTL        time.Duration `env:"DEDUP_TTL" desc:"lifetime of completed records on every route; empty: each preset's own (generic sources: 72h)"`
	UpstreamTimeout time.Duration `env:"UPSTREAM_TIMEOUT" envDefault:"30s" desc:"limit on each forwarded request"`
	LeaseTTL        time.Duration `env:"LEASE_TTL" desc:"lifetime of an in-flight claim; must exceed UPSTREAM_TIMEOUT; empty: UPSTREAM_TIMEOUT + 15s"`
	MaxBodyBytes    int64         `env:"MAX_BODY_BYTES" envDefault:"10485760" desc:"largest body read for ID extraction, signatures or fingerprints (413 beyond)"`
	// MaxBufferedBytes is validated by completeBuffered; zero (unset) is
	// derived from the memory limit when serving.
	MaxBufferedBytes int64 `env:"MAX_BUFFERED_BYTES" desc:"most memory the bodies of all requests being read, and of the async deliveries the workers hold, may take at once; beyond it, a request that must read its body gets 503 with Retry-After; at least MAX_BODY_BYTES; empty: a quarter of the container's memory limit (cgroup), or 256 MiB without one; unless GOMEMLIMIT is set, the Go runtime's soft memory limit is derived from it"`

	OnStoreError policy.StoreErrorPolicy `env:"ON_STORE_ERROR" envDefault:"reject" desc:"store unreachable: reject (503) or forward (fail open)"`
	OnMissingID  policy.MissingIDPolicy  `env:"ON_MISSING_ID" envDefault:"forward" desc:"no event ID on a dedup route: forward or reject (400)"`

	SignatureTolerance   time.Duration `env:"SIGNATURE_TOLERANCE" envDefault:"5m" desc:"allowed age (and future skew) of a signed timestamp"`
	DedupBodyFingerprint bool          `env:"DEDUP_BODY_FINGERPRINT" envDefault:"false" desc:"also treat a body already completed within the TTL as a duplicate"`

	ReplayResponse bool          `env:"REPLAY_RESPONSE" envDefault:"false" desc:"answer duplicates with the original status, Content-Type and body"`
	ReplayMaxBytes int           `env:"REPLAY_MAX_BYTES" envDefault:"65536" desc:"largest response body kept for replay; 0 keeps none (only answers with an empty body are replayed)"`
	InflightWait   time.Duration `env:"INFLIGHT_WAIT" envDefault:"0s" desc:"how long a duplicate of an in-flight event waits for the first to finish"`
	InflightStatus int           `env:"INFLIGHT_STATUS" envDefault:"409" desc:"answer when that wait ends with the first still in flight: 409 or 503"`
	ShadowMode     bool          `env:"SHADOW_MODE" envDefault:"false" desc:"detect, log and count duplicates but forward everything"`

	ReadHeaderTimeout time.Duration `env:"READ_HEADER_TIMEOUT" envDefault:"10s" desc:"limit on reading a request's headers (slow clients)"`
	ReadTimeout       time.Duration `env:"READ_TIMEOUT" envDefault:"30s" desc:"limit on reading a whole request, body included"`
	IdleTimeout       time.Duration `env:"IDLE_TIMEOUT" envDefault:"120s" desc:"how long an idle keep-alive connection stays open"`
	MaxHeaderBytes    int           `env:"MAX_HEADER_BYTES" envDefault:"65536" desc:"largest request header block (431 beyond)"`
	// MaxConnections is validated by completeBuffered.
	MaxConnections int `env:"MAX_CONNECTIONS" envDefault:"0" desc:"most connections the webhook listener keeps open at once, idle keep-alive ones included; more wait in the kernel's queue until one closes; 0: no limit"`

	ShutdownDelay   time.Duration `env:"SHUTDOWN_DELAY" envDefault:"0s" desc:"keep serving this long after SIGTERM (while endpoints are removed)"`
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"25s" desc:"then drain in-flight requests for at most this long"`

	ReadyCheckUpstream bool `env:"READY_CHECK_UPSTREAM" envDefault:"false" desc:"/readyz also answers 503 while the app does not answer HTTP (off: readiness follows the store; the app's own probe covers the app)"`

	AdminToken string `env:"ADMIN_TOKEN" desc:"bearer token for the admin API; empty disables it"`
	LogLevel   string `env:"LOG_LEVEL" envDefault:"info" desc:"debug, info, warn or error"`
	LogFormat  string `env:"LOG_FORMAT" envDefault:"json" desc:"json or console"`

	// Secrets and URLs hold the per-preset variables (<PROVIDER>_WEBHOOK_SECRET,
	// <PROVIDER>_WEBHOOK_URL), read by preset name.
	Secrets map[string][]string `env:"-"`
	URLs    map[string]string   `env:"-"`
	// Upstream is UpstreamURL parsed.
	Upstream *url.URL `env:"-"`
	// RouteSpecs is Routes parsed.
	RouteSpecs []RouteSpec `env:"-"`
	// Store is the store chosen by what is configured (chooseStore).
	Store Store `env:"-"`
}

// RouteSpec is one PATH=SOURCE[;MODE][;OPTION…] entry of ROUTES.
type RouteSpec struct {
	Path   string
	Source string
	// Delivery is the route's mode: the ";sync" or ";async" after its
	// source, or else DELIVERY (filled in by Load; ParseRoutes leaves it
	// SyncDelivery when Override is false).
	Delivery policy.DeliveryMode
	// Override is true when the route names its own mode.
	Override bool
	// Order is the route's order= option, where each request's order key
	// is found. If nil, the route's events are delivered in no particular
	// order.
	Order *providers.Key
	// Rate is the route's rate= option. If zero, its attempts are not
	// spaced.
	Rate Rate
}

// Load reads the configuration from environ (variable name to value) and
// validates it, with rules beside its own checks. The error, an *Error,
// joins every problem found, one line each, each naming its variable.
func Load(environ map[string]string, rules ...Rule) (*Config, error) {
	return load(environ, true, rules)
}

// LoadForStore is Load for the commands that only reach the store (inspect,
// forget): UPSTREAM_URL may be absent.
func LoadForStore(environ map[string]string) (*Config, error) {
	return load(environ, false, nil)
}

// Rule is a check of the configuration that needs what this package does
// not know, such as what the chosen store can do (internal/app/stores). Load
// runs it after its own checks, whatever they found, so that its problems
// are listed with the others rather than after they are fixed. c is the
// configuration as far as it parsed: a field whose variable did not parse
// holds its zero value, and a problem bad is told about such a variable
// is dropped (the variable has its own). Of ROUTES, c.RouteSpecs holds
// the entries that parsed.
type Rule func(c *Config, bad func(variable, format string, args ...any))

func load(environ map[string]string, needUpstream bool, rules []Rule) (*Config, error) {
	var cfg Config
	var errs []error
	unparsed := map[string]bool{}
	if err := env.ParseWithOptions(&cfg, env.Options{Environment: environ}); err != nil {
		for _, e := range namedParseErrors(err) {
			errs = append(errs, &problem{variable: e.variable, err: e.err})
			unparsed[e.variable] = true
		}
	}
	errs = append(errs, cfg.complete(environ, needUpstream, unparsed, rules)...)
	if len(errs) > 0 {
		// A failed start never gets to log the warnings, so the misspelt
		// variables that may be the cause go with the errors.
		return nil, &Error{Err: errors.Join(withHints(errs, UnknownVariables(environ))...)}
	}
	return &cfg, nil
}

// problem is one configuration error: what is wrong with variable, and
// hints, the misspelt variables that may be meant for it.
type problem struct {
	// variable is the environment variable the problem is about; empty
	// for an error that names none.
	variable string
	err      error
	hints    []string
}

func (p *problem) Error() string {
	msg := p.err.Error()
	if p.variable != "" {
		msg = p.variable + ": " + msg
	}
	for _, h := range p.hints {
		msg += "; " + h
	}
	return msg
}

func (p *problem) Unwrap() error { return p.err }

// withHints adds to errs a hint for each unknown variable that resembles a
// known one: on that variable's own problem when it has one ("UPSTREAM_URL:
// required …; UPSTREAM_ULR is set: did you mean UPSTREAM_URL?"), else as a
// problem of its own.
func withHints(errs []error, unknown []Unknown) []error {
	for _, u := range unknown {
		if u.Suggestion == "" {
			continue
		}
		hint := fmt.Sprintf("%s is set: did you mean %s?", u.Name, u.Suggestion)
		found := false
		for _, err := range errs {
			if p, ok := err.(*problem); ok && p.variable == u.Suggestion {
				p.hints = append(p.hints, hint)
				found = true
				break
			}
		}
		if !found {
			errs = append(errs, &problem{variable: u.Name, err: fmt.Errorf("not a variable of webhook-dedup, ignored: did you mean %s?", u.Suggestion)})
		}
	}
	return errs
}

// complete validates the parsed fields, fills in the derived ones, and
// runs rules last. A variable in unparsed already has its error: its zero
// value is not reported again.
func (c *Config) complete(environ map[string]string, needUpstream bool, unparsed map[string]bool, rules []Rule) []error {
	var errs []error
	bad := func(name, format string, args ...any) {
		if !unparsed[name] {
			errs = append(errs, &problem{variable: name, err: fmt.Errorf(format, args...)})
		}
	}

	if c.UpstreamURL == "" && needUpstream {
		bad("UPSTREAM_URL", "required (the app's URL, e.g. http://127.0.0.1:3000)")
	} else if c.UpstreamURL == "" {
		// Not needed by this command.
	} else if u, err := url.Parse(c.UpstreamURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("UPSTREAM_URL", "%q is not an http:// or https:// URL with a host", c.UpstreamURL)
	} else {
		c.Upstream = u
		if needUpstream {
			for _, own := range []struct{ name, addr, why string }{
				{"LISTEN_ADDR", c.ListenAddr, "every webhook would be forwarded back to the proxy, again and again"},
				{"ADMIN_ADDR", c.AdminAddr, "webhooks would be forwarded to its admin port"},
			} {
				if reachesListener(u, own.addr) {
					bad("UPSTREAM_URL", "%s is this proxy's own %s (%s): %s; point UPSTREAM_URL at the app, on a port of its own (e.g. http://127.0.0.1:3000)", u.Redacted(), own.name, own.addr, own.why)
				}
			}
		}
	}
	// What binding would refuse, said with the rest rather than after the
	// store was opened; the commands that only reach the store bind
	// nothing.
	if needUpstream {
		for _, l := range []struct{ name, addr string }{{"LISTEN_ADDR", c.ListenAddr}, {"ADMIN_ADDR", c.AdminAddr}} {
			if err := listenError(l.addr); err != nil {
				bad(l.name, "%v", err)
			}
		}
		if listenersClash(c.ListenAddr, c.AdminAddr) {
			bad("ADMIN_ADDR", "%s takes the port of LISTEN_ADDR (%s): give each its own", c.AdminAddr, c.ListenAddr)
		}
	}
	c.Store = c.chooseStore(bad)
	c.completeStoreTimeout(bad)
	c.completeStores(bad)
	c.completeCache(bad)
	if c.LeaseTTL == 0 {
		c.LeaseTTL = policy.DefaultLease(c.UpstreamTimeout)
	}
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"UPSTREAM_TIMEOUT", c.UpstreamTimeout}, {"LEASE_TTL", c.LeaseTTL},
		{"SIGNATURE_TOLERANCE", c.SignatureTolerance}, {"READ_HEADER_TIMEOUT", c.ReadHeaderTimeout},
		{"READ_TIMEOUT", c.ReadTimeout}, {"IDLE_TIMEOUT", c.IdleTimeout}, {"SHUTDOWN_TIMEOUT", c.ShutdownTimeout},
	}
	for _, p := range positive {
		if p.d <= 0 {
			bad(p.name, "must be a positive duration, got %s", p.d)
		}
	}
	for _, p := range []struct {
		name string
		d    time.Duration
	}{{"DEDUP_TTL", c.DedupTTL}, {"INFLIGHT_WAIT", c.InflightWait}, {"SHUTDOWN_DELAY", c.ShutdownDelay}} {
		if p.d < 0 {
			bad(p.name, "must not be negative, got %s", p.d)
		}
	}
	if c.UpstreamTimeout > 0 && c.LeaseTTL <= c.UpstreamTimeout {
		bad("LEASE_TTL", "%s must be greater than UPSTREAM_TIMEOUT (%s), so a lease only expires if the proxy died", c.LeaseTTL, c.UpstreamTimeout)
	}
	if c.MaxBodyBytes <= 0 {
		bad("MAX_BODY_BYTES", "must be positive, got %d", c.MaxBodyBytes)
	}
	c.completeBuffered(bad)
	if c.ReplayMaxBytes < 0 {
		bad("REPLAY_MAX_BYTES", "must not be negative, got %d", c.ReplayMaxBytes)
	}
	if c.MaxHeaderBytes <= 0 {
		bad("MAX_HEADER_BYTES", "must be positive, got %d", c.MaxHeaderBytes)
	}
	if c.InflightStatus != 409 && c.InflightStatus != 503 {
		bad("INFLIGHT_STATUS", "must be 409 or 503, got %d", c.InflightStatus)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("LOG_LEVEL", "must be debug, info, warn or error, got %q", c.LogLevel)
	}
	if c.LogFormat != "json" && c.LogFormat != "console" {
		bad("LOG_FORMAT", "must be json or console, got %q", c.LogFormat)
	}
	// The entries that parse are kept, and their sources checked below,
	// beside a line for each that does not.
	specs, routeErrs := parseRoutes(c.Routes)
	for _, err := range routeErrs {
		bad("ROUTES", "%v", err)
	}
	for i := range specs {
		if !specs[i].Override {
			specs[i].Delivery = c.Delivery
		}
	}
	for _, err := range optionsNeedAsync(specs) {
		bad("ROUTES", "%v", err)
	}
	c.RouteSpecs = specs
	c.completeDelivery(bad)

	c.Secrets = map[string][]string{}
	c.URLs = map[string]string{}

	for _, p := range providers.Presets() {
		if p.SecretVar != "" {
			if secrets := splitList(environ[p.SecretVar]); len(secrets) > 0 {
				c.Secrets[p.Name] = secrets
				for _, msg := range secretFormat(p.SecretVar, secrets).errors {
					bad(p.SecretVar, "%s", msg)
				}
			}
		}
		if p.URLVar != "" {
			if v := strings.TrimSpace(environ[p.URLVar]); v != "" {
				if u, err := url.Parse(v); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
					bad(p.URLVar, "not an absolute http(s) URL")
				} else {
					c.URLs[p.Name] = v
				}
			}
		}
	}
	// Each source is built once here only to validate it (an unknown
	// preset, a malformed secret, an async route that would queue
	// unverified requests), so that its problems are reported with all
	// the others; serving builds it again.
	c.completeVerified(bad)
	for _, rule := range rules {
		rule(c, bad)
	}
	return errs
}

// ParseRoutes parses ROUTES: comma-separated PATH=SOURCE entries, each
// optionally followed by ";sync" or ";async", then by options (";order=",
// ";rate="), each once. Paths must start with "/",
// are cleaned of a trailing slash, and may not repeat. It returns the
// entries that parse, in order, and an error joining one problem for each
// entry that does not, naming it: a mistake in one entry hides none in
// another.
func ParseRoutes(s string) ([]RouteSpec, error) {
	specs, errs := parseRoutes(s)
	return specs, errors.Join(errs...)
}

// parseRoutes is ParseRoutes with its problems apart, one for each bad
// entry, so that Load reports each on a line of its own.
func parseRoutes(s string) ([]RouteSpec, []error) {
	var specs []RouteSpec
	var errs []error
	seen := map[string]bool{}
	entries := 0
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		entries++
		spec, entryErrs := parseRoute(entry)
		if entryErrs == nil && seen[spec.Path] {
			// The first keeps the path; this one is the mistake.
			entryErrs = []error{fmt.Errorf("%q: path %q appears twice", entry, spec.Path)}
		}
		if entryErrs != nil {
			errs = append(errs, entryErrs...)
			continue
		}
		seen[spec.Path] = true
		specs = append(specs, spec)
	}
	if entries == 0 {
		errs = append(errs, errors.New("no route"))
	}
	return specs, errs
}

// parseRoute parses one entry of ROUTES, PATH=SOURCE[;MODE][;OPTION…].
// Its problems, one for each mistake, quote the entry.
func parseRoute(entry string) (RouteSpec, []error) {
	path, source, ok := strings.Cut(entry, "=")
	path, source = strings.TrimSpace(path), strings.TrimSpace(source)
	if err := separatorError(entry, source); err != nil {
		return RouteSpec{}, []error{err}
	}
	spec := RouteSpec{}
	var errs []error
	if src, rest, found := strings.Cut(source, ";"); found {
		errs = parseModeAndOptions(entry, strings.Split(rest, ";"), &spec)
		source = strings.TrimSpace(src)
	}
	switch {
	case !ok || source == "":
		return RouteSpec{}, append(errs, fmt.Errorf("%q is not PATH=SOURCE", entry))
	case !strings.HasPrefix(path, "/"):
		return RouteSpec{}, append(errs, fmt.Errorf("%q: path %q must start with /", entry, path))
	case strings.ContainsAny(path, "?#% \t"):
		return RouteSpec{}, append(errs, fmt.Errorf("%q: path %q may not contain '?', '#', '%%' or spaces", entry, path))
	case strings.Contains(path, "//"):
		return RouteSpec{}, append(errs, fmt.Errorf("%q: path %q has an empty segment", entry, path))
	}
	if errs != nil {
		return RouteSpec{}, errs
	}
	if len(path) > 1 {
		path = strings.TrimSuffix(path, "/")
	}
	spec.Path, spec.Source = path, source
	return spec, nil
}

// completeDelivery validates the async delivery settings. They are checked
// whether or not a route is async, so a mistake shows before it matters.
func (c *Config) completeDelivery(bad func(name, format string, args ...any)) {
	if c.DeliveryConcurrency <= 0 {
		bad("DELIVERY_CONCURRENCY", "must be positive, got %d", c.DeliveryConcurrency)
	}
	if c.QueueMaxDepth < 0 {
		bad("QUEUE_MAX_DEPTH", "must be 0 (no bound) or positive, got %d", c.QueueMaxDepth)
	}
	if c.AsyncStatus != 202 && c.AsyncStatus != 200 {
		bad("ASYNC_STATUS", "must be 202 or 200, got %d", c.AsyncStatus)
	}
	for _, p := range []struct {
		name string
		d    time.Duration
	}{
		{"RETRY_INITIAL_INTERVAL", c.RetryInitialInterval}, {"RETRY_MAX_INTERVAL", c.RetryMaxInterval},
		{"RETRY_MAX_AGE", c.RetryMaxAge}, {"DEAD_LETTER_TTL", c.DeadLetterTTL},
	} {
		if p.d <= 0 {
			bad(p.name, "must be a positive duration, got %s", p.d)
		}
	}
	if c.RetryInitialInterval > 0 && c.RetryMaxInterval > 0 && c.RetryMaxInterval < c.RetryInitialInterval {
		bad("RETRY_MAX_INTERVAL", "%s is less than RETRY_INITIAL_INTERVAL (%s)", c.RetryMaxInterval, c.RetryInitialInterval)
	}
	if c.RetryMaxAttempts < 0 {
		bad("RETRY_MAX_ATTEMPTS", "must not be negative, got %d", c.RetryMaxAttempts)
	}
}

// AsyncRoutes reports whether any route delivers in the background.
func (c *Config) AsyncRoutes() bool { return len(c.AsyncPaths()) > 0 }

// AsyncPaths lists the paths of the routes that deliver in the
// background, in ROUTES order; nil when there are none.
func (c *Config) AsyncPaths() []string {
	var paths []string
	for _, r := range c.RouteSpecs {
		if r.Delivery == policy.AsyncDelivery {
			paths = append(paths, r.Path)
		}
	}
	return paths
}

// ProviderOptions is what the providers package needs to build sources.
func (c *Config) ProviderOptions() providers.Options {
	return providers.Options{Secrets: c.Secrets, URLs: c.URLs, Tolerance: c.SignatureTolerance, TTL: c.DedupTTL}
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// parseError is a value caarlos0/env could not parse, and its variable
// (empty when caarlos0/env named none).
type parseError struct {
	variable string
	err      error
}

// namedParseErrors rewrites caarlos0/env's errors, which name struct fields,
// so that each names the environment variable instead.
func namedParseErrors(err error) []parseError {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return []parseError{{err: err}}
	}
	var out []parseError
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			if f, ok := variableField(pe); ok {
				out = append(out, parseError{f.Tag.Get("env"), pe.Err})
				continue
			}
		}
		out = append(out, parseError{err: e})
	}
	return out
}

// variableField is the field caarlos0/env could not parse: the one of that
// name and type, in Config or in a store's settings. No two fields that
// can fail to parse share a name and a type (TestParseErrorsNameTheVariable).
func variableField(pe env.ParseError) (reflect.StructField, bool) {
	for _, f := range variableFields(reflect.TypeOf(Config{})) {
		if f.Name == pe.Name && f.Type == pe.Type {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// variableFields are the fields of t that are environment variables, in
// declaration order, those of the stores' settings (a struct field without
// an env tag, which caarlos0/env reads as part of Config) in their place.
func variableFields(t reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	for i := range t.NumField() {
		f := t.Field(i)
		name, tagged := f.Tag.Lookup("env")
		switch {
		case !tagged && f.Type.Kind() == reflect.Struct:
			out = append(out, variableFields(f.Type)...)
		case tagged && name != "-":
			out = append(out, f)
		}
	}
	return out
}

// Variable is one environment variable as -h and docs/configuration.md list it.
type Variable struct {
	Name, Default, Description string
}

// Variables lists every variable the program reads, in declaration order,
// followed by the per-preset secrets and URLs.
func Variables() []Variable {
	var vars []Variable
	for _, f := range variableFields(reflect.TypeOf(Config{})) {
		vars = append(vars, Variable{Name: f.Tag.Get("env"), Default: f.Tag.Get("envDefault"), Description: f.Tag.Get("desc")})
	}
	for _, p := range providers.Presets() {
		if p.SecretVar != "" {
			vars = append(vars, Variable{Name: p.SecretVar, Description: p.Name + " signing secrets, comma-separated; set: verify signatures"})
		}
		if p.URLVar != "" {
			vars = append(vars, Variable{Name: p.URLVar, Description: "the public URL " + p.Name + " signs"})
		}
	}
	return vars
}

// WriteUsage writes the -h text: one variable a line, name first.
func WriteUsage(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "webhook-dedup: forward each webhook event to the app once.")
	fmt.Fprintln(tw, "Usage: webhook-dedup [serve | check | healthcheck | migrate [--print] | inspect NAMESPACE ID | forget NAMESPACE ID | dead-letters | retry NAMESPACE ID | retry --all [--namespace NS] [--failed-before T] [--failed-after T] | version]")
	fmt.Fprintln(tw, "Configured by environment variables:")
	fmt.Fprintln(tw)
	for _, v := range Variables() {
		def := v.Default
		if def == "" {
			def = "(empty)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", v.Name, def, v.Description)
	}
	// Read by the OpenTelemetry SDK, not by Config: named here so that -h
	// still lists everything that configures the process.
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "Tracing, off unless OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_TRACES_EXPORTER is set, is configured by the standard OTEL_* variables, read by the OpenTelemetry SDK (docs/operations.md, Tracing).")
	return tw.Flush()
}

// completeBuffered validates the bounds on what clients may hold:
// MAX_BUFFERED_BYTES (below MAX_BODY_BYTES, a body of the largest size
// allowed could never be read) and MAX_CONNECTIONS.
func (c *Config) completeBuffered(bad func(name, format string, args ...any)) {
	if c.MaxConnections < 0 {
		bad("MAX_CONNECTIONS", "must not be negative, got %d", c.MaxConnections)
	}
	switch {
	case c.MaxBufferedBytes < 0:
		bad("MAX_BUFFERED_BYTES", "must not be negative, got %d", c.MaxBufferedBytes)
	case c.MaxBufferedBytes > 0 && c.MaxBodyBytes > 0 && c.MaxBufferedBytes < c.MaxBodyBytes:
		bad("MAX_BUFFERED_BYTES", "%d is less than MAX_BODY_BYTES (%d): a body of the largest size allowed could never be read", c.MaxBufferedBytes, c.MaxBodyBytes)
	}
}
