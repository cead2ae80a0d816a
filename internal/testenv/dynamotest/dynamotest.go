// Package dynamotest runs dynalite, an implementation of DynamoDB's API
// (npm package dynalite), for tests, on a free loopback port.
package dynamotest

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// Region and the static credentials below are what a client of the server
// uses: dynalite checks neither, but the SDK signs every request.
const (
	Region          = "us-east-1"
	AccessKeyID     = "dynamotest"
	SecretAccessKey = "dynamotest"
)

// Server is one dynalite process owned by a test, keeping its tables in
// memory.
type Server struct {
	// Endpoint is the server's http:// URL.
	Endpoint string

	cmd *exec.Cmd
	out *lockedBuffer
}

// New starts dynalite on a free loopback port, waits until it answers, and
// stops it when the test ends. It fails the test, saying how to install
// dynalite, when it is not on PATH: never a silent skip.
func New(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("dynalite")
	if err != nil {
		t.Fatalf("dynalite not found on PATH (%v): install it with `npm install -g dynalite@4` (Node.js 20 or later), or run `make test`", err)
	}
	port := strconv.Itoa(redistest.FreePort(t))
	addr := net.JoinHostPort("127.0.0.1", port)
	// Tables are ready at once, instead of after dynalite's default 500ms
	// in CREATING; without --path, everything stays in memory.
	cmd := exec.Command(bin, "--host", "127.0.0.1", "--port", port,
		"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start dynalite: %v", err)
	}
	s := &Server{Endpoint: "http://" + addr, cmd: cmd, out: out}
	t.Cleanup(s.stop)
	if err := waitReady(s.Endpoint, 20*time.Second); err != nil {
		s.stop()
		t.Fatalf("dynalite on %s: %v\n%s", addr, err, out.String())
	}
	return s
}

// Env is the environment that points the AWS SDK (and so the binary) at
// the server.
func (s *Server) Env() []string {
	return []string{
		"AWS_ENDPOINT_URL_DYNAMODB=" + s.Endpoint,
		"AWS_REGION=" + Region,
		"AWS_ACCESS_KEY_ID=" + AccessKeyID,
		"AWS_SECRET_ACCESS_KEY=" + SecretAccessKey,
		// No shared files or instance metadata: only what is above.
		"AWS_CONFIG_FILE=/dev/null",
		"AWS_SHARED_CREDENTIALS_FILE=/dev/null",
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// Setenv sets Env in the test's process environment (t.Setenv), for code
// that loads the SDK's configuration from it.
func (s *Server) Setenv(t testing.TB) {
	t.Helper()
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// Pause stops the process (SIGSTOP) without killing it: its connections
// stay open, and nothing it is sent is answered, as with a DynamoDB
// endpoint that stopped answering behind a live connection.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("pause dynalite on %s: %v", s.Endpoint, err)
	}
}

// Resume continues a paused process (SIGCONT).
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("resume dynalite on %s: %v", s.Endpoint, err)
	}
}

func (s *Server) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// waitReady polls endpoint until it answers HTTP or the timeout passes.
func waitReady(endpoint string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return redistest.Poll(ctx, func() error { return answers(ctx, endpoint) })
}

// answers sends an unsigned, empty request: dynalite answers it (with an
// error) once it listens, with its tables' store open.
func answers(ctx context.Context, endpoint string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, http.NoBody)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// lockedBuffer collects the process's output, for a failure message.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
