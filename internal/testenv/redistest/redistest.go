// Package redistest runs real redis-server processes for tests, on free
// loopback ports, the way go-redis's own test suite does: one server, a
// server speaking only TLS, a Redis Cluster, or a master watched by
// Sentinels.
package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process owned by a test.
type Server struct {
	// Addr is host:port; it stays the same across Stop and Start.
	Addr string
	// Args are extra redis-server arguments, given again on every Start.
	Args []string
	// TLS, if not nil, is how a client reaches this server: it listens
	// for TLS connections only. Nil: plain TCP.
	TLS *tls.Config

	t   testing.TB
	dir string
	// conf, if not empty, is a configuration file given before the
	// arguments (Sentinel needs one it can rewrite).
	conf string
	cmd  *exec.Cmd
}

// New starts redis-server on a free port, waits until it answers PING, and
// stops it when the test ends. It fails the test, saying how to install
// Redis, when redis-server is not on PATH: never a silent skip.
func New(t testing.TB, args ...string) *Server {
	t.Helper()
	s := newServer(t, args...)
	s.Start()
	return s
}

// newServer prepares a server on a free port, in a directory of its own
// that outlives Stop, without starting it.
func newServer(t testing.TB, args ...string) *Server {
	t.Helper()
	needRedis(t)
	s := &Server{Addr: FreeAddr(t), Args: args, t: t, dir: t.TempDir()}
	t.Cleanup(s.Stop)
	return s
}

func needRedis(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found on PATH (%v): install it with `apt-get install -y redis-server redis-tools`, or run `make test`", bin, err)
		}
	}
}

// Start (re)starts the server on its address; it returns once PING answers.
// Restarted, it keeps its directory (a cluster node finds its nodes.conf
// there) but no data: nothing is saved.
func (s *Server) Start() {
	s.t.Helper()
	if s.cmd != nil {
		return
	}
	_, port, _ := net.SplitHostPort(s.Addr)
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	if s.TLS != nil {
		args = append(args, "--port", "0", "--tls-port", port)
	} else {
		args = append(args, "--port", port)
	}
	// A replica's first sync starts at once, instead of after the 5s
	// Redis waits by default for more replicas to share it.
	args = append(args, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0",
		"--dir", s.dir, "--logfile", s.LogFile())
	args = append(args, s.Args...)
	cmd := exec.Command("redis-server", args...)
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.cmd = cmd
	if err := waitPing(s.Addr, s.TLS, 10*time.Second); err != nil {
		s.Stop()
		log, _ := os.ReadFile(s.LogFile())
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

// Shutdown stops the server as a restart does (SIGTERM): Redis writes and
// fsyncs its append-only file before it exits, so everything it
// acknowledged is there when it starts again. Stop (SIGKILL) gives no such
// chance: with appendfsync everysec, Redis answers a write before it is in
// the file while an fsync is still under way (a slow disk), and a kill
// then loses it.
func (s *Server) Shutdown() {
	s.t.Helper()
	if s.cmd == nil {
		return
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatalf("shut down redis-server on %s: %v", s.Addr, err)
	}
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Pause stops the process (SIGSTOP) without killing it: its connections
// stay open but nothing it is sent is read or answered, as with a server
// stuck on a slow disk or a long GC-like stall.
func (s *Server) Pause() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("pause redis-server on %s: %v", s.Addr, err)
	}
}

// Resume continues a paused process (SIGCONT).
func (s *Server) Resume() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatalf("resume redis-server on %s: %v", s.Addr, err)
	}
}

// Running reports whether the process was started and not stopped since.
func (s *Server) Running() bool { return s.cmd != nil }

// LogFile is the path of the server's log.
func (s *Server) LogFile() string { return filepath.Join(s.dir, "redis.log") }

// URL is the redis:// (or, with TLS, rediss://) URL of the server.
func (s *Server) URL() string {
	if s.TLS != nil {
		return "rediss://" + s.Addr
	}
	return "redis://" + s.Addr
}

// Ports handed out are drawn from below the kernel's ephemeral range
// (Linux: 32768-60999, macOS: from 49152): a port picked there could be
// taken by some outgoing connection between the pick and the server's
// bind. A port is handed out once, by one process (see reservePort).
const (
	firstPort = 20000
	lastPort  = 32767
)

var (
	portsMu sync.Mutex
	// portsGiven is process-wide, as the tests that share the loopback
	// interface are.
	portsGiven = map[int]bool{}
	// portLocks hold this process's reservations (see reservePort): open
	// for as long as it lives, as closing one drops its lock.
	portLocks []*os.File
)

// FreeAddr is 127.0.0.1 with a FreePort.
func FreeAddr(t testing.TB) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// FreePort returns a loopback TCP port that was free a moment ago and that
// neither this process nor another test process using this package has
// handed out before.
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := firstPort + rand.IntN(lastPort-firstPort+1)
		if portsGiven[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		if !reservePort(port) {
			continue
		}
		portsGiven[port] = true
		return port
	}
	t.Fatalf("no free loopback port between %d and %d", firstPort, lastPort)
	return 0
}

// reservePort locks port's file in a directory all test processes using
// this package share, and holds the lock until this process exits, however
// it ends (the kernel drops it then). go test runs packages at once, each
// in a process of its own, all drawing from this range, and a port handed
// out is not always bound (between newServer and Start, or while its
// server is stopped): another process could pick it meanwhile, and one of
// the two servers would find it taken and exit, while its Start got the
// PONG of the other. It reports false if another process holds the port;
// true, with no lock, if the directory cannot be used (another user's,
// say): then only portsGiven guards the port.
func reservePort(port int) bool {
	dir := filepath.Join(os.TempDir(), "redistest-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return !errors.Is(err, syscall.EWOULDBLOCK)
	}
	portLocks = append(portLocks, f)
	return true
}

// WaitPing polls addr with the RESP PING command until it answers +PONG or
// the timeout passes.
func WaitPing(addr string, timeout time.Duration) error {
	return waitPing(addr, nil, timeout)
}

func waitPing(addr string, tlsConfig *tls.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return Poll(ctx, func() error { return ping(addr, tlsConfig) })
}

// Poll calls try until it succeeds or ctx ends, and then returns try's
// last error.
func Poll(ctx context.Context, try func() error) error {
	tick := time.NewTicker(20 * time.Millisecond) // polling interval, not a wait for readiness
	defer tick.Stop()
	for {
		err := try()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last: %w", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func ping(addr string, tlsConfig *tls.Config) error {
	var (
		c   net.Conn
		err error
	)
	d := &net.Dialer{Timeout: time.Second}
	if tlsConfig != nil {
		c, err = tls.DialWithDialer(d, "tcp", addr, tlsConfig)
	} else {
		c, err = d.Dial("tcp", addr)
	}
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
