package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/pgtest"
)

// machine is what the report says about where it ran.
type machine struct {
	cpu, kernel, tools string
	cores              int
	loadBefore         string
	loadAfter          string
	elapsed            time.Duration
}

func describeMachine(nginx string) machine {
	m := machine{cpu: "unknown CPU", cores: runtime.NumCPU(), loadBefore: loadAverage()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if v, ok := strings.CutPrefix(s.Text(), "model name"); ok {
				m.cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(b))
	}
	var tools []string
	argvs := [][]string{{"wrk", "-v"}, {nginx, "-v"}, {"redis-server", "--version"}}
	if pg, err := pgtest.Executable(); err == nil {
		argvs = append(argvs, []string{pg, "--version"})
	}
	for _, argv := range argvs {
		out, _ := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		line, _, _ = strings.Cut(line, " Copyright")
		line, _, _ = strings.Cut(line, " sha=")
		tools = append(tools, strings.TrimPrefix(line, "nginx version: "))
	}
	m.tools = strings.Join(append(tools, runtime.Version()), "; ")
	return m
}

// loadAverage is the 1, 5 and 15 minute load average: other work on a
// shared machine shows here.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// row is one configuration summarised over its repeats.
type row struct {
	c      config
	rps    []float64
	p50    []float64 // µs, -c32
	p99    []float64
	p999   []float64
	single []float64 // µs, p50 at one connection
	added  []float64 // µs, single minus the upstream's single, per repeat
	overGo []float64 // µs, single minus the Go proxy's single, per repeat
	cpu    []float64 // server CPU seconds per 10k requests
	store  []float64 // the store server's CPU seconds per 10k requests
	peak   int64     // max VmHWM over repeats
	// records is how many events the embedded store held in the repeat
	// of the highest peak (each forwarded event leaves one record).
	records int64
	errs    int64
	xGo     []float64 // requests/s ratio to the Go proxy, per repeat
	xNginx  []float64
	cpuXGo  []float64 // CPU per request ratio to the Go proxy, per repeat
	core    []float64 // CPU seconds per 10k requests of every server on the servers' core
	capXGo  []float64 // requests per core-second ratio to the Go proxy, per repeat
	repeats int
}

func summarise(configs []config, results map[string][]result) []row {
	byRepeat := func(name string, rep int) (result, bool) {
		for _, r := range results[name] {
			if r.Repeat == rep {
				return r, true
			}
		}
		return result{}, false
	}
	var rows []row
	for _, c := range configs {
		rw := row{c: c}
		for _, r := range results[c.name] {
			rw.repeats++
			rps := r.Load.rps()
			rw.rps = append(rw.rps, rps)
			rw.p50 = append(rw.p50, float64(r.Load.P50))
			rw.p99 = append(rw.p99, float64(r.Load.P99))
			rw.p999 = append(rw.p999, float64(r.Load.P999))
			rw.single = append(rw.single, float64(r.Single.P50))
			cpu := per10k(r.ServerCPU, r.Load.Requests)
			rw.cpu = append(rw.cpu, cpu)
			core := coreCPU(r)
			rw.core = append(rw.core, core)
			if c.store.ownServer() {
				rw.store = append(rw.store, per10k(r.StoreCPU, r.Load.Requests))
			}
			if r.PeakRSS > rw.peak {
				rw.peak = r.PeakRSS
				if c.store == embedded {
					rw.records = r.Outcomes["forwarded"]
				}
			}
			rw.errs += r.Load.errors() + r.Single.errors()
			if up, ok := byRepeat(nameUpstream, r.Repeat); ok {
				rw.added = append(rw.added, float64(r.Single.P50-up.Single.P50))
			}
			if g, ok := byRepeat(nameGoProxy, r.Repeat); ok {
				rw.xGo = append(rw.xGo, rps/g.Load.rps())
				rw.overGo = append(rw.overGo, float64(r.Single.P50-g.Single.P50))
				rw.cpuXGo = append(rw.cpuXGo, cpu/per10k(g.ServerCPU, g.Load.Requests))
				rw.capXGo = append(rw.capXGo, coreCPU(g)/core)
			}
			if n, ok := byRepeat(nameNginx, r.Repeat); ok {
				rw.xNginx = append(rw.xNginx, rps/n.Load.rps())
			}
		}
		rows = append(rows, rw)
	}
	return rows
}

