// Package pgtest runs real PostgreSQL servers for tests, on free loopback
// ports with throw-away data directories, as internal/testenv/redistest runs
// redis-server: one server a test package shares (Shared, started by the
// first test that needs it), or one a test owns and may stop and start
// (New).
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// installHint is how to get PostgreSQL, said whenever it cannot be found
// or started.
const installHint = "install it with `apt-get install -y postgresql` (Debian/Ubuntu), or run `make deps`"

// Server is one postgres process. Its data directory and port outlive
// Stop, so Start brings the same database back, as after an outage.
type Server struct {
	// Port is the loopback port it listens on.
	Port int

	bin string // the directory of initdb and postgres
	dir string // the data directory, and the log beside it
	// cred runs initdb and postgres as an unprivileged user when this
	// process is root (PostgreSQL refuses to run as root); nil otherwise.
	cred *syscall.Credential
	opts Options
	cmd  *exec.Cmd
	dbs  atomic.Int64
}

// Options are how a server runs.
type Options struct {
	// Durable runs the server as deployed: fsync, synchronous_commit
	// and full_page_writes on (PostgreSQL's defaults), so each commit
	// waits for its WAL to reach the disk. Without it the server runs
	// as the tests want it, fsync off (see start): a commit reaches the
	// kernel, not the disk, which is all an outage the tests stage
	// needs, and much faster on a disk whose flush takes milliseconds.
	// The load benchmark runs both, to show what the flush costs.
	Durable bool
	// Settings are more of the server's settings, each name=value as
	// postgres -c takes it, for a test that needs the server otherwise.
	Settings []string
}

