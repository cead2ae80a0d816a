package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/admin/console"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/diskstore"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

const (
	token  = "console-test-token"
	prefix = "wd:"
)

// fixture is the admin port with the console mounted, over a real
// on-disk store and its queue.
type fixture struct {
	srv *httptest.Server
	st  *diskstore.Store
	now time.Time
}

// option changes the console's configuration before it is built.
type option func(*console.Config)

func newFixture(t *testing.T, tok string, opts ...option) *fixture {
	t.Helper()
	st, err := diskstore.Open(diskstore.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f := &fixture{st: st, now: time.Now()}
	cfg := console.Config{
		Token: tok, Records: st, Queue: st, Stats: st, Gatherer: prometheus.NewRegistry(), KeyPrefix: prefix,
		Routes: []console.Route{{Path: "/hooks/github", Async: true, Namespaces: []string{"github"}}, {Path: "/hooks/acme", Async: true, Namespaces: []string{"/hooks/acme"}}},
		Now:    func() time.Time { return f.now },
	}
	for _, o := range opts {
		o(&cfg)
	}
	adm := admin.New(admin.Config{Store: st, DeadLetters: st, Gatherer: prometheus.NewRegistry(), Token: tok, KeyPrefix: prefix})
	adm.MountConsole(console.New(cfg))
	f.srv = httptest.NewServer(adm)
	t.Cleanup(f.srv.Close)
	return f
}

// reply is an answer, its body read.
type reply struct {
	status int
	header http.Header
	body   string
}

// do sends a request as a browser of the console's own origin would
// unless header says otherwise; redirects are not followed.
func (f *fixture) do(t *testing.T, method, path string, form url.Values, header map[string]string) reply {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, f.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// signIn posts the token to the sign-in form and returns the session
// cookie it set.
func (f *fixture) signIn(t *testing.T) *http.Cookie {
	t.Helper()
	r := f.do(t, http.MethodPost, "/ui/login", url.Values{"token": {token}, "next": {"/ui/dead-letters"}}, map[string]string{"Sec-Fetch-Site": "same-origin"})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/dead-letters" {
		t.Fatalf("sign-in with the token: %d, Location %q, want 303 to /ui/dead-letters", r.status, r.header.Get("Location"))
	}
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Value != "" {
			return c
		}
	}
	t.Fatal("sign-in set no session cookie")
	return nil
}

// TestConsoleNotFoundWithoutToken: without ADMIN_TOKEN the console does
// not exist, like the admin API: every path and method answers 404, the
// assets and the sign-in form too.
func TestConsoleNotFoundWithoutToken(t *testing.T) {
	f := newFixture(t, "")
	for _, tc := range []struct{ method, path string }{
		{"GET", "/ui/"}, {"GET", "/ui/login"}, {"POST", "/ui/login"}, {"GET", "/ui/dead-letters"},
		{"GET", "/ui/static/console.css"}, {"GET", "/ui/static/console.js"}, {"POST", "/ui/events/github/e1/retry"}, {"GET", "/ui/event?namespace=github&id=e1"},
	} {
		if r := f.do(t, tc.method, tc.path, url.Values{"token": {""}}, map[string]string{"Authorization": "Bearer "}); r.status != http.StatusNotFound {
			t.Errorf("%s %s without ADMIN_TOKEN: %d, want 404", tc.method, tc.path, r.status)
		}
	}
}

