package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/diskstore"
	"github.com/webhook-dedup/webhook-dedup/dedup/redisstore"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/timing"
)

// exitCode is the status main would exit with for err.
func exitCode(err error) int { return ExitCode(err) }

func runCommand(env map[string]string, args ...string) (string, error) {
	var out bytes.Buffer
	err := run(context.Background(), args, env, &out, io.Discard)
	return out.String(), err
}

// syncBuffer collects the serving process's logs from its goroutines.
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

// loadMargin is what a wait in these tests allows beyond the timeouts the
// server under test is configured with: the time a loaded 2-core machine
// (the suite under the race detector, beside other work) may add to
// starting it, scheduling it and its store, and to Redis's client
// dialing again (about a second) once Redis is back: timing.LoadMargin,
// the one guess the module's tests make, stated once.
const loadMargin = timing.LoadMargin

// TestHealthcheckAgainstServe runs the real server in this process and the
// healthcheck command against its admin port: exit 0 while the store
// answers, 1 while Redis is down, 0 again once it is back, 1 once the
// server has stopped.
func TestHealthcheckAgainstServe(t *testing.T) {
	srv := redistest.New(t)
	app := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(app.Close)
	admin := redistest.FreeAddr(t)
	env := map[string]string{
		"UPSTREAM_URL": app.URL,
		"LISTEN_ADDR":  redistest.FreeAddr(t),
		"ADMIN_ADDR":   admin,
		"REDIS_URL":    srv.URL(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	served := make(chan error, 1)
	go func() { served <- run(ctx, nil, env, io.Discard, logs) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serve's logs:\n%s", logs)
		}
	})

	// healthcheck only needs ADMIN_ADDR; ":port" means this host.
	_, port, _ := net.SplitHostPort(admin)
	check := map[string]string{"ADMIN_ADDR": ":" + port}
	// /readyz pings the store at each request: nothing configured stands
	// between the store's state and its answer but that one ping.
	awaitHealthcheck := func(want int, what string) {
		t.Helper()
		deadline := time.Now().Add(loadMargin)
		for {
			out, err := runCommand(check, "healthcheck")
			code := exitCode(err)
			if code == want {
				if want == 0 && out != "ready\n" {
					t.Errorf("%s: healthcheck printed %q, want \"ready\"", what, out)
				}
				return
			}
			select {
			case err := <-served:
				t.Fatalf("%s: serve returned %v while waiting for healthcheck to exit %d", what, err, want)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: healthcheck exits %d (%v), want %d within %s", what, code, err, want, loadMargin)
			}
			time.Sleep(50 * time.Millisecond) // polling interval
		}
	}
	awaitHealthcheck(0, "serving with Redis up")
	srv.Stop()
	awaitHealthcheck(1, "Redis down")
	srv.Start()
	awaitHealthcheck(0, "Redis back")

	cancel()
	cfg, err := config.Load(env)
	if err != nil {
		t.Fatal(err)
	}
	// Its shutdown: SHUTDOWN_DELAY serving, SHUTDOWN_TIMEOUT draining.
	stopped := cfg.ShutdownDelay + cfg.ShutdownTimeout + loadMargin
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve after cancel: %v", err)
		}
	case <-time.After(stopped):
		t.Fatalf("serve did not return within %s of its context ending", stopped)
	}
	if _, err := runCommand(check, "healthcheck"); exitCode(err) != 1 {
		t.Errorf("healthcheck with nothing listening: %v, want exit status 1", err)
	}
}

