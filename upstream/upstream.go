// Package upstream is the one way webhook-dedup reaches the app, shared by
// sync routes and async delivery: the request forwarded, the transport,
// which answers complete an event, and the record a completion leaves.
package upstream

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// Rewrite is the httputil.ReverseProxy Rewrite hook that turns a received
// webhook into the upstream's request: the same method, path, query,
// headers and body, the Host the sender used (apps that verify signed URLs
// depend on it), an ingress's X-Forwarded-For chain kept and extended, and
// X-Forwarded-Host and -Proto as received. Sync routes and the background
// delivery of async routes both forward through it, so the app cannot tell
// them apart.
func Rewrite(upstream *url.URL) func(*httputil.ProxyRequest) {
	return func(pr *httputil.ProxyRequest) {
		pr.SetURL(upstream)
		pr.Out.Host = pr.In.Host
		if xff, ok := pr.In.Header["X-Forwarded-For"]; ok {
			pr.Out.Header["X-Forwarded-For"] = xff
		}
		pr.SetXForwarded()
	}
}

// NewTransport returns the upstream transport: a clone of
// http.DefaultTransport whose keep-alive pool is large enough that
// connection setup never limits throughput, and that never adds
// Accept-Encoding (the upstream must see the sender's headers unchanged).
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	t.IdleConnTimeout = 90 * time.Second
	t.DisableCompression = true
	t.ForceAttemptHTTP2 = false
	return t
}

// Completes reports whether the app's answer status completes the event:
// a 2xx does; anything else (1xx excluded: interim answers come before
// the final one) leaves the event to be forwarded, or delivered, again.
func Completes(status int) bool {
	return status >= 200 && status <= 299
}

// DefaultTimeout is how long one request to the app may take when nothing
// says otherwise (UPSTREAM_TIMEOUT's default), on sync routes and for
// each async attempt alike.
const DefaultTimeout = 30 * time.Second