// TestConsoleSignIn: the pages need a session from the sign-in form or
// the bearer token; every other credential is sent to sign in, and the
// cookie is HttpOnly, SameSite=Strict, scoped to /ui/ and does not hold
// the token.
func TestConsoleSignIn(t *testing.T) {
	f := newFixture(t, token)
	ck := f.signIn(t)
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/ui/" || ck.MaxAge <= 0 {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/ui/, a Max-Age", ck)
	}
	if strings.Contains(ck.Value, token) {
		t.Errorf("the session cookie %q holds the token in clear", ck.Value)
	}
	tampered := ck.Value[:len(ck.Value)-2] + "xx"
	exp, rest, _ := strings.Cut(ck.Value, ".")
	longer := "9" + exp + "." + rest
	for _, tc := range []struct {
		name   string
		header map[string]string
		ok     bool
	}{
		{"session cookie", map[string]string{"Cookie": cookieName + "=" + ck.Value}, true},
		{"bearer token", map[string]string{"Authorization": "Bearer " + token}, true},
		{"bearer, scheme in lower case", map[string]string{"Authorization": "bearer " + token}, true},
		{"nothing", nil, false},
		{"wrong bearer", map[string]string{"Authorization": "Bearer " + token + "x"}, false},
		{"token as a cookie", map[string]string{"Cookie": cookieName + "=" + token}, false},
		{"tampered signature", map[string]string{"Cookie": cookieName + "=" + tampered}, false},
		{"expiry pushed back", map[string]string{"Cookie": cookieName + "=" + longer}, false},
		{"empty cookie", map[string]string{"Cookie": cookieName + "="}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do(t, http.MethodGet, "/ui/dead-letters", nil, tc.header)
			switch {
			case tc.ok && r.status != http.StatusOK:
				t.Errorf("%d, want 200", r.status)
			case !tc.ok && (r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/ui/login?next=")):
				t.Errorf("%d, Location %q: want 303 to the sign-in form", r.status, r.header.Get("Location"))
			}
		})
	}
	t.Run("wrong token in the form", func(t *testing.T) {
		r := f.do(t, http.MethodPost, "/ui/login", url.Values{"token": {"nope"}}, map[string]string{"Sec-Fetch-Site": "same-origin"})
		if r.status != http.StatusUnauthorized || r.header.Get("Set-Cookie") != "" || !strings.Contains(r.body, "Wrong token") {
			t.Errorf("%d, Set-Cookie %q: want 401, no cookie, the form saying why", r.status, r.header.Get("Set-Cookie"))
		}
	})
	t.Run("expired session", func(t *testing.T) {
		f.now = f.now.Add(9 * time.Hour)
		defer func() { f.now = f.now.Add(-9 * time.Hour) }()
		if r := f.do(t, http.MethodGet, "/ui/", nil, map[string]string{"Cookie": cookieName + "=" + ck.Value}); r.status != http.StatusSeeOther {
			t.Errorf("a session 9h old: %d, want 303 to sign in", r.status)
		}
	})
	t.Run("a session of another token", func(t *testing.T) {
		g := newFixture(t, "another-token")
		if r := g.do(t, http.MethodGet, "/ui/", nil, map[string]string{"Cookie": cookieName + "=" + ck.Value}); r.status != http.StatusSeeOther {
			t.Errorf("a session signed under another ADMIN_TOKEN: %d, want 303 to sign in", r.status)
		}
	})
	t.Run("next leads nowhere off the console", func(t *testing.T) {
		for _, next := range []string{"https://evil.example/", "//evil.example/ui/", "/v1/dead-letters", "/ui/\\evil"} {
			r := f.do(t, http.MethodPost, "/ui/login", url.Values{"token": {token}, "next": {next}}, map[string]string{"Sec-Fetch-Site": "same-origin"})
			if loc := r.header.Get("Location"); loc != "/ui/" {
				t.Errorf("next=%q: Location %q, want /ui/", next, loc)
			}
		}
	})
}

// cookieName is the session cookie's name, as the browser sees it.
const cookieName = "webhook_dedup_console"

// TestConsoleSecurityHeaders: every answer of the console, pages, errors
// and assets, carries a CSP of its own origin only, and no page holds
// code the CSP would block.
func TestConsoleSecurityHeaders(t *testing.T) {
	f := newFixture(t, token)
	storetest.DeadLetter(t, f.st, prefix+"github:e1")
	auth := map[string]string{"Authorization": "Bearer " + token}
	for _, path := range []string{"/ui/login", "/ui/", "/ui/dead-letters", "/ui/event?namespace=github&id=e1", "/ui/event", "/ui/nope", "/ui/static/console.css", "/ui/static/console.js"} {
		r := f.do(t, http.MethodGet, path, nil, auth)
		csp := r.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") || strings.Contains(csp, "http") {
			t.Errorf("GET %s: Content-Security-Policy %q, want its own origin only", path, csp)
		}
		if r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: headers %v, want nosniff and DENY", path, r.header)
		}
		if strings.HasSuffix(path, ".js") || strings.HasSuffix(path, ".css") {
			continue
		}
		if m := inlineCode(r.body); m != "" {
			t.Errorf("GET %s: the page holds inline code a strict CSP blocks: %q", path, m)
		}
	}
}

// inlineCode returns the first thing in page a strict CSP would block: a
// script without src, an event handler attribute, a style attribute or
// element ("" if none).
func inlineCode(page string) string {
	for _, m := range regexp.MustCompile(`<script[^>]*>`).FindAllString(page, -1) {
		if !strings.Contains(m, " src=") {
			return m
		}
	}
	return regexp.MustCompile(`\son[a-z]+=|\sstyle=|<style`).FindString(page)
}