// New starts a server of its own for t and stops it, removing its data,
// when t ends.
func New(t testing.TB) *Server {
	t.Helper()
	s, err := Start(redistest.FreePort(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Shared is a server started on first use and shared by the tests of a
// package; the package's TestMain calls Close after m.Run.
type Shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Get returns the shared server, starting it on the first call.
func (sh *Shared) Get(t testing.TB) *Server {
	t.Helper()
	sh.once.Do(func() { sh.srv, sh.err = Start(redistest.FreePort(t)) })
	if sh.err != nil {
		t.Fatal(sh.err)
	}
	return sh.srv
}

// Close stops the shared server, if it was started, and removes its data.
func (sh *Shared) Close() {
	if sh.srv != nil {
		sh.srv.Close()
	}
}

// Start initialises a data directory and starts postgres on port, as the
// tests run it (fsync off), waiting until it accepts connections.
func Start(port int) (*Server, error) { return StartWith(port, Options{}) }

// StartWith is Start with options: StartWith(port, Options{Durable:
// true}) starts a server as deployed.
func StartWith(port int, o Options) (*Server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	cred, err := unprivileged()
	if err != nil {
		return nil, err
	}
	// Not t.TempDir: its parents are private to root, and postgres may
	// run as another user who must reach the directory.
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{Port: port, bin: bin, dir: dir, cred: cred, opts: o}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			s.removeDir()
			return nil, fmt.Errorf("pgtest: hand %s to the postgres user: %w", dir, err)
		}
	}
	// --no-sync only spares initdb's own flush of the new cluster: a
	// durable server's commits are flushed all the same.
	initdb := s.command("initdb", "-D", s.dataDir(), "-U", "postgres", "--auth=trust", "--no-sync", "--encoding=UTF8", "--locale=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		s.removeDir()
		return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	if err := s.start(); err != nil {
		s.removeDir()
		return nil, err
	}
	return s, nil
}

// findBin finds the directory of initdb and postgres: pg_config's
// bindir, Debian's versioned directories (newest first), then PATH.
func findBin() (string, error) {
	var dirs []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	versioned, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(versioned, func(i, j int) bool { return pgVersion(versioned[i]) > pgVersion(versioned[j]) })
	dirs = append(dirs, versioned...)
	if p, err := exec.LookPath("postgres"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("pgtest: PostgreSQL's initdb and postgres not found (pg_config --bindir, /usr/lib/postgresql/*/bin, PATH): %s", installHint)
}

func pgVersion(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// unprivileged is who runs postgres when this process is root: the
// postgres user the Debian package creates, or nobody.
func unprivileged() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("pgtest: running as root, and neither a postgres nor a nobody user exists to run PostgreSQL as (it refuses to run as root)")
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

// LogFile is the path of the server's log.
func (s *Server) LogFile() string { return filepath.Join(s.dir, "postgres.log") }

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	// HOME and the locale of root's environment are no business of the
	// postgres user's.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C", "HOME=" + s.dir}
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

// start runs postgres in the foreground of a child process, with no Unix
// socket (the system's socket directory may not be writable by the user
// it runs as) and, unless Durable, without fsync: nothing outlives the
// test, and a commit still reaches the kernel before it is acknowledged,
// so an outage (Stop) loses nothing. (synchronous_commit stays on: off,
// the last commits before a Stop would be lost.)
func (s *Server) start() error {
	log, err := os.OpenFile(s.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	args := []string{"-D", s.dataDir(),
		"-c", "listen_addresses=127.0.0.1", "-c", "port=" + strconv.Itoa(s.Port),
		"-c", "unix_socket_directories=", "-c", "max_connections=200", "-c", "shared_buffers=32MB"}
	for _, setting := range append(s.durability(), s.opts.Settings...) {
		args = append(args, "-c", setting)
	}
	cmd := s.command("postgres", args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w (%s)", err, installHint)
	}
	s.cmd = cmd
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		out, _ := os.ReadFile(s.LogFile())
		return fmt.Errorf("pgtest: postgres on port %d: %w\n%s", s.Port, err, out)
	}
	return nil
}

// durability is the server's flush settings. A durable server names
// PostgreSQL's defaults too, so that no postgresql.conf could change them.
func (s *Server) durability() []string {
	if s.opts.Durable {
		return []string{"fsync=on", "synchronous_commit=on", "full_page_writes=on"}
	}
	return []string{"fsync=off", "full_page_writes=off"}
}

// waitReady polls until the server accepts a connection, and returns the
// error of closing that connection, or the last error once ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	var closeErr error
	if err := redistest.Poll(ctx, func() error {
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err != nil {
			return err
		}
		closeErr = conn.Close(ctx)
		return nil
	}); err != nil {
		return err
	}
	return closeErr
}

// Start starts a stopped server again on the same port and data.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if s.cmd != nil {
		return
	}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// Stop shuts the server down at once (an immediate shutdown: no
// checkpoint, connections cut, as in an outage) and waits for it to exit.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGQUIT)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}

// Pause stops the server's processes (SIGSTOP to the postmaster and its
// backends): connections stay open but nothing is answered, as with a
// database stuck on a slow disk.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.signalAll(t, syscall.SIGSTOP)
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.signalAll(t, syscall.SIGCONT)
}

// signalAll signals the postmaster and its children. They are not one
// process group (each backend calls setsid), so the children are found
// in /proc by their parent; the postmaster goes first when stopping, so
// no new backend appears meanwhile.
func (s *Server) signalAll(t testing.TB, sig syscall.Signal) {
	t.Helper()
	pid := s.cmd.Process.Pid
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatal(err)
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range stats {
		b, err := os.ReadFile(stat)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after
		// its closing parenthesis.
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(stat)))
			_ = syscall.Kill(child, sig)
		}
	}
}

// Close stops the server and removes its data directory.
func (s *Server) Close() {
	s.Stop()
	s.removeDir()
}

func (s *Server) removeDir() { _ = os.RemoveAll(s.dir) }

// URL is the postgres:// URL of database on this server.
func (s *Server) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)), database)
}

// NewDatabase creates an empty database of its own for t (a copy of
// template1, a few milliseconds) and returns its URL.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("test_%d", s.dbs.Add(1))
	s.asPostgres(t, func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			return fmt.Errorf("create database %s: %w", name, err)
		}
		return nil
	})
	return s.URL(name)
}

// PID is the postmaster's process ID (every backend and auxiliary process
// is its child), for a caller that measures or places the server; 0 while
// stopped.
func (s *Server) PID() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Executable is the path of the postgres binary Start runs, for a caller
// that reports its version.
func Executable() (string, error) {
	bin, err := findBin()
	if err != nil {
		return "", err
	}
	return filepath.Join(bin, "postgres"), nil
}
