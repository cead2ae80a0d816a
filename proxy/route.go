package proxy

import (
	"net/http"
	"path"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/policy"
	"github.com/webhook-dedup/webhook-dedup/providers"
)

// Route sends the webhooks under one path prefix to a source of event IDs.
type Route struct {
	// Path is a prefix matched on whole segments: "/hooks" matches "/hooks"
	// and "/hooks/x", not "/hooksx". "/" matches every path. It is matched
	// against the request's path as an app framework would route it (see
	// routePath), without regard to ASCII case.
	Path   string
	Source *providers.Source
	// Delivery is how the route's first-seen webhooks reach the app. If
	// zero, SyncDelivery.
	Delivery policy.DeliveryMode
	// Order, on an async route, is where each request's order key is
	// found (order=): the events that share one are delivered one at a
	// time, in the order they were accepted. If nil, in no particular
	// order.
	Order *providers.Key
	// OrderBlock is ORDER_ON_FAILURE=block on an ordered route: a dead
	// letter at the head of its key keeps the key waiting until it is
	// retried and completes, or is forgotten. If false (skip), the key
	// goes on with its next event.
	OrderBlock bool
}

// routeTable finds the longest matching prefix. Routes are few, so a sorted
// slice scanned from the longest path is both simple and fast.
type routeTable []Route

func newRouteTable(routes []Route) routeTable {
	t := append(routeTable(nil), routes...)
	sort.SliceStable(t, func(i, j int) bool { return len(t[i].Path) > len(t[j].Path) })
	return t
}

// match returns the route for a request's path (r.URL.Path, already
// percent-decoded by net/http), or nil. The path is first brought to the
// form under which frameworks route it (routePath); a path whose last
// segment carries a format suffix (/webhooks/github.json) also matches the
// route without it, as Rails routes it to the same action. The longest
// route that either form matches wins.
func (t routeTable) match(p string) *Route {
	p = routePath(p)
	bare := withoutFormat(p)
	for i := range t {
		if segmentPrefix(p, t[i].Path) || (bare != p && segmentPrefix(bare, t[i].Path)) {
			return &t[i]
		}
	}
	return nil
}

// segmentPrefix reports whether prefix is path or a parent of it, on whole
// segments and without regard to case: Express, ASP.NET and IIS route
// /Webhooks/GitHub to the handler of /webhooks/github.
func segmentPrefix(path, prefix string) bool {
	if prefix == "/" {
		return true
	}
	if len(path) < len(prefix) || !strings.EqualFold(path[:len(prefix)], prefix) {
		return false
	}
	return len(path) == len(prefix) || path[len(prefix)] == '/'
}

// routePath is p as app frameworks and the servers in front of them route
// it: ';' parameters dropped from every segment (servlet containers do, so
// /webhooks/github;jsessionid=1 reaches /webhooks/github), then dot
// segments and repeated slashes resolved (//webhooks/./x/../github is
// /webhooks/github). A path that needs none of it, the common case, is
// returned as it is, without allocating.
func routePath(p string) string {
	if !needsCleaning(p) {
		return p
	}
	if strings.IndexByte(p, ';') >= 0 {
		var b strings.Builder
		b.Grow(len(p))
		for i, seg := range strings.Split(p, "/") {
			if i > 0 {
				b.WriteByte('/')
			}
			seg, _, _ = strings.Cut(seg, ";")
			b.WriteString(seg)
		}
		p = b.String()
	}
	return path.Clean("/" + p)
}

// needsCleaning reports whether routePath would change p: it holds a ';',
// an empty segment, a "." or ".." segment, or does not start with '/'.
func needsCleaning(p string) bool {
	if p == "" || p[0] != '/' || strings.IndexByte(p, ';') >= 0 || strings.Contains(p, "//") {
		return true
	}
	for i := 1; i < len(p); i++ {
		if p[i] != '.' || p[i-1] != '/' {
			continue // a dot segment starts right after a slash
		}
		rest := p[i+1:]
		if rest == "" || rest[0] == '/' || rest == "." || strings.HasPrefix(rest, "./") {
			return true
		}
	}
	return false
}

// withoutFormat is p without a format suffix on its last segment
// ("/webhooks/github.json" is "/webhooks/github"), or p when its last
// segment has none. Everything from the segment's first dot goes, so
// "github.json.gz" is "github" too: a wider match only means more
// requests are verified.
func withoutFormat(p string) string {
	last := strings.LastIndexByte(p, '/') + 1
	dot := strings.IndexByte(p[last:], '.')
	if dot <= 0 {
		return p // no dot, or a segment that starts with one (".well-known")
	}
	return p[:last+dot]
}

// isPost reports whether method is POST in any case: net/http passes the
// method as sent, and frameworks that fold it (Express, Rails) would route
// "post" to the webhook's handler.
func isPost(method string) bool {
	return method == http.MethodPost || strings.EqualFold(method, http.MethodPost)
}

// Reasons a request passes through untouched, the reason label of
// webhook_dedup_passthrough_total.
const (
	passNoRoute       = "no-route"       // on no dedup route
	passNotPost       = "not-post"       // on a route, but not a POST
	passNotRecognised = "not-recognised" // a POST that auto recognised as no preset
)

// passthroughMetric counts the requests that pass through untouched, by
// reason: a route that is misconfigured (a typo in its path, a sender auto
// does not know) shows up as a rising count.
func passthroughMetric(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "webhook_dedup_passthrough_total",
		Help: "Requests proxied untouched, without verification or deduplication, by reason: no-route (on no dedup route), not-post (a method other than POST), not-recognised (auto recognised no preset).",
	}, []string{"reason"})
	for _, reason := range []string{passNoRoute, passNotPost, passNotRecognised} {
		c.WithLabelValues(reason) // export zeros, so that a rate() starts at once
	}
	reg.MustRegister(c)
	return c
}

// passThrough proxies a request untouched and counts it.
func (h *Handler) passThrough(w http.ResponseWriter, r *http.Request, reason string) {
	h.m.passthrough.WithLabelValues(reason).Inc()
	h.reverse.ServeHTTP(w, r)
}
