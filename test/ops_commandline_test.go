package test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCommandLineMistakesEndToEnd: the binary, given a mistake on its
// command line with a configuration it would serve, exits 2 at once with
// the mistake on stderr's first line and the pointer at -h on its second;
// it does not serve (the first cases once served with the flag ignored).
func TestCommandLineMistakesEndToEnd(t *testing.T) {
	t.Parallel()
	env := map[string]string{"UPSTREAM_URL": newUpstream(t).URL, "LISTEN_ADDR": "127.0.0.1:0", "ADMIN_ADDR": "127.0.0.1:0"}
	for _, tc := range []struct {
		args       []string
		first, run string
	}{
		{[]string{"serve", "--no-such-flag"}, "webhook-dedup: unknown flag: --no-such-flag", "webhook-dedup serve -h"},
		{[]string{"--no-such-flag"}, "webhook-dedup: unknown flag: --no-such-flag", "webhook-dedup -h"},
		{[]string{"bogus"}, `webhook-dedup: unknown command "bogus"`, "webhook-dedup -h"},
		{[]string{"dead-letters", "--since", "yesterday"}, `webhook-dedup: --since "yesterday": neither an RFC 3339 time`, "webhook-dedup dead-letters -h"},
		{[]string{"send"}, "webhook-dedup: send wants ROUTE, got 0 arguments", "webhook-dedup send -h"},
	} {
		code, out, errOut := cli(t, env, tc.args...)
		lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
		if code != 2 || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], tc.first) || lines[1] != "Run '"+tc.run+"' for usage and examples." {
			t.Errorf("webhook-dedup %s: exit %d, stdout %q, stderr %q; want exit 2, %q then the pointer at %s", strings.Join(tc.args, " "), code, out, errOut, tc.first, tc.run)
		}
	}
	code, out, errOut := cli(t, env, "dead-letters", "-h")
	if code != 0 || !strings.Contains(out, "Examples:\n  webhook-dedup dead-letters") || errOut != "" {
		t.Errorf("webhook-dedup dead-letters -h: exit %d, %q %q; want exit 0 and an example", code, out, errOut)
	}
}

// sendLine is send's first line: the URL, the namespace and the event ID.
var sendLine = regexp.MustCompile(`^POST (\S+) \((\S+) event (\S+)\)\n`)

// send runs `webhook-dedup send route` with the proxy's environment and
// returns the event ID it sent, after checking the proxy accepted it.
func sendSample(t *testing.T, px *proxy, env map[string]string, route, wantNS string) string {
	t.Helper()
	env = maps.Clone(env)
	env["LISTEN_ADDR"], env["ADMIN_ADDR"] = px.Addr, px.Admin
	code, out, errOut := cli(t, env, "send", route)
	m := sendLine.FindStringSubmatch(out)
	if code != 0 || m == nil || m[1] != px.URL(route) || m[2] != wantNS || out[len(m[0]):] != "202 Accepted\nX-Webhook-Dedup: queued\n" {
		t.Fatalf("webhook-dedup send %s: exit %d, %q %q; want POST %s (%s event …), 202 Accepted, X-Webhook-Dedup: queued", route, code, out, errOut, px.URL(route), wantNS)
	}
	return m[3]
}

// verifyingApp is an app that checks each webhook as the provider's own
// library would (provider.Verify, not the proxy's verifiers), counts it
// by key, and answers status. A request that fails the check is a test
// failure. Unlike upstream, it expects no X-Test-Sent header: its
// senders are not the tests'.
type verifyingApp struct {
	*httptest.Server
	mu     sync.Mutex
	status int
	calls  map[string]int
}

