package config

import (
	"net/url"
	"strings"
	"testing"
)

// TestRoutesSeparators: several routes in one ROUTES written with spaces,
// newlines or ';' between them are named as such, not reported as an
// unknown source "stripe /b=github"; a ';' before a delivery mode stays
// what it is.
func TestRoutesSeparators(t *testing.T) {
	for _, tc := range []struct {
		routes, want string
	}{
		{"/a=stripe /b=github", `routes are separated by commas, not spaces: "/a=stripe /b=github" (write /a=stripe,/b=github)`},
		{"/a = stripe  /b = github", "routes are separated by commas, not spaces"},
		{"/a=stripe\n/b=github", "routes are separated by commas, not newlines"},
		{"/a=stripe\t/b=github", "routes are separated by commas, not tabs"},
		{"/a=stripe;/b=github", `routes are separated by commas, not ';' (after a source, ';' names its delivery, ;sync or ;async, or an option, ;rate=…): "/a=stripe;/b=github" (write /a=stripe,/b=github)`},
		{"/a=stripe;async;/b=github", "(write /a=stripe;async,/b=github)"},
		{"/a=stripe ; /b=github", "not ';'"},
	} {
		_, err := ParseRoutes(tc.routes)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRoutes(%q) = %v, want an error saying %q", tc.routes, err, tc.want)
		}
	}
	for _, ok := range []string{
		"/a=stripe;async,/b=github;sync",
		"/a = stripe , /b = github ; async",
		"/a=stripe,\n  /b=github",
		"/a=json:data.id+header:X-Topic",
	} {
		if _, err := ParseRoutes(ok); err != nil {
			t.Errorf("ParseRoutes(%q): %v", ok, err)
		}
	}
	env := base()
	env["ROUTES"] = "/a=stripe /b=github"
	if _, err := Load(env); err == nil || !strings.Contains(err.Error(), "ROUTES: routes are separated by commas, not spaces") {
		t.Errorf("Load: %v, want ROUTES: routes are separated by commas, not spaces", err)
	}
}

// TestUpstreamIsNotTheProxy: UPSTREAM_URL on the proxy's own port would
// send every webhook round in a loop; it is refused naming both
// variables.
func TestUpstreamIsNotTheProxy(t *testing.T) {
	for _, tc := range []struct {
		upstream, listen, admin string
		want                    string // the other variable named; "" if accepted
	}{
		{upstream: "http://127.0.0.1:8080", want: "LISTEN_ADDR"},
		{upstream: "http://localhost:8080/app", want: "LISTEN_ADDR"},
		{upstream: "http://[::1]:8080", want: "LISTEN_ADDR"},
		{upstream: "http://0.0.0.0:8080", want: "LISTEN_ADDR"},
		{upstream: "http://127.0.0.1:9090", want: "ADMIN_ADDR"},
		{upstream: "http://127.0.0.1", listen: ":80", want: "LISTEN_ADDR"},
		{upstream: "https://localhost", listen: "0.0.0.0:443", want: "LISTEN_ADDR"},
		{upstream: "http://127.0.0.1:8080", listen: "127.0.0.1:8080", want: "LISTEN_ADDR"},
		{upstream: "http://localhost:8080", listen: "127.0.0.1:8080", want: "LISTEN_ADDR"},
		{upstream: "http://10.0.0.5:8080", listen: "10.0.0.5:8080", want: "LISTEN_ADDR"},
		// Another port, or another address than the one listened on.
		{upstream: "http://127.0.0.1:3000"},
		{upstream: "http://127.0.0.1:8080", listen: "10.0.0.5:8080"},
		{upstream: "http://127.0.0.2:8080", listen: "127.0.0.1:8080"},
		{upstream: "http://app:8080"},
		{upstream: "http://127.0.0.1:8080", listen: ":0"},
		{upstream: "https://127.0.0.1", listen: ":80"},
	} {
		env := base()
		env["UPSTREAM_URL"] = tc.upstream
		if tc.listen != "" {
			env["LISTEN_ADDR"] = tc.listen
		}
		if tc.admin != "" {
			env["ADMIN_ADDR"] = tc.admin
		}
		_, err := Load(env)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("UPSTREAM_URL=%s LISTEN_ADDR=%s: %v", tc.upstream, tc.listen, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), "UPSTREAM_URL: ") || !strings.Contains(err.Error(), "this proxy's own "+tc.want)):
			t.Errorf("UPSTREAM_URL=%s LISTEN_ADDR=%s: %v, want UPSTREAM_URL refused as the proxy's own %s", tc.upstream, tc.listen, err, tc.want)
		}
	}
	// Commands that only reach the store do not forward anything.
	if _, err := LoadForStore(map[string]string{"UPSTREAM_URL": "http://127.0.0.1:8080"}); err != nil {
		t.Errorf("LoadForStore: %v", err)
	}
	// The credentials of a URL never reach the message.
	env := base()
	env["UPSTREAM_URL"] = "http://user:hunter2@127.0.0.1:8080"
	if _, err := Load(env); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Load: %v, want a refusal without the password", err)
	}
}

func TestReachesListenerBadAddr(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:8080")
	for _, addr := range []string{"", "8080", ":http", "[::1"} {
		if reachesListener(u, addr) {
			t.Errorf("reachesListener(%s, %q) = true", u, addr)
		}
	}
}