func TestHealthcheckAnswers(t *testing.T) {
	status := http.StatusOK
	var mu sync.Mutex
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path != "/readyz" {
			t.Errorf("healthcheck asked for %s, want /readyz", r.URL.Path)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(admin.Close)
	addr := strings.TrimPrefix(admin.URL, "http://")
	_, port, _ := net.SplitHostPort(addr)

	for _, tc := range []struct {
		adminAddr string
		status    int
		want      int
	}{
		{addr, http.StatusOK, 0},
		{":" + port, http.StatusOK, 0},
		{"0.0.0.0:" + port, http.StatusOK, 0}, // a wildcard listener is reached on loopback
		{addr, http.StatusServiceUnavailable, 1},
		{addr, http.StatusInternalServerError, 1},
		{"no-port", http.StatusOK, 2},
	} {
		mu.Lock()
		status = tc.status
		mu.Unlock()
		out, err := runCommand(map[string]string{"ADMIN_ADDR": tc.adminAddr}, "healthcheck")
		if code := exitCode(err); code != tc.want {
			t.Errorf("ADMIN_ADDR=%s, /readyz %d: healthcheck %v (exit %d), want exit %d", tc.adminAddr, tc.status, err, code, tc.want)
		}
		if tc.want == 2 && !strings.Contains(err.Error(), "ADMIN_ADDR") {
			t.Errorf("ADMIN_ADDR=%s: %v; want the error to name ADMIN_ADDR", tc.adminAddr, err)
		}
		if (tc.want == 0) != (out == "ready\n") {
			t.Errorf("ADMIN_ADDR=%s, /readyz %d: printed %q", tc.adminAddr, tc.status, out)
		}
	}
}

func TestInspectAndForget(t *testing.T) {
	srv := redistest.New(t)
	st, err := redisstore.Open(redisstore.Config{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	const prefix = "cli-test:"
	env := map[string]string{"REDIS_URL": srv.URL(), "KEY_PREFIX": prefix}

	inflight, _, err := st.Claim(ctx, prefix+"/hooks/acme:acme-1", 30*time.Second)
	if err != nil || inflight.Token == "" {
		t.Fatalf("claim: %+v %v", inflight, err)
	}
	done, _, err := st.Claim(ctx, prefix+"stripe:evt_1", 30*time.Second)
	if err != nil || done.Token == "" {
		t.Fatalf("claim: %+v %v", done, err)
	}
	if err := st.Complete(ctx, done, dedup.Result{Status: 202}, time.Hour); err != nil {
		t.Fatal(err)
	}

	inspect := func(ns, id string) map[string]any {
		t.Helper()
		out, err := runCommand(env, "inspect", ns, id)
		if err != nil {
			t.Fatalf("inspect %s %s: %v", ns, id, err)
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("inspect %s %s printed %q: %v", ns, id, out, err)
		}
		if doc["namespace"] != ns || doc["id"] != id {
			t.Errorf("inspect %s %s: %v names another event", ns, id, doc)
		}
		return doc
	}
	if doc := inspect("/hooks/acme", "acme-1"); doc["state"] != "in-flight" || doc["status"] != nil ||
		!between(doc["ttl_seconds"], 25, 30) || !between(doc["age_seconds"], 0, 5) {
		t.Errorf("inspect of an in-flight claim: %v; want state in-flight, no status, ttl_seconds ≤ 30, age_seconds ≥ 0", doc)
	}
	if doc := inspect("stripe", "evt_1"); doc["state"] != "completed" || doc["status"] != 202.0 ||
		!between(doc["ttl_seconds"], 3595, 3600) || !between(doc["age_seconds"], 0, 5) {
		t.Errorf("inspect of a completed record: %v; want state completed, status 202, ttl_seconds ≤ 3600", doc)
	}

	// One rendering: inspect prints what the admin API answers.
	api := httptest.NewServer(admin.New(admin.Config{Store: st, Gatherer: prometheus.NewRegistry(), Token: "t", KeyPrefix: prefix}))
	t.Cleanup(api.Close)
	req, _ := http.NewRequest(http.MethodGet, api.URL+"/v1/events/stripe/evt_1", nil)
	req.Header.Set("Authorization", "Bearer t")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	fromAPI, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fromCLI, err := runCommand(env, "inspect", "stripe", "evt_1")
	if err != nil {
		t.Fatal(err)
	}
	if a, c := withoutClock(t, fromAPI), withoutClock(t, []byte(fromCLI)); a != c {
		t.Errorf("inspect printed\n%s\nthe admin API answered\n%s", fromCLI, fromAPI)
	}

	for _, tc := range []struct{ ns, id, key string }{
		{"/hooks/acme", "acme-1", prefix + "/hooks/acme:acme-1"},
		{"stripe", "evt_1", prefix + "stripe:evt_1"},
	} {
		out, err := runCommand(env, "forget", tc.ns, tc.id)
		if err != nil || !strings.Contains(out, "forgot") {
			t.Errorf("forget %s %s: %q, %v", tc.ns, tc.id, out, err)
		}
		if _, err := st.Lookup(ctx, tc.key); !errors.Is(err, dedup.ErrNotFound) {
			t.Errorf("after forget %s %s, Lookup: %v, want dedup.ErrNotFound", tc.ns, tc.id, err)
		}
		for _, cmd := range []string{"forget", "inspect"} {
			_, err := runCommand(env, cmd, tc.ns, tc.id)
			if exitCode(err) != 1 || !strings.Contains(err.Error(), "no record") {
				t.Errorf("%s of a forgotten event: %v; want exit 1 saying there is no record", cmd, err)
			}
		}
	}

	srv.Stop()
	if _, err := runCommand(env, "inspect", "stripe", "evt_1"); exitCode(err) != 1 {
		t.Errorf("inspect with Redis down: %v, want exit status 1", err)
	}
}

// withoutClock is a JSON event with its ages replaced by "T", keys in their
// order, after checking that the ages are rounded to the millisecond.
func withoutClock(t *testing.T, doc []byte) string {
	t.Helper()
	clock := regexp.MustCompile(`"(age|ttl)_seconds":([0-9.]+)`)
	for _, m := range clock.FindAllSubmatch(doc, -1) {
		if _, frac, ok := strings.Cut(string(m[2]), "."); ok && len(frac) > 3 {
			t.Errorf("%s_seconds %s: want milliseconds at most", m[1], m[2])
		}
	}
	return clock.ReplaceAllString(string(doc), `"${1}_seconds":T`)
}

func between(v any, lo, hi float64) bool {
	f, ok := v.(float64)
	return ok && f >= lo && f <= hi
}

func TestStoreCommandUsage(t *testing.T) {
	redisURL := "redis://" + redistest.FreeAddr(t) // nothing listens: usage errors come first
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string // in the error
	}{
		{"inspect without arguments", map[string]string{"REDIS_URL": redisURL}, []string{"inspect"}, "inspect wants NAMESPACE ID, got 0 arguments"},
		{"inspect with one argument", map[string]string{"REDIS_URL": redisURL}, []string{"inspect", "stripe"}, "inspect wants NAMESPACE ID, got 1 argument"},
		{"forget with three arguments", map[string]string{"REDIS_URL": redisURL}, []string{"forget", "stripe", "evt_1", "x"}, "forget wants NAMESPACE ID, got 3 arguments"},
		{"no REDIS_URL", nil, []string{"inspect", "stripe", "evt_1"}, "REDIS_URL"},
		{"bad REDIS_URL", map[string]string{"REDIS_URL": "http://127.0.0.1:1"}, []string{"forget", "stripe", "evt_1"}, "REDIS_URL"},
		{"unknown command", nil, []string{"inpsect", "stripe", "evt_1"}, "unknown command"},
	} {
		_, err := runCommand(tc.env, tc.args...)
		if exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want exit status 2 with %q", tc.name, err, tc.want)
		}
	}
}

// TestInspectAndForgetThroughAdminAPI: with ADMIN_TOKEN, inspect and
// forget reach the running proxy's admin API, so they work on the
// embedded store, which no other process can reach.
func TestInspectAndForgetThroughAdminAPI(t *testing.T) {
	var mu sync.Mutex
	effects := 0
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		effects++
		mu.Unlock()
	}))
	t.Cleanup(app.Close)
	listen, adminAddr := redistest.FreeAddr(t), redistest.FreeAddr(t)
	env := map[string]string{"UPSTREAM_URL": app.URL, "LISTEN_ADDR": listen, "ADMIN_ADDR": adminAddr, "ADMIN_TOKEN": "s3cret"}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	served := make(chan error, 1)
	go func() { served <- run(ctx, nil, env, io.Discard, logs) }()
	t.Cleanup(func() {
		cancel()
		<-served
		if t.Failed() {
			t.Logf("serve's logs:\n%s", logs)
		}
	})
	deliver := func() string {
		t.Helper()
		deadline := time.Now().Add(loadMargin) // until the proxy has started: nothing configured bounds it
		for {
			req, _ := http.NewRequest(http.MethodPost, "http://"+listen+"/", strings.NewReader("{}"))
			req.Header.Set("X-GitHub-Delivery", "d-1")
			req.Header.Set("X-GitHub-Event", "push")
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				return resp.Header.Get("X-Webhook-Dedup")
			}
			if time.Now().After(deadline) {
				t.Fatalf("the proxy does not answer: %v", err)
			}
			time.Sleep(20 * time.Millisecond) // polling for the listener
		}
	}
	if got := deliver(); got != "forwarded" {
		t.Fatalf("first delivery: %q, want forwarded", got)
	}
	cli := map[string]string{"ADMIN_ADDR": adminAddr, "ADMIN_TOKEN": "s3cret"}
	// The proxy answers the sender first and completes the record right
	// after: in-flight until then.
	deadline := time.Now().Add(loadMargin)
	for {
		out, err := runCommand(cli, "inspect", "github", "d-1")
		if err == nil && strings.Contains(out, `"state":"completed"`) {
			break
		}
		if err != nil || !strings.Contains(out, `"state":"in-flight"`) || time.Now().After(deadline) {
			t.Fatalf("inspect through the admin API: %q, %v; want completed (in-flight only until the completion)", out, err)
		}
		time.Sleep(10 * time.Millisecond) // polling for the completion
	}
	if out, err := runCommand(cli, "forget", "github", "d-1"); err != nil || !strings.Contains(out, "forgot") {
		t.Fatalf("forget through the admin API: %q, %v", out, err)
	}
	if _, err := runCommand(cli, "inspect", "github", "d-1"); exitCode(err) != 1 || !strings.Contains(err.Error(), "no record") {
		t.Errorf("inspect after forget: %v, want exit 1 saying there is no record", err)
	}
	if got := deliver(); got != "forwarded" {
		t.Errorf("delivery after forget: %q, want forwarded again", got)
	}
	bad := map[string]string{"ADMIN_ADDR": adminAddr, "ADMIN_TOKEN": "wrong"}
	if _, err := runCommand(bad, "inspect", "github", "d-1"); exitCode(err) != 2 || !strings.Contains(err.Error(), "ADMIN_TOKEN") {
		t.Errorf("inspect with a wrong token: %v, want exit 2 naming ADMIN_TOKEN", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if effects != 2 {
		t.Errorf("the app saw %d deliveries, want 2 (once, and once after forget)", effects)
	}
}

// TestCommandsOnALockedDataDir: without ADMIN_TOKEN, a command on a
// DATA_DIR whose file the running proxy holds says to ask that proxy
// (ADMIN_TOKEN, ADMIN_ADDR) rather than only that the file is locked.
func TestCommandsOnALockedDataDir(t *testing.T) {
	dir := t.TempDir()
	held, err := diskstore.Open(diskstore.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Close() })
	env := map[string]string{"DATA_DIR": dir}
	for _, args := range [][]string{{"inspect", "github", "d-1"}, {"forget", "github", "d-1"}, {"dead-letters"}, {"retry", "github", "d-1"}} {
		_, err := runCommand(env, args...)
		if !errors.Is(err, diskstore.ErrLocked) || !strings.Contains(err.Error(), "set ADMIN_TOKEN (and ADMIN_ADDR") || exitCode(err) != 2 {
			t.Errorf("%s on a held DATA_DIR: %v (exit %d); want diskstore.ErrLocked, exit 2, saying to set ADMIN_TOKEN and ADMIN_ADDR", args[0], err, exitCode(err))
		}
	}
}