func newVerifyingApp(t *testing.T, status int) *verifyingApp {
	t.Helper()
	a := &verifyingApp{status: status, calls: map[string]int{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		p, ok := providerFor(r)
		if !ok {
			t.Errorf("the app received %s %s, no provider's", r.Method, r.URL.Path)
			http.Error(w, "no provider", http.StatusNotFound)
			return
		}
		id, err := p.Verify(r, body, time.Now())
		if err != nil {
			t.Errorf("the app refused %s %s: %v", r.Method, r.URL.Path, err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.calls[key(p, id)]++
		a.mu.Unlock()
		w.WriteHeader(a.status)
	}))
	t.Cleanup(a.Close)
	return a
}

// Calls is how many requests for the key reached the app.
func (a *verifyingApp) Calls(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[key]
}

// TestSendEndToEnd: `send` with the proxy's environment posts a sample
// that the proxy accepts (202, queued) on async routes over DATA_DIR, for
// an HMAC preset of each kind and a Standard Webhooks one; the app, whose
// own signature checks are the providers' and not the proxy's, receives
// each once; a second send is another event.
func TestSendEndToEnd(t *testing.T) {
	t.Parallel()
	app := newVerifyingApp(t, http.StatusOK)
	env := asyncEnv(app.URL, diskStore.env(t))
	px := startProxy(t, env)
	b := px.bounds()
	var keys []string
	for _, p := range []provider{stripe, github, standardWebhooks} {
		first := sendSample(t, px, env, p.Path, p.Name)
		second := sendSample(t, px, env, p.Path, p.Name)
		if first == second {
			t.Errorf("%s: two sends carried the same event ID %s", p.Name, first)
		}
		keys = append(keys, key(p, first), key(p, second))
		px.awaitState(t, p, first, "completed", b.delivered(1))
		px.awaitState(t, p, second, "completed", b.delivered(1))
	}
	for _, k := range keys {
		if n := app.Calls(k); n != 1 {
			t.Errorf("the app received %s %d times, want once", k, n)
		}
	}
}

// TestDeadLettersTableAndJSON: dead-letters prints an aligned table on a
// terminal and JSON to a pipe or with -o json, with its filters applied.
// The dead letters are samples sent to an app that fails them all.
func TestDeadLettersTableAndJSON(t *testing.T) {
	t.Parallel()
	app := newVerifyingApp(t, http.StatusInternalServerError)
	env := asyncEnv(app.URL, diskStore.env(t))
	env["RETRY_MAX_ATTEMPTS"] = "1"
	px := startProxy(t, env)
	b := px.bounds()
	ids := map[string]provider{}
	for _, p := range []provider{stripe, stripe, github} {
		ids[sendSample(t, px, env, p.Path, p.Name)] = p
	}
	for id, p := range ids {
		px.awaitState(t, p, id, "failed", b.delivered(1))
	}
	cliEnv := map[string]string{"ADMIN_ADDR": px.Admin, "ADMIN_TOKEN": adminToken}

	listed := func(args ...string) []string {
		t.Helper()
		code, out, errOut := cli(t, cliEnv, append([]string{"dead-letters"}, args...)...)
		var doc struct {
			DeadLetters []struct{ Namespace, ID string } `json:"dead_letters"`
		}
		if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil {
			t.Fatalf("dead-letters %v to a pipe: exit %d, %q %q (%v); want JSON", args, code, out, errOut, err)
		}
		var got []string
		for _, dl := range doc.DeadLetters {
			got = append(got, dl.Namespace+" "+dl.ID)
		}
		return got
	}
	if got := listed(); len(got) != 3 {
		t.Errorf("dead-letters: %q; want the 3", got)
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"-o", "json"}, 3},
		{[]string{"--namespace", "stripe"}, 2},
		{[]string{"--namespace", "github", "--since", "1h"}, 1},
		{[]string{"--namespace", "strip"}, 0},
		{[]string{"--limit", "1"}, 1},
		{[]string{"--since", "2000-01-01T00:00:00Z", "--until", "2h"}, 0},
		{[]string{"--since", "2000-01-01T00:00:00Z", "--until", "2999-01-01T00:00:00Z"}, 3},
	} {
		if got := listed(tc.args...); len(got) != tc.want {
			t.Errorf("dead-letters %s: %q; want %d", strings.Join(tc.args, " "), got, tc.want)
		}
	}

	// On a terminal: a table, a header and one line each, in columns.
	table := onTerminal(t, cliEnv, "dead-letters")
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if len(lines) != 4 || !regexp.MustCompile(`^NAMESPACE +ID +FAILED AT +ATTEMPTS +LAST STATUS +LAST ERROR$`).MatchString(lines[0]) {
		t.Fatalf("dead-letters on a terminal printed\n%s\nwant a header and 3 lines", table)
	}
	col := strings.Index(lines[0], "FAILED AT")
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if p, ok := ids[f[1]]; !ok || f[0] != p.Name || !regexp.MustCompile(`^\d{4}-\d\d-\d\dT`).MatchString(l[col:]) || f[3] != "1" || f[4] != "500" {
			t.Errorf("table line %q: want namespace, a sent ID, the time in its column, 1 attempt, last status 500", l)
		}
	}
	if out := onTerminal(t, cliEnv, "dead-letters", "-o", "json"); !json.Valid([]byte(out)) {
		t.Errorf("dead-letters -o json on a terminal printed %q, want JSON", out)
	}
}