// TestConsoleCrossSiteWriteRefused: every write of the console, sent by
// a browser from another site, is refused 403 and changes nothing, with
// a valid session cookie (what a cross-site form post would carry if the
// browser ignored SameSite); the same write from the console's own
// origin, or by a script with the bearer token and no browser headers,
// goes through.
func TestConsoleCrossSiteWriteRefused(t *testing.T) {
	f := newFixture(t, token)
	ck := f.signIn(t)
	cookie := cookieName + "=" + ck.Value
	for _, w := range []struct {
		name string
		path string
		form url.Values
	}{
		{"retry one", "/ui/events/github/e1/retry", url.Values{}},
		{"retry selected", "/ui/dead-letters/retry", url.Values{"event": {"github/e1"}}},
		{"retry all matching", "/ui/dead-letters/retry-all", url.Values{}},
		{"forget", "/ui/events/github/e1/forget", url.Values{}},
	} {
		for _, from := range []struct {
			name   string
			header map[string]string
		}{
			{"Sec-Fetch-Site cross-site", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}},
			{"Sec-Fetch-Site same-site", map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://other.localhost"}},
			{"Origin of another site, no Sec-Fetch-Site", map[string]string{"Origin": "https://evil.example"}},
			{"Origin null", map[string]string{"Origin": "null"}},
		} {
			t.Run(w.name+"/"+from.name, func(t *testing.T) {
				storetest.DeadLetter(t, f.st, prefix+"github:e1")
				from.header["Cookie"] = cookie
				if r := f.do(t, http.MethodPost, w.path, w.form, from.header); r.status != http.StatusForbidden {
					t.Errorf("%d, want 403", r.status)
				}
				if rec, err := f.st.Lookup(context.Background(), prefix+"github:e1"); err != nil || rec.State != dedup.Failed {
					t.Errorf("after the refused write: %v %v, want the dead letter untouched", rec.State, err)
				}
				if _, err := f.st.Forget(context.Background(), prefix+"github:e1"); err != nil {
					t.Fatal(err)
				}
			})
		}
		for _, from := range []struct {
			name   string
			header map[string]string
		}{
			{"same origin", map[string]string{"Sec-Fetch-Site": "same-origin", "Cookie": cookie}},
			{"bearer token, no browser", map[string]string{"Authorization": "Bearer " + token}},
		} {
			t.Run(w.name+"/"+from.name, func(t *testing.T) {
				storetest.DeadLetter(t, f.st, prefix+"github:e1")
				if r := f.do(t, http.MethodPost, w.path, w.form, from.header); r.status != http.StatusSeeOther {
					t.Errorf("%d %s, want 303 back to the page", r.status, r.body)
				}
				if rec, err := f.st.Lookup(context.Background(), prefix+"github:e1"); err == nil && rec.State == dedup.Failed {
					t.Error("the write went through, yet the dead letter is as it was")
				}
				_, _ = f.st.Forget(context.Background(), prefix+"github:e1")
			})
		}
	}
	t.Run("sign-in from another site", func(t *testing.T) {
		r := f.do(t, http.MethodPost, "/ui/login", url.Values{"token": {token}}, map[string]string{"Sec-Fetch-Site": "cross-site"})
		if r.status != http.StatusForbidden || r.header.Get("Set-Cookie") != "" {
			t.Errorf("%d, Set-Cookie %q: want 403 and no session (login CSRF)", r.status, r.header.Get("Set-Cookie"))
		}
	})
}