// coreCPU is the CPU seconds per 10k requests of everything serving them
// (proxy, upstream, the store's server): how much of the servers' core a request takes,
// whatever share of it other work on the machine left.
func coreCPU(r result) float64 {
	return per10k(r.ServerCPU+r.StoreCPU+r.UpstreamCPU, r.Load.Requests)
}

func per10k(cpu time.Duration, requests int64) float64 {
	if requests == 0 {
		return 0
	}
	return cpu.Seconds() / float64(requests) * 1e4
}

func report(w io.Writer, o options, m machine, configs []config, results map[string][]result) {
	rows := summarise(configs, results)
	fmt.Fprintf(w, "Machine: %d cores, %s, Linux %s; %s.\n", m.cores, m.cpu, m.kernel, m.tools)
	fmt.Fprintf(w, "Method: servers (upstream, proxy, store server) pinned to CPU %s, wrk to CPU %s, at nice %d; `wrk -t1 -c%d -d%s` after a %s warm-up, then `wrk -t1 -c1 -d%s`; %d repeat(s) in rotating order, fresh servers for every run. Load average %s before, %s after; %s in all.\n\n",
		orNone(o.serverCPUs), orNone(o.loadCPUs), o.nice, o.conns, durationArg(o.duration), durationArg(o.warmup), durationArg(o.latencyDur),
		o.repeats, m.loadBefore, m.loadAfter, m.elapsed.Round(time.Second))

	fmt.Fprintln(w, "| configuration | req/s median (min–max) | p50 | p99 | p99.9 | p50 @1 conn | added p50 @1 conn | proxy CPU s/10k req | store CPU s/10k req | core CPU s/10k req | peak RSS | × Go proxy | × nginx | × Go proxy per core-second |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		name := r.c.name
		if r.errs > 0 {
			name += fmt.Sprintf(" (%d errors)", r.errs)
		}
		storeCPU := "–"
		if len(r.store) > 0 {
			storeCPU = fmt.Sprintf("%.3f", median(r.store))
		}
		fmt.Fprintf(w, "| %s | %s (%s–%s) | %s | %s | %s | %s | %s | %.3f | %s | %.3f | %.1f MiB | %s | %s | %s |\n",
			name, thousands(median(r.rps)), thousands(slices.Min(r.rps)), thousands(slices.Max(r.rps)),
			ms(median(r.p50)), ms(median(r.p99)), ms(median(r.p999)), ms(median(r.single)),
			signedMS(r.added), median(r.cpu), storeCPU, median(r.core), float64(r.peak)/(1<<20),
			ratio(r.xGo, r.c.name == nameGoProxy), ratio(r.xNginx, r.c.name == nameNginx), ratio(r.capXGo, r.c.name == nameGoProxy))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Latencies in ms. Added p50 is over the upstream alone, at one connection, in the same repeat. Proxy CPU is user+system time of the process wrk talks to (the upstream itself in the first row; master and worker for nginx) during the 32-connection run; store CPU is the store server's (redis-server; PostgreSQL's postmaster and all its backends), – when the store is inside the proxy; core CPU adds the upstream's and the store server's, all on the servers' core. Redis runs without persistence, PostgreSQL with fsync off (a commit reaches the kernel, not the disk), in every row. Peak RSS is the proxy's VmHWM, the highest over the repeats. Ratios are medians of the per-repeat ratios: of requests/s, and in the last column of requests per core-second (the inverse of core CPU), which other work on a shared machine disturbs far less.")
	fmt.Fprintln(w)
	asyncTable(w, rows)
	cacheTable(w, rows)
	targets(w, rows)
}

