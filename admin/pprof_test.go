package admin_test

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// pprofPaths are the profiles' paths, each kind once.
var pprofPaths = []string{
	"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1", "/debug/pprof/allocs",
	"/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1", "/debug/pprof/cmdline",
}

// TestProfilesOnlyWithToken: Go's profiles are the admin API's: absent
// (404) without ADMIN_TOKEN, 401 without the token or with a wrong one.
func TestProfilesOnlyWithToken(t *testing.T) {
	off := newFixture(t, "")
	on := newFixture(t, token)
	for _, path := range pprofPaths {
		for _, auth := range []string{"", "Bearer " + token} {
			if r := off.do(t, http.MethodGet, path, auth); r.status != http.StatusNotFound || r.header.Get("WWW-Authenticate") != "" {
				t.Errorf("no ADMIN_TOKEN: GET %s (Authorization %q): %d, want a plain 404", path, auth, r.status)
			}
		}
		for _, auth := range []string{"", "Bearer wrong", "Basic " + token} {
			if r := on.do(t, http.MethodGet, path, auth); r.status != http.StatusUnauthorized {
				t.Errorf("GET %s with Authorization %q: %d, want 401", path, auth, r.status)
			}
		}
	}
	if r := on.do(t, http.MethodPost, "/debug/pprof/heap", ""); r.status != http.StatusUnauthorized {
		t.Errorf("POST /debug/pprof/heap without a token: %d, want 401", r.status)
	}
	if _, pattern := http.DefaultServeMux.Handler(&http.Request{Method: http.MethodGet, URL: mustURL(t, "/debug/pprof/")}); pattern != "" {
		t.Errorf("the profiles are registered on http.DefaultServeMux (%q), where nothing guards them", pattern)
	}
}

// TestProfiles: with the token, each profile answers in the form go tool
// pprof and go tool trace read.
func TestProfiles(t *testing.T) {
	f := newFixture(t, token)
	auth := "Bearer " + token
	gzipped := func(b []byte) bool { return bytes.HasPrefix(b, []byte{0x1f, 0x8b}) } // a pprof protobuf is gzipped
	for _, tc := range []struct {
		path   string
		status int
		ok     func(b []byte) bool
		want   string
	}{
		{"/debug/pprof/", 200, func(b []byte) bool {
			return bytes.Contains(b, []byte(`href="heap?debug=1"`)) && bytes.Contains(b, []byte(`href="profile"`))
		}, "the index, linking heap and profile"},
		{"/debug/pprof/heap", 200, gzipped, "a gzipped profile"},
		{"/debug/pprof/heap?gc=1", 200, gzipped, "a gzipped profile"},
		{"/debug/pprof/goroutine?debug=1", 200, func(b []byte) bool { return bytes.Contains(b, []byte("goroutine profile:")) }, "the goroutines as text"},
		{"/debug/pprof/profile?seconds=1", 200, gzipped, "a gzipped CPU profile"},
		{"/debug/pprof/trace?seconds=1", 200, func(b []byte) bool { return bytes.HasPrefix(b, []byte("go 1.")) }, "an execution trace"},
		{"/debug/pprof/cmdline", 200, func(b []byte) bool { return len(b) > 0 }, "the command line"},
		{"/debug/pprof/nosuch", 404, func(b []byte) bool { return bytes.Contains(b, []byte("unknown profile")) }, "an unknown profile"},
		{"/debug/pprof/profile?seconds=0", 400, func(b []byte) bool { return bytes.Contains(b, []byte("seconds")) }, "a bad duration"},
		{"/debug/pprof/profile?seconds=301", 400, func(b []byte) bool { return bytes.Contains(b, []byte("seconds")) }, "a bad duration"},
	} {
		r := f.do(t, http.MethodGet, tc.path, auth)
		if r.status != tc.status || !tc.ok(r.body) {
			t.Errorf("GET %s: %d %.60q; want %d, %s", tc.path, r.status, r.body, tc.status, tc.want)
		}
		if got := r.header.Get("Cache-Control"); r.status == 200 && !strings.Contains(got, "no-store") {
			t.Errorf("GET %s: Cache-Control %q, want no-store", tc.path, got)
		}
	}
}

func mustURL(t *testing.T, path string) *url.URL {
	t.Helper()
	u, err := url.Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
