package proxy

import (
	"net/http"
	"strings"
	"testing"
)

func TestRoutePath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/webhooks/github", "/webhooks/github"},
		{"/", "/"},
		{"//webhooks/github", "/webhooks/github"},
		{"/webhooks//github", "/webhooks/github"},
		{"/webhooks/./github", "/webhooks/github"},
		{"/webhooks/x/../github", "/webhooks/github"},
		{"/webhooks/github/.", "/webhooks/github"},
		{"/webhooks/github/x/..", "/webhooks/github"},
		{"/../../webhooks/github", "/webhooks/github"},
		{"/webhooks/github;jsessionid=1", "/webhooks/github"},
		{"/webhooks;v=1/github;a;b=2", "/webhooks/github"},
		{"/webhooks/;x/github", "/webhooks/github"},
		{"webhooks/github", "/webhooks/github"},
		{"", "/"},
		// Not dot segments: kept as they are.
		{"/webhooks/.github", "/webhooks/.github"},
		{"/webhooks/github..", "/webhooks/github.."},
		{"/webhooks/...", "/webhooks/..."},
	} {
		if got := routePath(tc.in); got != tc.want {
			t.Errorf("routePath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRoutePathDoesNotAllocateWhenClean(t *testing.T) {
	for _, p := range []string{"/webhooks/github", "/", "/a/b.c/d", "/.well-known/x"} {
		if n := testing.AllocsPerRun(100, func() { _ = routePath(p) }); n != 0 {
			t.Errorf("routePath(%q) allocates %v times", p, n)
		}
	}
}

func TestWithoutFormat(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/webhooks/github.json", "/webhooks/github"},
		{"/webhooks/github.json.gz", "/webhooks/github"},
		{"/webhooks/github.", "/webhooks/github"},
		{"/webhooks/github", "/webhooks/github"},
		{"/webhooks.json", "/webhooks"},
		{"/webhooks/.hidden", "/webhooks/.hidden"},
		{"/v1.0/hooks", "/v1.0/hooks"}, // only the last segment
		{"/", "/"},
	} {
		if got := withoutFormat(tc.in); got != tc.want {
			t.Errorf("withoutFormat(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRouteTableMatch(t *testing.T) {
	table := newRouteTable([]Route{
		{Path: "/"}, {Path: "/webhooks/github"}, {Path: "/webhooks/stripe"}, {Path: "/hooks/acme.com"}, {Path: "/Hooks/Mixed"},
	})
	for _, tc := range []struct{ path, want string }{
		{"/webhooks/github", "/webhooks/github"},
		{"/webhooks/github/", "/webhooks/github"},
		{"/webhooks/github/sub", "/webhooks/github"},
		{"/Webhooks/github", "/webhooks/github"},
		{"/webhooks/GitHub", "/webhooks/github"},
		{"/WEBHOOKS/GITHUB", "/webhooks/github"},
		{"/webhooks/github;jsessionid=1", "/webhooks/github"},
		{"/webhooks/github.json", "/webhooks/github"},
		{"/webhooks/GitHub.JSON", "/webhooks/github"},
		{"//webhooks/github", "/webhooks/github"},
		{"/webhooks/./github", "/webhooks/github"},
		{"/webhooks/x/../github", "/webhooks/github"},
		{"/webhooks/stripe", "/webhooks/stripe"},
		{"/hooks/acme.com", "/hooks/acme.com"}, // a dot in the route's own path
		{"/hooks/acme.com.json", "/"},          // its format suffix would be ".com.json"
		{"/hooks/mixed", "/Hooks/Mixed"},
		{"/webhooks/githubx", "/"},
		{"/webhooks/github-app", "/"},
		{"/webhooks/gith", "/"},
		{"/webhooks", "/"},
		{"/other", "/"},
	} {
		got := table.match(tc.path)
		if got == nil || got.Path != tc.want {
			t.Errorf("match(%q) = %v, want route %q", tc.path, got, tc.want)
		}
	}
	noRoot := newRouteTable([]Route{{Path: "/webhooks/github"}})
	for _, p := range []string{"/webhooks", "/webhooks/githubx", "/webhooks/github-x.json", "/x/webhooks/github"} {
		if got := noRoot.match(p); got != nil {
			t.Errorf("match(%q) = %q, want none", p, got.Path)
		}
	}
}

func TestIsPost(t *testing.T) {
	for m, want := range map[string]bool{"POST": true, "post": true, "Post": true, "pOsT": true, "GET": false, "PUT": false, "POSTS": false, "": false} {
		if got := isPost(m); got != want {
			t.Errorf("isPost(%q) = %v, want %v", m, got, want)
		}
	}
}

func TestConnectionNames(t *testing.T) {
	checked := []string{"X-Github-Delivery", "X-Hub-Signature-256"}
	for _, tc := range []struct {
		connection []string
		want       string
	}{
		{nil, ""},
		{[]string{"keep-alive"}, ""},
		{[]string{"close"}, ""},
		{[]string{"Keep-Alive, Upgrade"}, ""},
		{[]string{"X-GitHub-Delivery"}, "X-Github-Delivery"},
		{[]string{"x-github-delivery"}, "X-Github-Delivery"},
		{[]string{"keep-alive,  x-hub-signature-256 "}, "X-Hub-Signature-256"},
		{[]string{"keep-alive", "X-GitHub-Delivery"}, "X-Github-Delivery"},
		{[]string{"X-GitHub-Event"}, ""},
	} {
		h := http.Header{}
		for _, v := range tc.connection {
			h.Add("Connection", v)
		}
		if got := connectionNames(h, checked); got != tc.want {
			t.Errorf("Connection %q: connectionNames = %q, want %q", tc.connection, got, tc.want)
		}
	}
}

func BenchmarkRouteMatch(b *testing.B) {
	table := newRouteTable([]Route{{Path: "/"}, {Path: "/webhooks/github"}, {Path: "/webhooks/stripe"}, {Path: "/hooks/acme"}})
	for _, p := range []string{"/webhooks/stripe", "/webhooks/./GitHub;x=1"} {
		b.Run(strings.Trim(p, "/"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if table.match(p) == nil {
					b.Fatal("no route")
				}
			}
		})
	}
}

func FuzzRoutePath(f *testing.F) {
	for _, seed := range []string{"/webhooks/github", "//a/./b/../c;x=1", "", "a", "/..", "/.;", "/a/.../b", "/%2e%2e/x", "/a.json", "/.well-known"} {
		f.Add(seed)
	}
	table := newRouteTable([]Route{{Path: "/"}, {Path: "/webhooks/github"}, {Path: "/a"}})
	f.Fuzz(func(t *testing.T, p string) {
		got := routePath(p)
		if !strings.HasPrefix(got, "/") || strings.Contains(got, "//") || strings.ContainsRune(got, ';') {
			t.Fatalf("routePath(%q) = %q: not a clean absolute path", p, got)
		}
		for _, seg := range strings.Split(got, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("routePath(%q) = %q keeps a dot segment", p, got)
			}
		}
		if again := routePath(got); again != got {
			t.Fatalf("routePath(%q) = %q, but routePath of that is %q", p, got, again)
		}
		if bare := withoutFormat(got); !strings.HasPrefix(got, bare) {
			t.Fatalf("withoutFormat(%q) = %q, not a prefix", got, bare)
		}
		if table.match(p) == nil {
			t.Fatalf("match(%q) = nil with a route on /", p)
		}
	})
}