// asyncTable puts the async rows beside their sync counterparts: the
// sender's answer time and the events accepted per second behind a slow
// app, and the accept path's throughput and CPU per request on a fast one.
func asyncTable(w io.Writer, rows []row) {
	pairs := []struct{ what, sync, async string }{
		{"slow app (200 ms), Redis", "webhook-dedup, Redis, unique JSON, slow app (200 ms)", "webhook-dedup, Redis, unique JSON, slow app (200 ms), async"},
		{"slow app (200 ms), async on DATA_DIR", "webhook-dedup, Redis, unique JSON, slow app (200 ms)", "webhook-dedup, DATA_DIR, unique JSON, slow app (200 ms), async"},
		{"fast app, Redis", "webhook-dedup, Redis, unique JSON", "webhook-dedup, Redis, unique JSON, async"},
		{"fast app, DATA_DIR", "webhook-dedup, DATA_DIR, unique JSON", "webhook-dedup, DATA_DIR, unique JSON, async"},
		{"fast app, PostgreSQL", "webhook-dedup, PostgreSQL, unique JSON", "webhook-dedup, PostgreSQL, unique JSON, async"},
	}
	goRow := findRow(rows, nameGoProxy)
	var lines []string
	for _, p := range pairs {
		sr, ar := findRow(rows, p.sync), findRow(rows, p.async)
		if sr == nil || ar == nil {
			continue
		}
		goSingle := "–"
		if goRow != nil {
			goSingle = ms(median(goRow.single))
		}
		lines = append(lines, fmt.Sprintf("| %s | %s / %s | %s / %s | %s / %s | %.2f× | %s | %s / %s / %s | %.3f / %.3f |",
			p.what, ms(median(sr.p50)), ms(median(ar.p50)), ms(median(sr.p99)), ms(median(ar.p99)),
			thousands(median(sr.rps)), thousands(median(ar.rps)), median(ar.rps)/median(sr.rps), ratio(ar.xGo, false),
			ms(median(sr.single)), ms(median(ar.single)), goSingle, median(sr.cpu), median(ar.cpu)))
	}
	printTable(w, "| async delivery (sync / async) | sender p50 ms | sender p99 ms | accepted events/s | async × sync | async × Go proxy | p50 @1 conn ms (sync / async / Go proxy) | proxy CPU s/10k req |", lines,
		"At 32 connections, but for the p50 at one connection. Async answers 202 once the event is queued; the background deliveries (at most DELIVERY_CONCURRENCY=16 at once) run during the measurement, so their CPU is in the proxy's (and the store server's). On the fast app, the backlog the 32-connection run leaves is delivered before the one-connection run starts, so that one measures the accept path, not a core busy delivering (behind the slow app the deliveries mostly wait, and the backlog would take minutes). The Go proxy forwards to the fast app; on the slow app's rows its ratio compares accepting with forwarding.")
}

// cacheTable puts the duplicate rows with CACHE_SIZE beside those without,
// on each store server: what the cache saves a duplicate.
func cacheTable(w io.Writer, rows []row) {
	var lines []string
	for _, s := range []store{redisStore, postgresStore} {
		without := fmt.Sprintf("webhook-dedup, %s, duplicate JSON", s)
		sr, cr := findRow(rows, without), findRow(rows, fmt.Sprintf("%s, CACHE_SIZE=%d", without, cacheSize))
		if sr == nil || cr == nil {
			continue
		}
		lines = append(lines, fmt.Sprintf("| %s | %s / %s | %.2f× | %s / %s | %.3f / %.3f | %.3f / %.3f |",
			s, thousands(median(sr.rps)), thousands(median(cr.rps)), median(cr.rps)/median(sr.rps),
			ms(median(sr.p50)), ms(median(cr.p50)), median(sr.cpu), median(cr.cpu), median(sr.store), median(cr.store)))
	}
	printTable(w, fmt.Sprintf("| duplicates (without / with CACHE_SIZE=%d) | answered/s | cache × none | p50 ms | proxy CPU s/10k req | store CPU s/10k req |", cacheSize), lines,
		"At 32 connections, every request a copy of one completed event: with the cache, the proxy answers it from its own memory, without a round trip to the store.")
}

// printTable prints a Markdown table of header and lines, then note, or
// nothing when there are no lines (their rows did not run).
func printTable(w io.Writer, header string, lines []string, note string) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, "|"+strings.Repeat("---|", strings.Count(header, "|")-1))
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, note)
	fmt.Fprintln(w)
}

