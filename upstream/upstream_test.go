package upstream

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
)

// TestCompletes: a 2xx completes an event and nothing else does; the
// edges of the range are where a rule written twice drifts.
func TestCompletes(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   bool
	}{
		{0, false}, {100, false}, {101, false}, {103, false}, {199, false},
		{200, true}, {201, true}, {202, true}, {204, true}, {226, true}, {299, true},
		{300, false}, {302, false}, {304, false},
		{400, false}, {404, false}, {409, false}, {429, false},
		{500, false}, {502, false}, {503, false}, {504, false}, {599, false},
	} {
		if got := Completes(tc.status); got != tc.want {
			t.Errorf("Completes(%d) = %v, want %v", tc.status, got, tc.want)
		}
	}
}

// TestRewrite: the upstream's request keeps the sender's Host and extends
// an ingress's X-Forwarded-For chain; the rest of X-Forwarded-* is as
// received.
func TestRewrite(t *testing.T) {
	app, _ := url.Parse("http://127.0.0.1:3000/base")
	in := httptest.NewRequest(http.MethodPost, "https://hooks.example.com/gh?x=1", nil)
	in.RemoteAddr = "10.0.0.9:51234"
	in.TLS = &tls.ConnectionState{}
	in.Header.Set("X-Forwarded-For", "203.0.113.7")
	pr := &httputil.ProxyRequest{In: in, Out: in.Clone(in.Context())}
	pr.Out.Header.Del("X-Forwarded-For") // as ReverseProxy hands it over
	Rewrite(app)(pr)
	if got := pr.Out.URL.String(); got != "http://127.0.0.1:3000/base/gh?x=1" {
		t.Errorf("URL %s", got)
	}
	if pr.Out.Host != "hooks.example.com" {
		t.Errorf("Host %q, want the sender's", pr.Out.Host)
	}
	for name, want := range map[string]string{
		"X-Forwarded-For":   "203.0.113.7, 10.0.0.9",
		"X-Forwarded-Host":  "hooks.example.com",
		"X-Forwarded-Proto": "https",
	} {
		if got := pr.Out.Header.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}

// TestNewTransport: the sender's headers reach the app unchanged (no
// Accept-Encoding added), over HTTP/1.1, and each call has its own pool.
func TestNewTransport(t *testing.T) {
	tr := NewTransport()
	if !tr.DisableCompression || tr.ForceAttemptHTTP2 || tr.MaxIdleConnsPerHost < 1024 {
		t.Errorf("transport %+v: want compression off, no forced HTTP/2, a large idle pool", tr)
	}
	if tr == http.DefaultTransport || tr == NewTransport() {
		t.Error("NewTransport returned a shared transport")
	}
}
