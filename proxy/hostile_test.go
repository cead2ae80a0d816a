package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"
	"github.com/webhook-dedup/webhook-dedup/policy"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/internal/server"
	"github.com/webhook-dedup/webhook-dedup/providers"
	"github.com/webhook-dedup/webhook-dedup/proxy"
)

// ledger is the embedded store with an account of every call, so that a
// test can tell a hostile request left the store untouched, or took a
// claim and gave it up.
type ledger struct {
	*memstore.Store
	mu sync.Mutex
	// calls counts every store operation.
	calls int
	// claims counts the claims taken.
	claims int
	// held are the keys claimed and neither completed nor released yet.
	held map[string]bool
}

func newLedger(t *testing.T) *ledger {
	m := memstore.New()
	t.Cleanup(func() { m.Close() })
	return &ledger{Store: m, held: map[string]bool{}}
}

func (l *ledger) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error) {
	c, rec, err := l.Store.Claim(ctx, key, lease)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if c.Token != "" {
		l.claims++
		l.held[c.Key] = true
	}
	return c, rec, err
}

func (l *ledger) Complete(ctx context.Context, c dedup.Claim, res dedup.Result, ttl time.Duration) error {
	err := l.Store.Complete(ctx, c, res, ttl)
	l.settled(c)
	return err
}

func (l *ledger) Release(ctx context.Context, c dedup.Claim) error {
	err := l.Store.Release(ctx, c)
	l.settled(c)
	return err
}

func (l *ledger) Lookup(ctx context.Context, key string) (dedup.Record, error) {
	l.mu.Lock()
	l.calls++
	l.mu.Unlock()
	return l.Store.Lookup(ctx, key)
}

func (l *ledger) settled(c dedup.Claim) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	delete(l.held, c.Key)
}

// account returns the number of store calls and of claims taken, and the
// keys still held.
func (l *ledger) account() (calls, claims int, held []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.held {
		held = append(held, k)
	}
	return l.calls, l.claims, held
}

// watchUpstream is the app: it tells apart the requests it read to their
// end (processed) from those whose body broke off (read errors).
type watchUpstream struct {
	*httptest.Server
	mu         sync.Mutex
	processed  []string // "path body" of every request read to its end
	readErrors int
}

func newWatchUpstream(t *testing.T) *watchUpstream {
	u := &watchUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		u.mu.Lock()
		defer u.mu.Unlock()
		if err != nil {
			u.readErrors++
			return
		}
		u.processed = append(u.processed, r.URL.Path+" "+string(body))
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *watchUpstream) seen() (processed []string, readErrors int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.processed...), u.readErrors
}

// hostile is the proxy behind an http.Server configured as serve.go does,
// in front of a watchUpstream, on a ledger store.
type hostile struct {
	store *ledger
	up    *watchUpstream
	srv   *httptest.Server
	// outcomes receives the X-Webhook-Dedup value of every answer once its
	// handler has returned, including answers nobody was left to read.
	outcomes chan string
	// serverLog collects net/http's own error log (panics, bad requests).
	serverLog *syncBuffer
	// logs are the proxy's log entries.
	logs *observer.ObservedLogs
}