// findRow is the row named name that has run, or nil.
func findRow(rows []row, name string) *row {
	for i := range rows {
		if rows[i].c.name == name && rows[i].repeats > 0 {
			return &rows[i]
		}
	}
	return nil
}

// targets compares the rows with the performance targets that
// docs/performance.md lists.
func targets(w io.Writer, rows []row) {
	type target struct {
		what, row string
		measure   func(r *row) (string, bool)
	}
	// Throughput targets are judged on requests/s, as they are set;
	// the per-core-second ratio is shown beside it.
	atLeast := func(want float64) func(r *row) (string, bool) {
		return func(r *row) (string, bool) {
			v := median(r.xGo)
			return fmt.Sprintf("%.2f× (per core-second %.2f×)", v, median(r.capXGo)), v >= want
		}
	}
	cpuAtMost := func(want float64) func(r *row) (string, bool) {
		return func(r *row) (string, bool) {
			v := median(r.cpuXGo)
			return fmt.Sprintf("%.2f×", v), v <= want
		}
	}
	ts := []target{
		{"unique JSON on Redis ≥ 0.70× the Go proxy", "webhook-dedup, Redis, unique JSON", atLeast(0.70)},
		{"header-sourced on Redis ≥ 0.70×", "webhook-dedup, Redis, unique header", atLeast(0.70)},
		{fmt.Sprintf("duplicates on Redis with CACHE_SIZE ≥ 2.7× (nginx: %s)", ratio(nginxRow(rows).xGo, false)),
			fmt.Sprintf("webhook-dedup, Redis, duplicate JSON, CACHE_SIZE=%d", cacheSize), atLeast(2.7)},
		{"unique JSON on the embedded store ≥ 0.95×", "webhook-dedup, embedded, unique JSON", atLeast(0.95)},
		{"proxy CPU per first-seen request ≤ 1.35× the Go proxy's (Redis, unique JSON)", "webhook-dedup, Redis, unique JSON", cpuAtMost(1.35)},
		{"added p50 at one connection ≤ +0.10 ms over the Go proxy (Redis, unique JSON)", "webhook-dedup, Redis, unique JSON", func(r *row) (string, bool) {
			v := median(r.overGo)
			return signedMS([]float64{v}) + " ms", v <= 100
		}},
		{"the proxy's own peak RSS ≤ 24 MiB (embedded, unique JSON)", "webhook-dedup, embedded, unique JSON", func(r *row) (string, bool) {
			own := r.peak - r.records*embeddedRecordPeak
			return fmt.Sprintf("%.1f MiB: %.1f MiB peak less %s records × %d B", float64(own)/(1<<20), float64(r.peak)/(1<<20), thousands(float64(r.records)), embeddedRecordPeak),
				own <= 24<<20
		}},
	}
	fmt.Fprintln(w, "| target | measured | met |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, t := range ts {
		r := findRow(rows, t.row)
		if r == nil || len(r.xGo) == 0 {
			continue
		}
		v, ok := t.measure(r)
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.what, v, yes(ok))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "The embedded store's records are counted apart from the proxy's own memory: each holds %d bytes of heap (TestMemoryRecordSize), and with Go's default GOGC=100 the heap may grow to twice what is live before a collection, so each adds up to %d bytes to the peak.\n", embeddedRecordPeak/2, embeddedRecordPeak)
}

// embeddedRecordPeak is what one record of the embedded store adds to the
// proxy's peak memory: its 103 bytes of heap (TestMemoryRecordSize in
// dedup), twice, for the garbage collector's headroom at GOGC=100.
const embeddedRecordPeak = 2 * 103

// nginxRow is the nginx row, or an empty one.
func nginxRow(rows []row) *row {
	if r := findRow(rows, nameNginx); r != nil {
		return r
	}
	return &row{}
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ms formats microseconds as milliseconds.
func ms[T int64 | float64](us T) string { return fmt.Sprintf("%.3f", float64(us)/1000) }

func signedMS(us []float64) string {
	if len(us) == 0 {
		return "–"
	}
	return fmt.Sprintf("%+.3f", median(us)/1000)
}

func ratio(v []float64, self bool) string {
	if self || len(v) == 0 {
		return "1"
	}
	return fmt.Sprintf("%.2f×", median(v))
}

func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
