// Package console serves the operator's web console on the admin port
// (/ui/): an overview of the routes and the queue, the dead letters with
// filters and retries, and one event's page, as server-rendered HTML
// whose every asset is embedded in the binary.
package console

import (
	"context"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// Records is what the console reads and forgets of the store's records
// (dedup.Store has both).
type Records interface {
	Lookup(ctx context.Context, key string) (dedup.Record, error)
	Forget(ctx context.Context, key string) (bool, error)
}

// Queue is what the console needs of the async queue (dedup.Operator):
// the dead letters listed (Events), retried in bulk (DeadLetters and
// Requeue, the bulk retry's code), and an event's request (Request).
type Queue interface {
	Events(ctx context.Context, q dedup.EventQuery) (dedup.EventPage, error)
	DeadLetters(ctx context.Context, cursor string, limit int) ([]dedup.DeadLetter, string, error)
	Requeue(ctx context.Context, key string) error
	Request(ctx context.Context, key string) (dedup.Request, error)
}

// Stats is where the overview reads the queue's depth, oldest age and
// dead letters (delivery.Backlog keeps them as last read, cheaply).
type Stats interface {
	Stats(ctx context.Context) (dedup.QueueStats, error)
}

// Route is a route as the overview shows it.
type Route struct {
	// Path is the route's path prefix: the route label of the metrics.
	Path string
	// Async is whether its webhooks are delivered in the background.
	Async bool
	// Namespaces are the namespaces its event IDs are kept under: its
	// presets' names, or its path for a generic source.
	Namespaces []string
}

// Config configures the console.
type Config struct {
	// Token is ADMIN_TOKEN: what signs in, and what the session cookie's
	// key is derived from. If empty, every path answers 404.
	Token string
	// Records is the store's records. Required.
	Records Records
	// Queue is the async queue. If nil (no async route), the dead-letter
	// pages say that nothing is ever dead-lettered.
	Queue Queue
	// Stats is the queue's stats for the overview. If nil, not shown.
	Stats Stats
	// Gatherer is read for the requests and deliveries per route (kept
	// over the last minutes, see Run), and whether each is paused. If
	// nil, not shown.
	Gatherer prometheus.Gatherer
	// Routes are the configured routes, in their order.
	Routes []Route
	// KeyPrefix is the store key prefix, as the proxy uses it.
	KeyPrefix string
	// Logger logs the operator's actions. If nil, nothing is logged.
	Logger *zap.Logger
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
}

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// csp allows the page its own origin only: no inline script or style, no
// frame around it, forms posting nowhere else.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

// Console is the console's handler, to be mounted at /ui/.
type Console struct {
	cfg      Config
	sessions sessions
	pages    map[string]*template.Template
	mux      *http.ServeMux
	// window keeps the counters of the last minutes (overview.go).
	window window
	// guard refuses the cross-site writes (Sec-Fetch-Site, else Origin
	// against Host): with the SameSite=Strict cookie, what keeps another
	// site from posting the operator's forms.
	guard *http.CrossOriginProtection
}

// New returns the console.
func New(cfg Config) *Console {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Console{cfg: cfg, sessions: newSessions(cfg.Token, cfg.Now), pages: parsePages(), mux: http.NewServeMux(), guard: http.NewCrossOriginProtection()}
	if s, _, err := c.read(); err == nil {
		c.window.add(s) // the window's first base: the counters at start
	}
	c.guard.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusForbidden, "Refused: a write from another site (or an unknown origin). Use the console's own pages.")
	}))
	static, _ := fs.Sub(staticFiles, "static")
	assets := http.StripPrefix("/ui/static/", http.FileServerFS(static))
	c.mux.Handle("GET /ui/static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Embedded, so they change only with the binary: an hour is safe.
		w.Header().Set("Cache-Control", "public, max-age=3600")
		assets.ServeHTTP(w, r)
	}))
	c.mux.HandleFunc("GET /ui/login", c.loginForm)
	c.mux.HandleFunc("POST /ui/login", c.login)
	c.mux.HandleFunc("POST /ui/logout", c.logout)
	c.mux.HandleFunc("GET /ui/{$}", c.signedIn(c.overview))
	c.mux.HandleFunc("GET /ui/dead-letters", c.signedIn(c.deadLetters))
	c.mux.HandleFunc("POST /ui/dead-letters/retry", c.signedIn(c.retrySelected))
	c.mux.HandleFunc("POST /ui/dead-letters/retry-all", c.signedIn(c.retryAll))
	c.mux.HandleFunc("GET /ui/event", c.signedIn(c.event))
	c.mux.HandleFunc("POST /ui/events/{namespace}/{id}/retry", c.signedIn(c.retryOne))
	c.mux.HandleFunc("POST /ui/events/{namespace}/{id}/forget", c.signedIn(c.forgetOne))
	c.mux.HandleFunc("/ui/", c.signedIn(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "No such page.")
	}))
	return c
}

func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Token == "" {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	c.guard.Handler(c.mux).ServeHTTP(w, r)
}

// page is what every page's layout reads.
type page struct {
	Title string
	// Nav names the current section, for aria-current.
	Nav string
	// SignedIn shows the sign-out button (not for a bearer token).
	SignedIn bool
	Notice   string
	Error    string
	Data     any
}

func parsePages() map[string]*template.Template {
	funcs := template.FuncMap{
		"pathEscape": pathEscape,
		"ref":        ref,
		"ago":        ago,
		"formTime":   formTime,
		"took":       took,
	}
	base := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html"))
	pages := map[string]*template.Template{}
	for _, name := range []string{"login", "overview", "deadletters", "event", "error"} {
		pages[name] = template.Must(template.Must(base.Clone()).ParseFS(templateFiles, "templates/"+name+".html"))
	}
	return pages
}

// render writes a page; an error rendering it is logged (the status line
// is gone by then).
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.SignedIn = c.cookieSession(r)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := c.pages[name].ExecuteTemplate(w, "layout.html", p); err != nil {
		c.cfg.Logger.Warn("rendering a console page failed", zap.String("page", name), zap.Error(err))
	}
}

func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	c.render(w, r, status, "error", page{Title: http.StatusText(status), Error: msg})
}