// newHostile starts a fixture for routes (the ROUTES syntax) with opts
// (secrets), and checks at the end that the test leaked no goroutine and
// that net/http caught no panic. The proxy is served by the public server
// the binary runs (internal/server), configured from the defaults and env
// (variables as the binary reads them, e.g. READ_HEADER_TIMEOUT), if any.
func newHostile(t *testing.T, routes string, opts providers.Options, cfg proxy.Config, env ...map[string]string) *hostile {
	t.Helper()
	noLeaks(t)
	f := &hostile{store: newLedger(t), up: newWatchUpstream(t), outcomes: make(chan string, 1024), serverLog: &syncBuffer{}}
	u, _ := url.Parse(f.up.URL)
	cfg.Upstream = u
	cfg.Store = f.store
	cfg.KeyPrefix = "test:"
	if cfg.Metrics == nil {
		cfg.Metrics = proxy.NewMetrics(prometheus.NewRegistry())
	}
	core, logs := observer.New(zapcore.DebugLevel)
	cfg.Logger, f.logs = zap.New(core), logs
	for _, entry := range strings.Split(routes, ",") {
		path, spec, _ := strings.Cut(entry, "=")
		src, err := providers.ParseSource(path, spec, opts)
		if err != nil {
			t.Fatalf("ParseSource(%q, %q): %v", path, spec, err)
		}
		cfg.Routes = append(cfg.Routes, proxy.Route{Path: path, Source: src})
	}
	h := newHandler(t, cfg)
	environ := map[string]string{"UPSTREAM_URL": f.up.URL}
	for _, e := range env {
		for k, v := range e {
			environ[k] = v
		}
	}
	binCfg, err := config.Load(environ)
	if err != nil {
		t.Fatal(err)
	}
	serverLog := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(f.serverLog), zapcore.DebugLevel))
	f.srv = httptest.NewUnstartedServer(nil)
	f.srv.Config = server.Public(binCfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		select {
		case f.outcomes <- w.Header().Get(proxy.HeaderOutcome):
		default:
		}
	}), serverLog)
	f.srv.Start()
	t.Cleanup(func() {
		f.srv.Close()
		if s := f.serverLog.String(); strings.Contains(s, "panic") {
			t.Errorf("the server caught a panic:\n%s", s)
		}
	})
	return f
}

// noLeaks fails the test if goroutines it started are still running once
// its cleanups (registered later, so run earlier) have closed everything.
func noLeaks(t *testing.T) {
	current := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if err := findLeaks(current); err != nil {
			t.Error(err)
		}
	})
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// reply is a read answer.
type reply struct {
	status  int
	outcome string
	body    string
}

func (r reply) String() string {
	return fmt.Sprintf("%d %s=%q %.120q", r.status, proxy.HeaderOutcome, r.outcome, r.body)
}

// send posts body to path with header (repeated values are sent as
// repeated lines) and reads the whole answer. contentLength -1 sends the
// body chunked.
func (f *hostile) send(t *testing.T, path string, header http.Header, body string, contentLength int64) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, io.NopCloser(strings.NewReader(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = contentLength
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading the answer: %v", path, err)
	}
	return reply{resp.StatusCode, resp.Header.Get(proxy.HeaderOutcome), string(b)}
}

func (f *hostile) post(t *testing.T, path string, header http.Header, body string) reply {
	t.Helper()
	return f.send(t, path, header, body, int64(len(body)))
}

