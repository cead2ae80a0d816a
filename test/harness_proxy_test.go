package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// Bounds on waiting for the process. They are deadlines, not sleeps: each
// wait polls and returns as soon as the condition holds.
const (
	startDeadline = 20 * time.Second // until /healthz answers 200
	exitDeadline  = 10 * time.Second // for a process told to stop, or failing its config
	// storeStateDeadline bounds how long /readyz may take to reflect a
	// store outage or recovery: SPEC says 5 s; the rest is slack for a
	// busy machine.
	storeStateDeadline = 5*time.Second + 2*time.Second
)

// proxy is one running webhook-dedup process.
type proxy struct {
	t testing.TB
	// Addr is the host:port where webhooks arrive (LISTEN_ADDR).
	Addr string
	// Admin is the host:port of /healthz and /readyz (ADMIN_ADDR).
	Admin string

	// cfg is the process's configuration, loaded from its environment as
	// it loads it (nil, with cfgErr, when it does not load), at its start:
	// what bounds derives the tests' deadlines from.
	cfg    *config.Config
	cfgErr error

	cmd  *exec.Cmd
	logs *lockedBuffer
	done chan struct{} // closed once the process has exited
}

// startProxy runs the binary with env (LISTEN_ADDR and ADMIN_ADDR default to
// free loopback ports, LOG_FORMAT to json), waits until /healthz answers, and
// stops it when the test ends, printing its logs if the test failed.
func startProxy(t testing.TB, env map[string]string) *proxy {
	t.Helper()
	return startProxyBinary(t, binary, env)
}

// startProxyBinary is startProxy with the executable bin.
func startProxyBinary(t testing.TB, bin string, env map[string]string) *proxy {
	t.Helper()
	p := launchBinary(t, bin, env)
	p.waitHealthy()
	t.Cleanup(func() {
		p.Stop() // so that the logs are complete; launch's cleanup prints them on failure
		checkLogs(t, p.Logs())
	})
	return p
}

// checkLogs asserts the proxy logged JSON lines only (LOG_FORMAT=json), and
// never a secret or a body.
func checkLogs(t testing.TB, logs string) {
	t.Helper()
	for _, sign := range crashSigns {
		if strings.Contains(logs, sign) {
			return // reported by launch; its report is not JSON either
		}
	}
	var bad []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			bad = append(bad, line)
		}
	}
	if len(bad) > 0 {
		t.Errorf("LOG_FORMAT=json, but %d log lines are not JSON objects, the first: %.300q", len(bad), bad[0])
	}
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Errorf("the logs contain the secret %q", s)
		}
	}
	if strings.Contains(logs, bodyCanary) {
		t.Errorf("the logs contain a request body (found %q)", bodyCanary)
	}
}

// launch starts the process without waiting for it to serve.
func launch(t testing.TB, env map[string]string, args ...string) *proxy {
	t.Helper()
	return launchBinary(t, binary, env, args...)
}

// launchBinary is launch with the executable bin.
func launchBinary(t testing.TB, bin string, env map[string]string, args ...string) *proxy {
	t.Helper()
	// GORACE: a -race binary otherwise sleeps a second at every exit
	// (atexit_sleep_ms), which the suite's hundreds of stops add up.
	full := map[string]string{"LOG_FORMAT": "json", "GORACE": "atexit_sleep_ms=0"}
	for k, v := range env {
		full[k] = v
	}
	if _, ok := full["LISTEN_ADDR"]; !ok {
		full["LISTEN_ADDR"] = redistest.FreeAddr(t)
	}
	if _, ok := full["ADMIN_ADDR"]; !ok {
		admin := redistest.FreeAddr(t)
		for admin == full["LISTEN_ADDR"] {
			admin = redistest.FreeAddr(t)
		}
		full["ADMIN_ADDR"] = admin
	}

	p := &proxy{t: t, Addr: full["LISTEN_ADDR"], Admin: full["ADMIN_ADDR"], logs: &lockedBuffer{}, done: make(chan struct{})}
	// A clean environment: nothing from the developer's shell (a stray
	// REDIS_URL, say) leaks into what a test configures.
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = envList(full)
	p.cmd.Stdout = p.logs
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	p.cfg, p.cfgErr = config.Load(full)
	t.Cleanup(func() {
		p.Stop()
		for _, sign := range crashSigns {
			if strings.Contains(p.logs.String(), sign) {
				t.Errorf("webhook-dedup wrote %q", sign)
			}
		}
		if t.Failed() {
			t.Logf("webhook-dedup (listen %s, admin %s, env %v) exited %s; its output:\n%s",
				p.Addr, p.Admin, envList(env), p.cmd.ProcessState, p.logs.String())
		}
	})
	return p
}

