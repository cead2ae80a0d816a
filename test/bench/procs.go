package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// proc is a server the tool started, in its own process group.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // the exit status, once done is closed
}

// placed prefixes argv with nice and taskset, when asked: both exec the
// program, so the pid stays the program's own, and its threads inherit the
// CPU list and the priority.
func placed(cpus string, nice int, argv ...string) []string {
	if cpus != "" {
		argv = append([]string{"taskset", "-c", cpus}, argv...)
	}
	if nice != 0 {
		argv = append([]string{"nice", "-n", strconv.Itoa(nice)}, argv...)
	}
	return argv
}

// place moves a running server and its children to cpus at nice, as
// placed does for the servers the tool starts itself: for one started by
// other code (PostgreSQL, by pgtest). Children forked later (PostgreSQL's
// backends, one per connection) inherit both. A child that exits
// meanwhile is no error.
func place(pid int, cpus string, nice int) error {
	for i, p := range append([]int{pid}, children(pid)...) {
		var err error
		if cpus != "" {
			if out, cerr := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(p)).CombinedOutput(); cerr != nil {
				err = fmt.Errorf("taskset -p %d: %w: %s", p, cerr, bytes.TrimSpace(out))
			}
		}
		if err == nil && nice != 0 {
			if serr := syscall.Setpriority(syscall.PRIO_PROCESS, p, nice); serr != nil {
				err = fmt.Errorf("setpriority %d: %w", p, serr)
			}
		}
		if err != nil && i == 0 {
			return err
		}
	}
	return nil
}

// startProc runs argv with its output appended to logPath.
func startProc(name, logPath string, env []string, argv ...string) (*proc, error) {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports an early exit, so a readiness wait can stop at once.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v", p.name, p.err)
	default:
		return nil
	}
}

// stop asks the process to end (SIGTERM), and kills its whole process group
// (nginx's worker too) if it has not within a few seconds.
func (p *proc) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
	}
	// nginx's worker outlives a master killed the hard way.
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitHTTP polls url until it answers want, the process exits, or the
// deadline passes.
func waitHTTP(p *proc, url string, want int) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(15 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if err := p.exited(); err != nil {
			return err
		}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		last = err
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	return fmt.Errorf("%s not ready at %s within 15s: %v", p.name, url, last)
}

// usage is what /proc says about a process and its children.
type usage struct {
	// cpu is user + system time, all threads, dead ones included, and
	// that of reaped children (PostgreSQL's exited backends).
	cpu  time.Duration
	peak int64 // VmHWM, bytes: the resident set's high-water mark
}

// procUsage sums pid's usage and that of its direct children (nginx's
// master and worker).
func procUsage(pid int) (usage, error) {
	var u usage
	pids := append([]int{pid}, children(pid)...)
	for _, p := range pids {
		cpu, err := procCPU(p)
		var peak int64
		if err == nil {
			peak, err = procPeakRSS(p)
		}
		switch {
		case err != nil && p != pid:
			// A child that exited since it was listed (a PostgreSQL
			// backend ending): gone, or a zombie without VmHWM. Its CPU
			// joins the parent's once it is reaped.
			continue
		case err != nil:
			return u, err
		}
		u.cpu += cpu
		u.peak += peak
	}
	return u, nil
}

func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: fields
	// count from the last ')'. utime and stime are fields 14 and 15,
	// cutime and cstime (of the children waited for) 16 and 17.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	var errs []error
	for _, field := range f[11:15] {
		n, err := strconv.ParseInt(field, 10, 64)
		ticks += n
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

func procPeakRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status VmHWM: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	var out []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			out = append(out, child)
		}
	}
	return out
}