// expectSettled fails unless no claim is held: every claim taken was
// completed or released. It waits, with a deadline, for handlers that
// finish after their client has gone.
func (f *hostile) expectSettled(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(loadMargin)
	for {
		_, _, held := f.store.account()
		if len(held) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("claims still held after %s: %q", loadMargin, held)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// expectUntouched fails unless the store was never called.
func (f *hostile) expectUntouched(t *testing.T, what string) {
	t.Helper()
	if calls, _, _ := f.store.account(); calls != 0 {
		t.Errorf("%s: the store was called %d times, want never", what, calls)
	}
}

// nextOutcome waits for the next handler to return and gives its outcome.
func (f *hostile) nextOutcome(t *testing.T) string {
	t.Helper()
	select {
	case o := <-f.outcomes:
		return o
	case <-time.After(loadMargin):
		t.Fatalf("no handler returned within %s", loadMargin)
		return ""
	}
}

func expectReply(t *testing.T, what string, got reply, status int, outcome string) {
	t.Helper()
	if got.status != status || got.outcome != outcome {
		t.Errorf("%s: answered %s; want %d %q", what, got, status, outcome)
	}
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestHostileMalformedJSON(t *testing.T) {
	for _, tc := range []struct {
		name      string
		onMissing policy.MissingIDPolicy
		status    int
		outcome   string
	}{
		{"default: forwarded unchecked", policy.ForwardMissingID, 200, "forwarded-unchecked"},
		{"ON_MISSING_ID=reject: 400", policy.RejectMissingID, 400, "missing-id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHostile(t, "/stripe=stripe,/json=json:data.id", providers.Options{}, proxy.Config{OnMissingID: tc.onMissing})
			bodies := []string{
				`{"id":"evt_1"`,              // truncated
				`{"id":"evt_1"} trailing`,    // trailing garbage
				`{"id":"evt_1",}`,            // trailing comma
				"\xff\xfe{\"id\":\"evt_1\"}", // not UTF-8 before the document
				``,                           // empty
				`[{"id":"evt_1"}]`,           // valid JSON, no ID at the path
			}
			for _, body := range bodies {
				for _, path := range []string{"/stripe", "/json"} {
					if path == "/json" {
						body = strings.ReplaceAll(body, `{"id"`, `{"data":{"id"`)
					}
					expectReply(t, fmt.Sprintf("%s %q", path, body), f.post(t, path, nil, body), tc.status, tc.outcome)
				}
			}
			f.expectUntouched(t, "malformed JSON")
			processed, _ := f.up.seen()
			if want := 2 * len(bodies); tc.onMissing == policy.ForwardMissingID && len(processed) != want {
				t.Errorf("the app processed %d requests, want %d", len(processed), want)
			} else if tc.onMissing == policy.RejectMissingID && len(processed) != 0 {
				t.Errorf("the app processed %d rejected requests", len(processed))
			}
		})
	}
}

func TestHostileIDs(t *testing.T) {
	long := strings.Repeat("x", providers.MaxIDLen+1)
	for _, tc := range []struct {
		name    string
		path    string
		header  http.Header
		body    string
		status  int
		outcome string
	}{
		{"empty header ID", "/gh", hdr("X-GitHub-Delivery", ""), "{}", 200, "forwarded-unchecked"},
		{"blank header ID", "/gh", hdr("X-GitHub-Delivery", "   "), "{}", 200, "forwarded-unchecked"},
		{"empty JSON ID", "/stripe", nil, `{"id":""}`, 200, "forwarded-unchecked"},
		{"blank JSON ID", "/stripe", nil, `{"id":" \t "}`, 200, "forwarded-unchecked"},
		{"513-byte header ID", "/gh", hdr("X-GitHub-Delivery", long), "{}", 400, "invalid-id"},
		{"513-byte JSON ID", "/stripe", nil, `{"id":"` + long + `"}`, 400, "invalid-id"},
		{"513-byte numeric JSON ID", "/stripe", nil, `{"id":` + strings.Repeat("9", 513) + `}`, 400, "invalid-id"},
		{"tab in a header ID", "/gh", hdr("X-GitHub-Delivery", "a\tb"), "{}", 400, "invalid-id"},
		{"C1 control U+0085 in a header ID", "/gh", hdr("X-GitHub-Delivery", "a\u0085b"), "{}", 400, "invalid-id"},
		{"NUL in a JSON ID", "/stripe", nil, `{"id":"evt\u0000"}`, 400, "invalid-id"},
		{"U+0001 in a JSON ID", "/stripe", nil, `{"id":"evt\u0001x"}`, 400, "invalid-id"},
		{"DEL in a JSON ID", "/stripe", nil, `{"id":"evt\u007fx"}`, 400, "invalid-id"},
		{"newline in a JSON ID", "/stripe", nil, `{"id":"evt\nx"}`, 400, "invalid-id"},
		{"C1 control U+009F in a JSON ID", "/stripe", nil, `{"id":"evt\u009fx"}`, 400, "invalid-id"},
		{"two different ID headers", "/gh", hdr("X-GitHub-Delivery", "d1", "X-GitHub-Delivery", "d2"), "{}", 400, "invalid-id"},
		{"two equal ID headers", "/gh", hdr("X-GitHub-Delivery", "d3", "X-GitHub-Delivery", "d3"), "{}", 200, "forwarded"},
		{"two ID headers equal but for spaces", "/gh", hdr("X-GitHub-Delivery", "d4", "X-GitHub-Delivery", " d4 "), "{}", 200, "forwarded"},
		{"512-byte ID", "/gh", hdr("X-GitHub-Delivery", long[1:]), "{}", 200, "forwarded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHostile(t, "/gh=github,/stripe=stripe", providers.Options{}, proxy.Config{})
			got := f.post(t, tc.path, tc.header, tc.body)
			expectReply(t, tc.name, got, tc.status, tc.outcome)
			processed, _ := f.up.seen()
			if forwarded := len(processed) == 1; forwarded != (tc.status == 200) {
				t.Errorf("the app processed %d requests; want 1 if answered 200, else 0", len(processed))
			}
			wantClaims := 0
			if tc.outcome == "forwarded" {
				wantClaims = 1
			}
			if _, claims, _ := f.store.account(); claims != wantClaims {
				t.Errorf("%d claims taken, want %d", claims, wantClaims)
			}
			f.expectSettled(t)
			if tc.outcome == "forwarded" {
				expectReply(t, "the same delivery again", f.post(t, tc.path, tc.header, tc.body), 200, "duplicate")
			}
		})
	}
}

func TestHostileBodyTooLarge(t *testing.T) {
	const limit = 64
	big := `{"id":"evt_big","pad":"` + strings.Repeat("x", 4*limit) + `"}`
	for _, tc := range []struct {
		name          string
		routes        string
		secret        bool
		fingerprint   bool
		path          string
		header        http.Header
		contentLength int64
	}{
		{"JSON route, Content-Length", "/stripe=stripe", false, false, "/stripe", nil, int64(len(big))},
		{"JSON route, chunked", "/stripe=stripe", false, false, "/stripe", nil, -1},
		{"signed header route, Content-Length", "/gh=github", true, false, "/gh", hdr("X-GitHub-Delivery", "big1", "X-Hub-Signature-256", "sha256="+strings.Repeat("0", 64)), int64(len(big))},
		{"header route with DEDUP_BODY_FINGERPRINT, chunked", "/gh=github", false, true, "/gh", hdr("X-GitHub-Delivery", "big2"), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := providers.Options{}
			if tc.secret {
				opts.Secrets = map[string][]string{"github": {"s3cret"}}
			}
			f := newHostile(t, tc.routes, opts, proxy.Config{MaxBodyBytes: limit, BodyFingerprint: tc.fingerprint})
			expectReply(t, tc.name, f.send(t, tc.path, tc.header, big, tc.contentLength), 413, "too-large")
			f.expectUntouched(t, tc.name)
			if processed, readErrors := f.up.seen(); len(processed)+readErrors != 0 {
				t.Errorf("the oversized body reached the app")
			}
		})
	}
}

