package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// chromiumPath finds the browser the console tests drive, failing the
// test with how to install it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("the console tests drive headless Chromium, which is not installed: `make deps` installs it (Debian: apt-get install chromium)")
	return ""
}

// browser is a headless Chromium whose every request outside allowed
// hosts is failed before it leaves, and recorded.
type browser struct {
	ctx     context.Context
	mu      sync.Mutex
	allowed map[string]bool
	blocked []string
	// refused are the browser's reports of what the page's
	// Content-Security-Policy blocked (never sent, so not in blocked).
	refused []string
}

// newBrowser starts Chromium with a fresh profile and no background
// traffic of its own, allowing requests to hosts only.
func newBrowser(t *testing.T, hosts ...string) *browser {
	t.Helper()
	// The profile is a folder of its own rather than t.TempDir: Chromium's
	// helper processes can still write into it for a moment after the
	// browser is gone, and t.TempDir's cleanup then fails the test
	// ("directory not empty"). It is removed once they are done, after
	// the browser's own cleanups (registered below, so run before).
	profile, err := os.MkdirTemp("", "webhook-dedup-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Nothing configures how long Chromium's helpers take to exit
		// once the browser is gone: a moment, plus what a loaded machine
		// adds to scheduling them (loadMargin). Past it, the folder is
		// left to the temporary directory's own cleaning.
		deadline := time.Now().Add(loadMargin)
		for os.RemoveAll(profile) != nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	})
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(profile), chromedp.WindowSize(1280, 900),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	b := &browser{ctx: ctx, allowed: map[string]bool{}}
	for _, h := range hosts {
		b.allowed[h] = true
	}
	chromedp.ListenTarget(ctx, func(ev any) {
		if e, ok := ev.(*cdplog.EventEntryAdded); ok && strings.Contains(e.Entry.Text, "Content Security Policy") {
			b.mu.Lock()
			b.refused = append(b.refused, e.Entry.Text)
			b.mu.Unlock()
		}
		e, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		go func() {
			exec := cdp.WithExecutor(ctx, chromedp.FromContext(ctx).Target)
			u, err := url.Parse(e.Request.URL)
			b.mu.Lock()
			allow := err == nil && b.allowed[u.Host]
			if !allow {
				b.blocked = append(b.blocked, e.Request.URL)
			}
			b.mu.Unlock()
			if allow {
				_ = fetch.ContinueRequest(e.RequestID).Do(exec)
				return
			}
			_ = fetch.FailRequest(e.RequestID, network.ErrorReasonBlockedByClient).Do(exec)
		}()
	})
	// The first Run starts the browser, which lives as long as its
	// context: b.ctx, not a deadline of run's. Every request of the page
	// then pauses until the listener decides.
	if err := chromedp.Run(ctx, cdplog.Enable(), fetch.Enable()); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return b
}

func (b *browser) allow(host string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.allowed[host] = true
}

// attemptedElsewhere lists the requests to other origins, sent or
// refused by the page's CSP.
func (b *browser) attemptedElsewhere() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append(append([]string(nil), b.blocked...), b.refused...)
}

// run runs actions under a deadline, failing the test with what.
func (b *browser) run(t *testing.T, what string, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		var loc string
		_ = chromedp.Run(b.ctx, chromedp.Location(&loc))
		t.Fatalf("browser: %s: %v (at %s)", what, err, loc)
	}
}

// press clicks what sel finds and waits for the page it leads to: the
// page is marked first, and the mark is gone once the next has loaded.
func press(sel string) chromedp.Action {
	return chromedp.Tasks{
		chromedp.Evaluate(`document.body.dataset.left = "yes"`, nil),
		chromedp.Click(sel, chromedp.BySearch),
		chromedp.WaitReady(`body:not([data-left])`, chromedp.ByQuery),
	}
}

// rowButton is the XPath of the button named name in an event's row.
func rowButton(id, name string) string {
	return fmt.Sprintf(`//tr[@data-event-id=%q]//button[normalize-space()=%q]`, id, name)
}

