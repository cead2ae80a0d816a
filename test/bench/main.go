// Command bench is webhook-dedup's load benchmark: on loopback, it measures
// the upstream alone, a plain httputil.ReverseProxy, nginx and webhook-dedup
// (embedded store, DATA_DIR, Redis and PostgreSQL, the latter with fsync off
// and as deployed; unique, duplicate and header-sourced events, with and
// without the cache, sync and async, and each event sent 3×) side by side,
// with Hookaido as a peer when one is at hand, interleaved and repeated, and
// prints Markdown tables. On the rows that queue (async, Hookaido) it also
// times the delivery of the backlog, and has a paced sender offer half the
// accepted rate to see whether deliveries keep up with the intake.
//
// Servers are pinned to one core and wrk to another, so the load generator
// never competes with what it measures. It prints numbers; it asserts
// nothing.
//
//	go run ./test/bench            # full run (3 repeats), about 20 minutes
//	go run ./test/bench -quick     # one short repeat, about four minutes
//	HOOKAIDO_BIN=/path/to/hookaido go run ./test/bench -quick -only hookaido
//	HOOKAIDO_SRC=/path/to/hookaido-src go run ./test/bench   # built with go build ./cmd/hookaido
//
// test/bench/run.sh installs wrk, nginx, redis-server and PostgreSQL first
// when missing. PostgreSQL is started as the tests start it (internal/testenv/pgtest),
// with fsync off, or as deployed on the rows named fsync=on. Without
// HOOKAIDO_BIN or HOOKAIDO_SRC, Hookaido's rows are skipped, and the report
// says so; nothing is downloaded.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "upstream":
		err = runUpstream(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "goproxy":
		err = runGoProxy(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "pace":
		err = runPace(os.Args[2:])
	default:
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// options are the command line.
type options struct {
	repeats    int
	duration   time.Duration // each 32-connection measurement
	latencyDur time.Duration // each 1-connection measurement
	warmup     time.Duration
	conns      int
	serverCPUs string // taskset list for every server; empty: no pinning
	loadCPUs   string // taskset list for wrk; empty: no pinning
	nice       int    // nice value of servers and wrk; 0: unchanged
	only       string // run only configurations whose name contains one of its |-separated parts
	bin        string // webhook-dedup binary; empty: built from the module
	before     string // another webhook-dedup binary to compare with; empty: none
	raw        string // file for one JSON line per run; empty: none
	from       string // print the report of the runs in this -raw file, run nothing
	keep       bool   // keep the temporary directory (logs, configs)
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "one repeat of short runs (about four minutes): a smoke test, not numbers to quote")
	fs.IntVar(&o.repeats, "repeats", 3, "repeats; each runs every configuration once, in rotating order")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of each 32-connection measurement (whole seconds)")
	fs.DurationVar(&o.latencyDur, "latency-duration", 3*time.Second, "length of each 1-connection measurement (whole seconds)")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "load before measuring, on each fresh server (whole seconds)")
	fs.IntVar(&o.conns, "c", 32, "connections of the throughput measurement")
	fs.StringVar(&o.serverCPUs, "server-cpus", "0", "taskset CPU list for the servers (upstream, proxy, Redis, PostgreSQL); empty: no pinning")
	fs.StringVar(&o.loadCPUs, "load-cpus", "1", "taskset CPU list for wrk; empty: no pinning")
	defaultNice := 0
	if os.Geteuid() == 0 {
		defaultNice = -10
	}
	fs.IntVar(&o.nice, "nice", defaultNice, "nice value for the servers and wrk (negative needs root): a shared machine's other work then disturbs the measurement less; 0 leaves it")
	fs.StringVar(&o.only, "only", "", "run only the configurations whose name contains this, in any case: postgres, fsync=on, cache_size, async, hookaido, \"sent 3\", or one of several parts separated by | (\"DATA_DIR|hookaido\"); the baselines always run, and the Go proxy on the header load with any header row")
	fs.StringVar(&o.bin, "bin", "", "webhook-dedup binary to measure; empty: go build the module")
	fs.StringVar(&o.before, "before", "", "another webhook-dedup binary (an older build) whose rows run interleaved with the others, named \"before, ...\"")
	fs.StringVar(&o.raw, "raw", "", "append one JSON line per run to this file")
	fs.StringVar(&o.from, "from", "", "print the report of the runs recorded in this -raw file, and run nothing")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory with the servers' logs and configs")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["repeats"] {
			o.repeats = 1
		}
		if !set["duration"] {
			o.duration = 2 * time.Second
		}
		if !set["latency-duration"] {
			o.latencyDur = time.Second
		}
	}
	if o.repeats < 1 || o.conns < 1 {
		return o, errors.New("-repeats and -c must be at least 1")
	}
	if runtime.NumCPU() < 2 && (o.serverCPUs != "" || o.loadCPUs != "") {
		fmt.Fprintln(stderr, "bench: fewer than 2 CPUs: not pinning; wrk competes with the servers")
		o.serverCPUs, o.loadCPUs = "", ""
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	if o.from != "" {
		return reportFrom(o, stdout)
	}
	tools := map[string]string{}
	for _, tool := range []string{"wrk", "nginx", "redis-server", "taskset"} {
		path, err := exec.LookPath(tool)
		if err != nil {
			// Debian puts nginx in /usr/sbin, off most users' PATH.
			if _, serr := os.Stat("/usr/sbin/" + tool); serr == nil {
				path, err = "/usr/sbin/"+tool, nil
			}
		}
		if err != nil {
			return fmt.Errorf("%s not found (%v): run test/bench/run.sh, or apt-get install -y wrk nginx redis-server util-linux", tool, err)
		}
		tools[tool] = path
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "webhook-dedup-bench-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(stderr, "bench: keeping", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	bin := o.bin
	if bin == "" {
		if bin, err = build(tmp, stderr); err != nil {
			return err
		}
	}
	var raw io.Writer
	if o.raw != "" {
		f, err := os.OpenFile(o.raw, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		raw = f
	}

	peer, peerNote, err := findHookaido(tmp, stderr)
	if err != nil {
		return err
	}

	b := &bench{opts: o, tmp: tmp, self: self, bin: bin, before: o.before, nginx: tools["nginx"], peer: peer, stderr: stderr}
	configs := selectConfigs(o.only, o.before != "", peer != nil)
	machine := describeMachine(tools["nginx"])
	machine.tmpFS = fsType(tmp)
	if peer != nil {
		machine.peer = peer.version
	} else if len(selectConfigs(o.only, o.before != "", true)) > len(configs) {
		machine.peerSkipped = peerNote
	}
	start := time.Now()
	results := map[string][]result{}
	for rep := range o.repeats {
		// Rotate the order each repeat, so no configuration always runs
		// first, or right after the same neighbour.
		shift := rep * len(configs) / o.repeats
		for i := range configs {
			c := configs[(i+shift)%len(configs)]
			if err := ctx.Err(); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "bench: repeat %d/%d: %s ... ", rep+1, o.repeats, c.name)
			r, err := b.runOne(ctx, c, rep)
			if err != nil {
				fmt.Fprintln(stderr, "failed")
				return fmt.Errorf("%s (repeat %d): %w", c.name, rep+1, err)
			}
			fmt.Fprintf(stderr, "%.0f req/s, p50 %s, 1-conn p50 %s%s\n",
				r.Load.rps(), ms(r.Load.P50), ms(r.Single.P50), r.note())
			results[c.name] = append(results[c.name], r)
			if raw != nil {
				line, _ := json.Marshal(r)
				fmt.Fprintf(raw, "%s\n", line)
			}
		}
	}
	machine.loadAfter = loadAverage()
	machine.elapsed = time.Since(start)
	report(stdout, o, machine, configs, results)
	return nil
}

// reportFrom prints the report of the runs recorded by -raw. The machine
// line describes this machine, and the load average is not known.
func reportFrom(o options, stdout io.Writer) error {
	data, err := os.ReadFile(o.from)
	if err != nil {
		return err
	}
	results := map[string][]result{}
	repeats := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return fmt.Errorf("%s: %w", o.from, err)
		}
		results[r.Config] = append(results[r.Config], r)
		repeats = max(repeats, r.Repeat+1)
	}
	var configs []config
	for _, c := range allConfigs(true) {
		if len(results[c.name]) > 0 {
			configs = append(configs, c)
		}
	}
	o.repeats = repeats
	m := describeMachine("nginx")
	m.loadBefore, m.loadAfter, m.tmpFS = "unknown", "unknown", "a file system not recorded"
	for _, c := range configs {
		if c.server == hookaido {
			m.peer = results[c.name][0].Peer
		}
	}
	report(stdout, o, m, configs, results)
	return nil
}

// build compiles webhook-dedup as a release would be built.
func build(tmp string, stderr io.Writer) (string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if root == "." || root == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		return "", errors.New("run from inside the webhook-dedup module")
	}
	bin := filepath.Join(tmp, "webhook-dedup")
	fmt.Fprintf(stderr, "bench: go build -trimpath -o %s . (in %s)\n", bin, root)
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
}