// rawExchange writes head on a fresh connection to addr, while reading the
// answer (a server that refuses a request may close before reading all of
// it), and returns the status line's code.
func rawExchange(t *testing.T, addr string, head string) (int, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(loadMargin))
	written := make(chan struct{})
	go func() {
		defer close(written)
		_, _ = io.WriteString(c, head)
	}()
	defer func() { c.Close(); <-written }()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// manyHeaders is a request head on path with n headers of about 20 bytes.
func manyHeaders(path string, n int, extra string) string {
	var b strings.Builder
	b.WriteString("POST " + path + " HTTP/1.1\r\nHost: hostile.test\r\nContent-Length: 2\r\n" + extra)
	for i := range n {
		fmt.Fprintf(&b, "X-Pad-%05d: padding\r\n", i)
	}
	b.WriteString("\r\n{}")
	return b.String()
}

func TestHostileThousandsOfHeaders(t *testing.T) {
	f := newHostile(t, "/gh=github", providers.Options{}, proxy.Config{})
	addr := f.srv.Listener.Addr().String()

	// 5000 headers of ~22 bytes: 110 KB, over MAX_HEADER_BYTES (64 KiB,
	// which net/http enforces with 4 KiB of slack).
	status, err := rawExchange(t, addr, manyHeaders("/gh", 5000, "X-GitHub-Delivery: many1\r\n"))
	if err != nil || status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("5000 headers: status %d (%v), want 431 from net/http", status, err)
	}
	f.expectUntouched(t, "5000 headers")

	// 2000 headers, 44 KB: under the limit, an ordinary delivery.
	status, err = rawExchange(t, addr, manyHeaders("/gh", 2000, "X-GitHub-Delivery: many2\r\n"))
	if err != nil || status != http.StatusOK {
		t.Errorf("2000 headers: status %d (%v), want 200", status, err)
	}
	if o := f.nextOutcome(t); o != "forwarded" {
		t.Errorf("2000 headers: outcome %q, want forwarded", o)
	}
	if processed, _ := f.up.seen(); len(processed) != 1 {
		t.Errorf("the app processed %d requests, want the one under the limit", len(processed))
	}
	f.expectSettled(t)
}