// deadLetterWith queues req under key and dead-letters it after n timed
// attempts, each answered 500 but the last, which got no answer: as a
// worker would, each attempt kept in the event's history.
func deadLetterWith(t *testing.T, st *diskstore.Store, key string, req dedup.Request, n int) {
	t.Helper()
	ctx := context.Background()
	if won, _, err := st.Enqueue(ctx, key, req, 0); err != nil || !won {
		t.Fatalf("Enqueue %s = %v, %v", key, won, err)
	}
	for i := 1; i <= n; i++ {
		d := storetest.TakeOne(t, st, storetest.Lease)
		// An attempt that ended now: a store may time its outcome from
		// when the attempt ended.
		d.Took = time.Duration(i) * time.Millisecond
		d.Began = time.Now().Add(-d.Took)
		var err error
		if i < n {
			err = st.Retry(ctx, d, time.Now(), 500, "the app answered 500")
		} else {
			err = st.Fail(ctx, d, 0, "connection refused", storetest.Keep)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestEventPageMasksAndCuts: the event page masks every header that
// carries a signature or a credential, indents a JSON body and cuts it at
// 64 KiB, and shows neither a body that is not text.
func TestEventPageMasksAndCuts(t *testing.T) {
	big := `{"pad":"` + strings.Repeat("é", 40<<10) + `"}`
	for _, tc := range []struct {
		name       string
		header     http.Header
		body       string
		want, hide []string
	}{
		{"signatures and credentials", http.Header{
			"Stripe-Signature": {"t=1,v1=sig-stripe"}, "X-Hub-Signature-256": {"sha256=sig-github"}, "X-Shopify-Hmac-Sha256": {"sig-shopify"},
			"Webhook-Signature": {"v1,sig-standard"}, "Authorization": {"Basic c2VjcmV0"}, "X-Api-Key": {"key-1"}, "X-Request-Id": {"req-visible"},
		}, `{"a":1}`, []string{"req-visible", "•••••• (masked)", "{\n  &#34;a&#34;: 1\n}"}, []string{"sig-stripe", "sig-github", "sig-shopify", "sig-standard", "c2VjcmV0", "key-1"}},
		{"a JSON body over 64 KiB", nil, big, []string{"Cut at 64 KiB", "bytes more not shown"}, []string{`"}`}},
		{"a body that is not text", nil, "\x00\xff\xfe", []string{"not text: not shown"}, []string{"\xff"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, token)
			deadLetterWith(t, f.st, prefix+"github:e1", dedup.Request{Method: "POST", RequestURI: "/hooks/github", Header: tc.header, Body: []byte(tc.body)}, 1)
			r := f.do(t, http.MethodGet, "/ui/event?namespace=github&id=e1", nil, map[string]string{"Authorization": "Bearer " + token})
			if r.status != http.StatusOK {
				t.Fatalf("%d, want 200", r.status)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.body, w) {
					t.Errorf("the page lacks %q", w)
				}
			}
			for _, h := range tc.hide {
				if strings.Contains(r.body, h) {
					t.Errorf("the page shows %q", h)
				}
			}
		})
	}
}

// TestEventPageAttempts: the event page lists the attempts the store's
// history keeps (the last 10 of 12, oldest first, each with its time,
// duration and status or error), and says why it shows no request for an
// event that keeps none.
func TestEventPageAttempts(t *testing.T) {
	f := newFixture(t, token)
	ctx := context.Background()
	deadLetterWith(t, f.st, prefix+"github:many", storetest.Request, 12)
	bearer := map[string]string{"Authorization": "Bearer " + token}
	r := f.do(t, http.MethodGet, "/ui/event?namespace=github&id=many", nil, bearer)
	rows := regexp.MustCompile(`<tr><td>(\d+)</td><td>[0-9-]+ [0-9:.]+</td><td>(\d+ms)</td><td>(\w+)</td>`).FindAllStringSubmatch(r.body, -1)
	if len(rows) != 10 {
		t.Fatalf("%d attempts listed, want the last 10 kept:\n%s", len(rows), r.body)
	}
	for i, row := range rows {
		n := i + 3
		want := []string{strconv.Itoa(n), strconv.Itoa(n) + "ms", "500"}
		if n == 12 {
			want[2] = "none"
		}
		if !slices.Equal(row[1:], want) {
			t.Errorf("attempt row %d = %v, want %v", i, row[1:], want)
		}
	}
	if !strings.Contains(r.body, "connection refused") {
		t.Errorf("the last attempt's error is not shown")
	}

	// Completed, and a sync route's record: no request kept, and why.
	storetest.MustEnqueue(t, f.st, prefix+"github:done")
	if err := f.st.Succeed(ctx, storetest.TakeOne(t, f.st, storetest.Lease), storetest.Replayed, storetest.Keep); err != nil {
		t.Fatal(err)
	}
	c, _ := storetest.MustClaim(t, f.st, prefix+"github:sync", storetest.Lease)
	if err := f.st.Complete(ctx, c, storetest.Replayed, storetest.Keep); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"done": "Completed: its request is not kept once delivered.", "sync": "A sync route&#39;s record: its request is forwarded, never kept."} {
		r := f.do(t, http.MethodGet, "/ui/event?namespace=github&id="+id, nil, bearer)
		if !strings.Contains(r.body, `<p id="request-note">`+want+`</p>`) {
			t.Errorf("%s: the page does not say %q:\n%s", id, want, r.body)
		}
	}
}
