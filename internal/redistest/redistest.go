// Package redistest runs a real redis-server for tests, on a free loopback
// port, the way go-redis's own test suite does.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Server is one redis-server process owned by a test.
type Server struct {
	// Addr is host:port; it stays the same across Stop and Start.
	Addr string
	// Args are extra redis-server arguments given to New.
	Args []string

	t   testing.TB
	dir string
	cmd *exec.Cmd
}

// New starts redis-server on a free port, waits until it answers PING, and
// stops it when the test ends. It fails the test, saying how to install
// Redis, when redis-server is not on PATH: never a silent skip.
func New(t testing.TB, args ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found on PATH (%v): install it with `apt-get install -y redis-server`, or run `make test`", err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t))), Args: args, t: t, dir: t.TempDir()}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Start (re)starts the server on its address; it returns once PING answers.
func (s *Server) Start() {
	s.t.Helper()
	if s.cmd != nil {
		return
	}
	_, port, _ := net.SplitHostPort(s.Addr)
	args := append([]string{
		"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"),
	}, s.Args...)
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.cmd = cmd
	if err := WaitPing(s.Addr, 10*time.Second); err != nil {
		s.Stop()
		log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		s.t.Fatalf("redis-server on %s: %v\n%s", s.Addr, err, log)
	}
}

// Stop kills the server (SIGKILL, as an outage would) and waits for it to exit.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// URL is the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.Addr }

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// WaitPing polls addr with the RESP PING command until it answers +PONG or
// the timeout passes.
func WaitPing(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		last = ping(addr)
		if last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not a wait for readiness
	}
	return fmt.Errorf("no PONG within %s: %w", timeout, last)
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("answered %q", line)
	}
	return nil
}