func TestHostileControlCharacterInRawHeader(t *testing.T) {
	f := newHostile(t, "/gh=github", providers.Options{}, proxy.Config{})
	// Go's client refuses to send it; a raw one can. net/http refuses it
	// before the proxy sees it.
	status, err := rawExchange(t, f.srv.Listener.Addr().String(),
		"POST /gh HTTP/1.1\r\nHost: hostile.test\r\nX-GitHub-Delivery: a\x01b\r\nContent-Length: 2\r\n\r\n{}")
	if err != nil || status != http.StatusBadRequest {
		t.Errorf("status %d (%v), want 400 from net/http", status, err)
	}
	f.expectUntouched(t, "a raw control character")
}

// TestHostileDisconnectMidBody: a sender that announces 1000 bytes, sends
// 10 and hangs up leaves no claim held, and nothing complete reaches the
// app, so the complete delivery that follows is forwarded.
func TestHostileDisconnectMidBody(t *testing.T) {
	for _, tc := range []struct {
		name, path, idHeader, body string
		// outcome is the proxy's answer, which nobody is left to read.
		outcome string
		// claims is how many claims the broken request took (and gave up).
		claims int
	}{
		{"header route (streamed)", "/gh", "X-GitHub-Delivery: dc1\r\n", `{"n":1}`, "bad-request", 1},
		{"JSON route (buffered)", "/stripe", "", `{"id":"evt_dc1"}`, "bad-request", 0},
		{"header route with DEDUP_BODY_FINGERPRINT (buffered)", "/fp", "X-GitHub-Delivery: dc2\r\n", `{"n":2}`, "bad-request", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHostile(t, "/gh=github,/stripe=stripe,/fp=github", providers.Options{}, proxy.Config{BodyFingerprint: tc.path == "/fp"})
			c, err := net.Dial("tcp", f.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.WriteString(c, "POST "+tc.path+" HTTP/1.1\r\nHost: hostile.test\r\n"+tc.idHeader+
				"Content-Length: 1000\r\n\r\n"+`{"id":"evt`)
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			if o := f.nextOutcome(t); o != tc.outcome {
				t.Errorf("the broken request's outcome %q, want %q", o, tc.outcome)
			}
			f.expectSettled(t)
			if _, claims, _ := f.store.account(); claims != tc.claims {
				t.Errorf("%d claims taken, want %d", claims, tc.claims)
			}
			if processed, _ := f.up.seen(); len(processed) != 0 {
				t.Fatalf("the app processed %q from a sender that hung up mid-body", processed)
			}

			h := hdr()
			if name, value, ok := strings.Cut(strings.TrimSpace(tc.idHeader), ": "); ok {
				h.Set(name, value)
			}
			expectReply(t, "the complete delivery", f.post(t, tc.path, h, tc.body), 200, "forwarded")
			if processed, _ := f.up.seen(); len(processed) != 1 || !strings.HasSuffix(processed[0], " "+tc.body) {
				t.Errorf("the app processed %q, want the complete delivery once", processed)
			}
		})
	}
}