// crashSigns in the process's output fail the test: a data race (the
// binary is built with -race when the tests run with -race) or a panic in
// a handler.
var crashSigns = []string{"WARNING: DATA RACE", "http: panic serving", "panic: ", "SIGQUIT: quit"}

func envList(env map[string]string) []string {
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	return list
}

// URL is the proxy's public URL for path (which may carry a query).
func (p *proxy) URL(path string) string { return "http://" + p.Addr + path }

// Logs is everything the process wrote so far (stderr and stdout).
func (p *proxy) Logs() string { return p.logs.String() }

func (p *proxy) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitHealthy polls /healthz until it answers 200, failing the test if the
// process exits or the deadline passes first.
func (p *proxy) waitHealthy() {
	p.t.Helper()
	if err := p.pollAdmin("/healthz", http.StatusOK, startDeadline); err != nil {
		p.t.Fatalf("webhook-dedup never became healthy: %v\n%s", err, p.Logs())
	}
}

// awaitReady waits for /readyz to answer 200, or fails the test. A store
// may still be setting up when the process serves: PostgreSQL creates its
// tables within STORE_TIMEOUT at start, else retries every second, with
// /readyz 503 meanwhile, and a send then is answered 503.
func (p *proxy) awaitReady(t *testing.T) {
	t.Helper()
	if err := p.pollAdmin("/readyz", http.StatusOK, storeStateDeadline); err != nil {
		t.Fatalf("readyz before the run: %v", err)
	}
}

// pollAdmin polls an admin path until it answers want, or the deadline passes.
func (p *proxy) pollAdmin(path string, want int, deadline time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	stop := time.After(deadline)
	last := "no answer yet"
	for {
		resp, err := client.Get("http://" + p.Admin + path)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
			last = "status " + strconv.Itoa(resp.StatusCode)
		} else {
			last = err.Error()
		}
		select {
		case <-p.done:
			return fmt.Errorf("process exited (%s) while waiting for %s %d; last: %s", p.cmd.ProcessState, path, want, last)
		case <-stop:
			return fmt.Errorf("GET %s did not answer %d within %s; last: %s", path, want, deadline, last)
		case <-tick.C:
		}
	}
}

// Stop sends SIGTERM and waits; after exitDeadline it sends SIGKILL.
func (p *proxy) Stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(exitDeadline):
		p.t.Logf("webhook-dedup did not exit within %s of SIGTERM; killing it", exitDeadline)
		p.Kill()
	}
}

// Terminate sends SIGTERM and returns at once.
func (p *proxy) Terminate() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
}

// Kill sends SIGKILL, as a crash or an OOM kill would, and waits for the exit.
func (p *proxy) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// waitExit waits for the process to exit on its own and returns its exit
// status, or -1 (after killing it) if it is still running at the deadline.
func (p *proxy) waitExit(deadline time.Duration) int {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(deadline):
		p.Kill()
		return -1
	}
}

// lockedBuffer is a bytes.Buffer safe for the process's writers and the
// test's readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// answer is what the proxy said to one request.
type answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// Dedup is the X-Webhook-Dedup header ("" when absent).
func (a answer) Dedup() string { return a.Header.Get("X-Webhook-Dedup") }

func (a answer) String() string {
	return fmt.Sprintf("%d X-Webhook-Dedup=%q Retry-After=%q body=%.200q", a.Status, a.Dedup(), a.Header.Get("Retry-After"), a.Body)
}

// retryAfter parses Retry-After as whole seconds.
func (a answer) retryAfter() (int, error) {
	v := a.Header.Get("Retry-After")
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("Retry-After %q is not whole seconds: %w", v, err)
	}
	return n, nil
}

// newClient is an HTTP client for senders: generous limits, so that only the
// proxy's behaviour shapes what a test sees. Its idle connections are closed
// before the proxy stops (cleanups run last-in first-out), as a proxy
// draining on SIGTERM waits up to 5s for connections that never carried a
// request.
func newClient(t testing.TB) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 256
	tr.MaxIdleConnsPerHost = 256
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// do sends req and reads the whole answer.
func do(client *http.Client, req *http.Request) (answer, error) {
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, fmt.Errorf("read answer: %w", err)
	}
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// errProcessRunning is returned by runToExit when the process did not exit.
var errProcessRunning = errors.New("process still running at the deadline")

// runToExit runs the binary with env and args until it exits on its own and
// returns its exit status and output. LISTEN_ADDR and ADMIN_ADDR default to
// free loopback ports, so that a binary wrongly accepting a bad config never
// binds a public address.
func runToExit(t testing.TB, env map[string]string, args ...string) (int, string, error) {
	t.Helper()
	p := launch(t, env, args...)
	code := p.waitExit(exitDeadline)
	if code == -1 {
		return code, p.Logs(), errProcessRunning
	}
	return code, p.Logs(), nil
}