// onTerminal runs the binary with its stdout on a pseudo-terminal and
// returns what it printed there, line ends as written.
func onTerminal(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	ptm, pts := openPTY(t)
	ctx, cancel := context.WithTimeout(context.Background(), exitDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = envList(env)
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = pts, &errOut
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(ptm) // until EIO, once the last writer is gone
		read <- b
	}()
	err := cmd.Run()
	pts.Close()
	out := <-read
	if err != nil {
		t.Fatalf("webhook-dedup %s on a terminal: %v %q %q", strings.Join(args, " "), err, out, errOut.String())
	}
	return strings.ReplaceAll(string(out), "\r\n", "\n") // the terminal's own line ends
}

// openPTY opens a pseudo-terminal pair, closed when the test ends.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { ptm.Close() })
	fd := int(ptm.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pseudo-terminal number: %v", err)
	}
	pts, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/pts/%d: %v", n, err)
	}
	t.Cleanup(func() { pts.Close() })
	return ptm, pts
}

// TestCompletionScripts: each shell's script is generated; bash's loads
// and registers the completion, and the completion it asks the binary
// for offers dead-letters' output formats.
func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	for shell, marker := range map[string]string{
		"bash": "__start_webhook-dedup", "zsh": "#compdef webhook-dedup", "fish": "complete -c webhook-dedup",
	} {
		code, out, errOut := cli(t, nil, "completion", shell)
		if code != 0 || !strings.Contains(out, marker) || errOut != "" {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes without %q", shell, code, errOut, len(out), marker)
		}
	}
	_, script, _ := cli(t, nil, "completion", "bash")
	sh := exec.Command("bash", "--norc", "-c", `source /dev/stdin && complete -p webhook-dedup`)
	sh.Stdin = strings.NewReader(script)
	if out, err := sh.CombinedOutput(); err != nil || !strings.Contains(string(out), "-F __start_webhook-dedup webhook-dedup") {
		t.Errorf("bash, sourcing the script: %v %q; want webhook-dedup's completion registered", err, out)
	}
	if code, out, _ := cli(t, nil, "__complete", "dead-letters", "-o", ""); code != 0 || !strings.HasPrefix(out, "table\njson\n") {
		t.Errorf("completing dead-letters -o: exit %d, %q; want table and json", code, out)
	}
	if code, out, _ := cli(t, nil, "__complete", "dead"); code != 0 || !strings.Contains(out, "dead-letters\t") {
		t.Errorf("completing dead: exit %d, %q; want dead-letters", code, out)
	}
}

// TestProfilesEndToEnd: Go's profiles on the admin port are the admin
// API's: 404 without ADMIN_TOKEN, 401 with a wrong token, the index with
// the right one.
func TestProfilesEndToEnd(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	off := startProxy(t, map[string]string{"UPSTREAM_URL": app.URL})
	if a := off.adminDo(t, http.MethodGet, "/debug/pprof/", "anything"); a.Status != http.StatusNotFound {
		t.Errorf("without ADMIN_TOKEN: GET /debug/pprof/: %s, want 404", a)
	}
	on := startProxy(t, map[string]string{"UPSTREAM_URL": app.URL, "ADMIN_TOKEN": adminToken})
	for _, tc := range []struct {
		tok  string
		want int
	}{{"", http.StatusUnauthorized}, {"wrong", http.StatusUnauthorized}, {adminToken, http.StatusOK}} {
		a := on.adminDo(t, http.MethodGet, "/debug/pprof/", tc.tok)
		if a.Status != tc.want || tc.want == 200 && !bytes.Contains(a.Body, []byte(`href="goroutine?debug=1"`)) {
			t.Errorf("GET /debug/pprof/ with token %q: %s, want %d", tc.tok, a, tc.want)
		}
	}
	if a := on.adminDo(t, http.MethodGet, "/debug/pprof/goroutine?debug=1", adminToken); a.Status != 200 || !bytes.Contains(a.Body, []byte("admin")) {
		t.Errorf("GET /debug/pprof/goroutine?debug=1: %s, want the process's goroutines", a)
	}
}