// TestHostileStreamedFingerprint: a body streamed to the app is fingerprinted
// whole, so the completed record holds the SHA-256 of what was sent.
func TestHostileStreamedFingerprint(t *testing.T) {
	f := newHostile(t, "/gh=github", providers.Options{}, proxy.Config{})
	body := strings.Repeat("streamed body ", 10000)
	expectReply(t, "streamed delivery", f.post(t, "/gh", hdr("X-GitHub-Delivery", "sf1"), body), 200, "forwarded")
	rec := pollSettled(t, f.store, "test:github:sf1")
	if rec.State != dedup.Completed {
		t.Fatalf("record %v, want completed", rec.State)
	}
	if rec.Result.Fingerprint != sha256.Sum256([]byte(body)) {
		t.Errorf("fingerprint %x, want the body's SHA-256", rec.Result.Fingerprint)
	}
}

// TestHostileSlowHeaders: the public server, as the binary builds it, cuts a
// client off once its headers take longer than ReadHeaderTimeout.
func TestHostileSlowHeaders(t *testing.T) {
	const readHeaderTimeout = 200 * time.Millisecond
	f := newHostile(t, "/gh=github", providers.Options{}, proxy.Config{}, map[string]string{"READ_HEADER_TIMEOUT": readHeaderTimeout.String()})
	c, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// A slowloris: the head one byte every 20ms, never finished in time.
	head := "POST /gh HTTP/1.1\r\nHost: hostile.test\r\nX-GitHub-Delivery: slow1\r\n" + strings.Repeat("X-Slow: 1\r\n", 100)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		pace := time.NewTicker(20 * time.Millisecond)
		defer pace.Stop()
		for i := range len(head) {
			if _, err := io.WriteString(c, head[i:i+1]); err != nil {
				return
			}
			<-pace.C
		}
	}()
	defer func() { c.Close(); <-stopped }()
	// net/http closes the connection, with or without a 400 first
	// (depending on where in a line the deadline falls), once
	// READ_HEADER_TIMEOUT is over.
	_ = c.SetReadDeadline(time.Now().Add(readHeaderTimeout + loadMargin))
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("read %q, then %v; want the server to close a connection whose headers never end", got, err)
	}
	if len(got) > 0 && !bytes.HasPrefix(got, []byte("HTTP/1.1 400 ")) {
		t.Errorf("answered %q; want nothing, or 400 from net/http", got)
	}
	f.expectUntouched(t, "slow headers")
}

// TestRefusedWebhookLogsTargetedID: a webhook refused before its ID was
// claimed (here a forged signature) is logged with the ID its headers
// carry, so an operator sees which event a forger targeted.
func TestRefusedWebhookLogsTargetedID(t *testing.T) {
	f := newHostile(t, "/gh=github,/stripe=stripe", providers.Options{Secrets: map[string][]string{"github": {"s"}, "stripe": {"whsec_s"}}}, proxy.Config{})
	h := http.Header{"X-Github-Delivery": {"evt-forged"}, "X-Github-Event": {"push"}, "X-Hub-Signature-256": {"sha256=00"}}
	if r := f.post(t, "/gh", h, "{}"); r.status != http.StatusUnauthorized {
		t.Fatalf("forged GitHub webhook: %v, want 401", r)
	}
	f.nextOutcome(t)
	// Stripe's ID is in the body, which is not read for the log line.
	if r := f.post(t, "/stripe", http.Header{"Stripe-Signature": {"t=1,v1=00"}}, `{"id":"evt_body"}`); r.status != http.StatusUnauthorized {
		t.Fatalf("forged Stripe webhook: %v, want 401", r)
	}
	f.nextOutcome(t)
	want := map[string]string{"/gh": "evt-forged", "/stripe": ""}
	for _, e := range f.logs.FilterMessage("webhook").All() {
		route := e.ContextMap()["route"].(string)
		if got := e.ContextMap()["event_id"]; got != want[route] {
			t.Errorf("route %s: logged event_id %q, want %q", route, got, want[route])
		}
		delete(want, route)
	}
	if len(want) > 0 {
		t.Errorf("no log line for %v", want)
	}
}