// TestConsoleInBrowser drives the console in headless Chromium against
// the built binary: an app fails every delivery (RETRY_MAX_ATTEMPTS=1),
// so 5 acme and 3 GitHub events are dead-lettered; the operator signs
// in, filters, retries one from its row once the app answers 2xx and
// sees it delivered, retries a selection, forgets one, retries all that
// match a filter, reads an event's page; a form posted from another site
// is refused; and the browser never asked anything of any origin but the
// console's.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	app := newScriptedApp(t, func(string, int) (int, string) {
		if broken.Load() {
			return http.StatusInternalServerError, ""
		}
		return http.StatusOK, ""
	})
	env := asyncEnv(app.URL, diskStore.env(t))
	env["RETRY_MAX_ATTEMPTS"] = "1"
	px := startProxy(t, env)
	b := px.bounds()
	queueEvents(t, px, acme, 5)
	queueEvents(t, px, github, 3)
	for i := range 5 {
		px.awaitState(t, acme, acme.Event(i).ID, "failed", b.delivered(1))
	}
	for i := range 3 {
		px.awaitState(t, github, github.Event(i).ID, "failed", b.delivered(1))
	}
	ui := "http://" + px.Admin + "/ui/"
	br := newBrowser(t, px.Admin)

	var cookies string
	br.run(t, "sign in",
		chromedp.Navigate(ui+"dead-letters"),
		chromedp.WaitVisible(`#token`, chromedp.ByID),
		chromedp.SendKeys(`#token`, adminToken, chromedp.ByID),
		press(`//button[normalize-space()="Sign in"]`),
		chromedp.WaitVisible(`//h1[normalize-space()="Dead letters"]`, chromedp.BySearch),
		chromedp.Evaluate(`document.cookie`, &cookies),
	)
	if cookies != "" {
		t.Errorf("the page's script reads the cookies %q: the session cookie is not HttpOnly", cookies)
	}
	rows := func(what string) map[string]string {
		t.Helper()
		var got [][2]string
		br.run(t, what, chromedp.Evaluate(`[...document.querySelectorAll("[data-event-id]")].map(e => [e.dataset.eventId, e.dataset.namespace])`, &got))
		out := map[string]string{}
		for _, a := range got {
			out[a[0]] = a[1]
		}
		return out
	}
	if got := rows("every dead letter"); len(got) != 8 {
		t.Fatalf("the dead-letter page lists %v, want the 8 dead letters", got)
	}
	if shot := os.Getenv("CONSOLE_SCREENSHOT"); shot != "" {
		var png []byte
		br.run(t, "screenshot", chromedp.FullScreenshot(&png, 100))
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var deadCell, failedCell string
	br.run(t, "the overview",
		chromedp.Navigate(ui),
		chromedp.Text(`tr[data-route="/hooks/acme"] td.dead`, &deadCell, chromedp.ByQuery),
		chromedp.Text(`tr[data-route="/hooks/acme"] td.failed`, &failedCell, chromedp.ByQuery),
	)
	if deadCell != "5" || failedCell != "5" {
		t.Errorf("the overview's /hooks/acme row: %s dead letters, %s failed attempts; want 5 and 5", deadCell, failedCell)
	}

	filter := func(what, namespace, status string) map[string]string {
		t.Helper()
		br.run(t, what,
			chromedp.Navigate(ui+"dead-letters"),
			chromedp.WaitVisible(`#f-namespace`, chromedp.ByID),
			chromedp.SendKeys(`#f-namespace`, namespace, chromedp.ByID),
			chromedp.SendKeys(`#f-status`, status, chromedp.ByID),
			press(`//button[normalize-space()="Filter"]`),
		)
		return rows(what)
	}
	for _, tc := range []struct {
		namespace, status string
		want              int
	}{
		{"/hooks/acme", "", 5}, {"github", "5xx", 3}, {"", "500", 8}, {"/hooks/acme", "404", 0}, {"", "none", 0},
	} {
		got := filter("filter "+tc.namespace+" "+tc.status, tc.namespace, tc.status)
		for id, ns := range got {
			if tc.namespace != "" && ns != tc.namespace {
				t.Errorf("filter namespace=%q: lists %s of %s", tc.namespace, id, ns)
			}
		}
		if len(got) != tc.want {
			t.Errorf("filter namespace=%q status=%q: %d rows %v, want %d", tc.namespace, tc.status, len(got), got, tc.want)
		}
	}

	broken.Store(false)
	one := acme.Event(0).ID
	filter("acme's", "/hooks/acme", "")
	br.run(t, "retry one from its row",
		press(rowButton(one, "Retry")),
		chromedp.WaitVisible(`//p[@role="status"][contains(., "Queued again")]`, chromedp.BySearch),
	)
	px.awaitState(t, acme, one, "completed", b.delivered(1))
	if seen := app.seen(one); len(seen) != 2 {
		t.Errorf("%s: the app saw %d attempts, want the failed one and the delivery after Retry", one, len(seen))
	}
	var state string
	br.run(t, "the retried event's page",
		chromedp.Navigate(ui+"event?namespace="+url.QueryEscape("/hooks/acme")+"&id="+one),
		chromedp.Text(`#event-state`, &state, chromedp.ByID),
	)
	if state != "completed" {
		t.Errorf("the event page of %s says %q, want completed", one, state)
	}

	filter("acme's again", "/hooks/acme", "")
	sel := []string{acme.Event(1).ID, acme.Event(2).ID}
	br.run(t, "retry two selected",
		chromedp.Click(fmt.Sprintf(`//tr[@data-event-id=%q]//input[@type="checkbox"]`, sel[0]), chromedp.BySearch),
		chromedp.Click(fmt.Sprintf(`//tr[@data-event-id=%q]//input[@type="checkbox"]`, sel[1]), chromedp.BySearch),
		press(`//button[normalize-space()="Retry selected"]`),
		chromedp.WaitVisible(`//p[@role="status"][contains(., "2 dead letters queued again")]`, chromedp.BySearch),
	)
	for _, id := range sel {
		px.awaitState(t, acme, id, "completed", b.delivered(1))
	}

	gone := acme.Event(3).ID
	br.run(t, "forget one from its row",
		press(rowButton(gone, "Forget")),
		chromedp.WaitVisible(`//p[@role="status"][contains(., "Forgotten")]`, chromedp.BySearch),
	)
	if ev := px.event(t, acme, gone); ev.State != "" {
		t.Errorf("%s after Forget: %+v, want no record", gone, ev)
	}
	if got := rows("after forget"); got[gone] != "" {
		t.Errorf("%s is still listed after Forget", gone)
	}

	// A page of another origin posts the console's retry form: the
	// browser sends the request (and, same-site on loopback, the
	// cookie), and the console refuses it.
	kept := acme.Event(4).ID
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%sevents/%s/%s/retry"></form><script>document.getElementById("f").submit()</script>`,
			ui, url.PathEscape("/hooks/acme"), kept)
	}))
	defer evil.Close()
	br.allow(strings.TrimPrefix(evil.URL, "http://"))
	var refused string
	br.run(t, "a cross-site post",
		chromedp.Navigate(evil.URL),
		chromedp.WaitVisible(`//p[@role="alert"]`, chromedp.BySearch),
		chromedp.Text(`//p[@role="alert"]`, &refused, chromedp.BySearch),
	)
	if !strings.Contains(refused, "Refused") {
		t.Errorf("the cross-site post answered %q, want it refused", refused)
	}
	if ev := px.event(t, acme, kept); ev.State != "failed" {
		t.Errorf("%s after a cross-site retry: %+v, want it still dead-lettered", kept, ev)
	}

	// A dead letter's page: its attempts from the history, its request's
	// headers (the signature masked) and its JSON body indented.
	gh := github.Event(0)
	var headers [][2]string
	var body, attemptRows string
	br.run(t, "github's dead letter's page",
		chromedp.Navigate(ui+"event?namespace=github&id="+url.QueryEscape(gh.ID)),
		chromedp.WaitVisible(`#headers`, chromedp.ByID),
		chromedp.Evaluate(`[...document.querySelectorAll("#headers tbody tr")].map(r => [r.cells[0].textContent, r.cells[1].textContent])`, &headers),
		chromedp.Text(`#body`, &body, chromedp.ByID),
		chromedp.Text(`#attempts tbody`, &attemptRows, chromedp.ByQuery),
	)
	shown := map[string]string{}
	for _, h := range headers {
		shown[h[0]] = h[1]
	}
	if shown["X-Hub-Signature-256"] != "•••••• (masked)" || shown["X-Github-Delivery"] != gh.ID {
		t.Errorf("the headers shown: %v; want X-Hub-Signature-256 masked, X-Github-Delivery %s", shown, gh.ID)
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, gh.Body, "", "  "); err != nil {
		t.Fatal(err)
	}
	if body != pretty.String() {
		t.Errorf("the body shown:\n%s\nwant it indented:\n%s", body, pretty.String())
	}
	if !regexp.MustCompile(`^\s*1\s+\d{4}-\d\d-\d\d [0-9:.]+\s+(<1ms|[0-9.]+m?s)\s+500\s+the app answered 500\s*$`).MatchString(attemptRows) {
		t.Errorf("the attempts listed: %q; want one, numbered, timed, 500 and why", attemptRows)
	}

	filter("github's", "github", "")
	br.run(t, "retry all matching",
		press(`//button[normalize-space()="Retry all matching"]`),
		chromedp.WaitVisible(`//p[@role="status"][contains(., "3 dead letters queued again")]`, chromedp.BySearch),
	)
	for i := range 3 {
		px.awaitState(t, github, github.Event(i).ID, "completed", b.delivered(1))
	}
	if ev := px.event(t, acme, kept); ev.State != "failed" {
		t.Errorf("%s after retrying all of github's: %+v, want it still dead-lettered (not matched)", kept, ev)
	}

	var attempts, status, note string
	var retryButtons []map[string]string
	br.run(t, "a dead letter's page",
		chromedp.Navigate(ui+"event"),
		chromedp.SendKeys(`#e-namespace`, "/hooks/acme", chromedp.ByID),
		chromedp.SendKeys(`#e-id`, kept, chromedp.ByID),
		press(`//button[normalize-space()="Find"]`),
		chromedp.Text(`#event-state`, &state, chromedp.ByID),
		chromedp.Text(`#event-attempts`, &attempts, chromedp.ByID),
		chromedp.Text(`#attempts tbody`, &status, chromedp.ByQuery),
		chromedp.AttributesAll(`//section[@data-event-id]//button[normalize-space()="Retry"]`, &retryButtons, chromedp.BySearch),
		chromedp.Evaluate(`[...document.querySelectorAll("#headers tbody tr")].map(r => [r.cells[0].textContent, r.cells[1].textContent])`, &headers),
		chromedp.Text(`//h3[normalize-space(text())="Body"]/span`, &note, chromedp.BySearch),
	)
	shown = map[string]string{}
	for _, h := range headers {
		shown[h[0]] = h[1]
	}
	if shown["X-Acme-Signature"] != "•••••• (masked)" || shown["X-Acme-Event-Id"] != kept || !strings.Contains(note, "not text") {
		t.Errorf("the page of %s: headers %v, body %q; want X-Acme-Signature masked, its body (not text) not shown", kept, shown, note)
	}
	if state != "failed" || attempts != "1" || !strings.Contains(status, "500") || len(retryButtons) != 1 {
		t.Errorf("the page of %s: state %q, attempts %q, attempts table %q, %d Retry buttons; want failed, 1, 500, one", kept, state, attempts, status, len(retryButtons))
	}

	br.run(t, "a delivered event's page",
		chromedp.Navigate(ui+"event?namespace=github&id="+url.QueryEscape(gh.ID)),
		chromedp.Text(`#request-note`, &note, chromedp.ByID),
	)
	if !strings.Contains(note, "not kept once delivered") {
		t.Errorf("the delivered event's page says %q about its request, want that it is not kept", note)
	}

	var selectAll bool
	br.run(t, "the script's nicety", chromedp.Navigate(ui+"dead-letters"),
		chromedp.WaitVisible(`#select-all`, chromedp.ByID),
		chromedp.Click(`#select-all`, chromedp.ByID),
		chromedp.Evaluate(`[...document.querySelectorAll('#selection input[name="event"]')].every(b => b.checked)`, &selectAll),
	)
	if !selectAll {
		t.Error("the select-all box did not tick every row: console.js did not run under the CSP")
	}
	// The evil page's inline script ran under no CSP: only the
	// console's pages are held to theirs.
	if got := br.attemptedElsewhere(); len(got) > 0 {
		t.Errorf("the console asked for what is not on its own origin: %v", got)
	}
}
