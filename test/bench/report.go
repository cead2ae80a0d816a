package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/pgtest"
)

// machine is what the report says about where it ran.
type machine struct {
	cpu, kernel, tools string
	cores              int
	loadBefore         string
	loadAfter          string
	elapsed            time.Duration
	// tmpFS is the file system of the temporary directory, where DATA_DIR,
	// PostgreSQL's data and Hookaido's queue are: on tmpfs a flush costs
	// nothing, and the rows that pay for one would say nothing.
	tmpFS string
	// peer is the Hookaido the rows ran; peerSkipped, why they did not.
	peer, peerSkipped string
}

// fsType names the file system path is on.
func fsType(path string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return "unknown"
	}
	names := map[int64]string{0xEF53: "ext4", 0x01021994: "tmpfs", 0x58465342: "xfs", 0x9123683E: "btrfs", 0x794C7630: "overlayfs", 0x2FC12FC1: "zfs"}
	if name, ok := names[int64(st.Type)]; ok {
		return name
	}
	return fmt.Sprintf("file system 0x%X", st.Type)
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

// toolsLine is the tools' versions, with Hookaido's when its rows ran.
func (m machine) toolsLine() string {
	if m.peer != "" {
		return m.tools + "; " + m.peer
	}
	return m.tools
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
	// xGoLoad and capXGoLoad are xGo and capXGo against the Go proxy on
	// the row's own load, for the loads it has a row of its own on
	// (unique header); empty otherwise.
	xGoLoad, capXGoLoad []float64
	repeats             int
	runs                []result // every repeat's, for the tables of queueing rows
}

// medianOf is the median of f over the row's runs, those where ok.
func (r *row) medianOf(f func(result) (float64, bool)) (float64, bool) {
	var v []float64
	for _, run := range r.runs {
		if x, ok := f(run); ok {
			v = append(v, x)
		}
	}
	return median(v), len(v) > 0
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
			rw.runs = append(rw.runs, r)
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
			if g, ok := byRepeat(nameGoProxyHeader, r.Repeat); ok && c.load == uniqueHeader && c.name != nameGoProxyHeader {
				rw.xGoLoad = append(rw.xGoLoad, rps/g.Load.rps())
				rw.capXGoLoad = append(rw.capXGoLoad, coreCPU(g)/core)
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
	fmt.Fprintf(w, "Machine: %d cores, %s, Linux %s; %s; temporary files on %s.\n", m.cores, m.cpu, m.kernel, m.toolsLine(), m.tmpFS)
	fmt.Fprintf(w, "Method: servers (upstream, proxy, store server) pinned to CPU %s, wrk and the paced sender to CPU %s, at nice %d; `wrk -t1 -c%d -d%s` after a %s warm-up, then `wrk -t1 -c1 -d%s`; on the queueing rows, between the two, the wait for the backlog and, on first-seen events, %s offered at half the accepted rate by a paced sender on %d connections, and the wait for its backlog; %d repeat(s) in rotating order, fresh servers for every run, each started once the disk is quiet (sync, then %d flushed 4 KiB writes in a row within %v; the wait took %s). Load average %s before, %s after; %s in all.\n\n",
		orNone(o.serverCPUs), orNone(o.loadCPUs), o.nice, o.conns, durationArg(o.duration), durationArg(o.warmup), durationArg(o.latencyDur),
		durationArg(o.duration), o.conns, o.repeats, quietRuns, quietWrite, settleRange(results), m.loadBefore, m.loadAfter, m.elapsed.Round(time.Second))
	if m.peerSkipped != "" {
		fmt.Fprintf(w, "%s\n\n", m.peerSkipped)
	}

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
	fmt.Fprintln(w, "Latencies in ms. Added p50 is over the upstream alone, at one connection, in the same repeat. Proxy CPU is user+system time of the process wrk talks to (the upstream itself in the first row; master and worker for nginx) during the 32-connection run; store CPU is the store server's (redis-server; PostgreSQL's postmaster and all its backends), – when the store is inside the proxy; core CPU adds the upstream's and the store server's, all on the servers' core. Redis runs without persistence in every row; PostgreSQL with fsync off (a commit reaches the kernel, not the disk), but in the rows named fsync=on, which run it as deployed (fsync, synchronous_commit and full_page_writes on: each commit waits for its WAL flush). Hookaido runs its SQLite queue as shipped (WAL, synchronous=FULL) and delivers to the same app (push); it does not deduplicate. Peak RSS is the proxy's VmHWM, the highest over the repeats. Ratios are medians of the per-repeat ratios: of requests/s, and in the last column of requests per core-second (the inverse of core CPU), which other work on a shared machine disturbs far less.")
	fmt.Fprintln(w)
	asyncTable(w, rows)
	peerTable(w, rows)
	intakeTable(w, rows)
	orderTable(w, rows)
	cacheTable(w, rows)
	durableTable(w, rows)
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
		{"fast app, PostgreSQL " + fsyncOn, "webhook-dedup, PostgreSQL " + fsyncOn + ", unique JSON", "webhook-dedup, PostgreSQL " + fsyncOn + ", unique JSON, async"},
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
	for _, s := range []string{"Redis", "PostgreSQL", "PostgreSQL " + fsyncOn} {
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

// peerTable puts Hookaido beside the plain proxy and webhook-dedup's async
// rows: what each accepts, how fast the sender is answered, how long the
// backlog takes to reach the app, and how many copies of an event sent
// 3× reach it.
func peerTable(w io.Writer, rows []row) {
	systems := []struct{ what, unique, thrice string }{
		{"Go httputil.ReverseProxy (forwards; no queue, no dedup)", nameGoProxy, nameGoProxyThrice},
		{"webhook-dedup async, DATA_DIR", "webhook-dedup, DATA_DIR, unique JSON, async", "webhook-dedup, DATA_DIR, unique JSON, each sent 3×, async"},
		{"webhook-dedup async, Redis", "webhook-dedup, Redis, unique JSON, async", "webhook-dedup, Redis, unique JSON, each sent 3×, async"},
		{"Hookaido (SQLite WAL, synchronous=FULL; push; no dedup)", nameHookaido, nameHookaidoThrice},
	}
	var lines []string
	anchored := false // Hookaido or a row sent 3× ran: without either, the other rows are in the tables above
	for _, sys := range systems {
		ur, tr := findRow(rows, sys.unique), findRow(rows, sys.thrice)
		anchored = anchored || tr != nil || (ur != nil && ur.c.server == hookaido)
		if ur == nil && tr == nil {
			continue
		}
		accepted, p50, p99, drained, delivered := "–", "–", "–", "–", "–"
		if ur != nil {
			v, _ := ur.medianOf(func(r result) (float64, bool) { return r.Load.acceptedRate(), true })
			accepted, p50, p99 = thousands(v), ms(median(ur.p50)), ms(median(ur.p99))
			v, _ = ur.medianOf(func(r result) (float64, bool) { return r.deliveredRate(), true })
			delivered = thousands(v)
			if v, ok := ur.medianOf(func(r result) (float64, bool) { return r.Drained.Seconds(), r.Drained > 0 }); ok {
				drained = fmt.Sprintf("%.1f", v)
			}
		}
		copies := "–"
		if tr != nil {
			app, _ := tr.medianOf(func(r result) (float64, bool) { return r.copies(), r.Thrice > 0 })
			var sent, reached int64
			for _, r := range tr.runs {
				sent, reached = sent+r.Thrice, reached+r.ThriceReached
			}
			copies = fmt.Sprintf("%.2f (%s of %s events)", app, thousands(float64(reached)), thousands(float64(sent)))
		}
		lines = append(lines, fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s |", sys.what, accepted, p50, p99, drained, delivered, copies))
	}
	if !anchored {
		return
	}
	printTable(w, "| a peer, on the same events | accepted/s | sender p50 ms | sender p99 ms | backlog delivered in s | delivered/s during intake | app's copies per event sent 3× (events that reached it) |", lines,
		fmt.Sprintf("At 32 connections, 2xx answers only. The backlog is delivered when the app has received as many requests as the server has queued events (its own count, warm-up included), timed from the end of the 32-connection run. Delivered/s during intake is the app's requests per second during that run (the plain proxy forwards every request before answering it). Each event sent 3×: in its own row, request n carries copy n/%[1]d mod 3 of event n/%[2]d×%[1]d + n mod %[1]d, so each event's copies go %[1]d requests apart (the second and third mostly while an async proxy still holds the first queued); once the backlog is delivered, the app's requests per event, over the events of the 32-connection run's whole blocks of %[2]d requests (sent 3× for sure) that reached the app, of how many there were over the repeats.", copySpread, 3*copySpread))
}

// Targets of delivery during intake: at full intake, the deliveries keep
// at least fullShareTarget of the intake while the intake stays at least
// peerTarget times the peer's (Hookaido's); paced at half the accept rate,
// they keep at least pacedShareTarget of it.
const (
	fullShareTarget  = 0.50
	peerTarget       = 5.0
	pacedShareTarget = 0.80
)

// intakeTable shows whether deliveries keep up with the intake: during the
// 32-connection run, and while a paced sender offers half of what that run
// accepted.
func intakeTable(w io.Writer, rows []row) {
	acceptedRate := func(r *row) float64 {
		v, _ := r.medianOf(func(run result) (float64, bool) { return run.Load.acceptedRate(), true })
		return v
	}
	peer := 0.0 // Hookaido's accepted/s; 0: its row did not run
	if r := findRow(rows, nameHookaido); r != nil {
		peer = acceptedRate(r)
	}
	deepPeer := 0.0 // the same with its queue bounded as ours
	if r := findRow(rows, nameHookaidoDeep); r != nil {
		deepPeer = acceptedRate(r)
	}
	var lines []string
	for i := range rows {
		r := &rows[i]
		if !r.c.paced() || r.repeats == 0 {
			continue
		}
		paced := func(f func(p paceResult) float64) float64 {
			v, _ := r.medianOf(func(run result) (float64, bool) {
				if run.Paced == nil {
					return 0, false
				}
				return f(*run.Paced), true
			})
			return v
		}
		accepted := acceptedRate(r)
		delivered, _ := r.medianOf(func(run result) (float64, bool) { return run.deliveredRate(), true })
		fullShare, _ := r.medianOf(func(run result) (float64, bool) {
			return run.deliveredRate() / run.Load.acceptedRate(), run.Load.accepted() > 0
		})
		fullDrain, _ := r.medianOf(func(run result) (float64, bool) { return run.Drained.Seconds(), true })
		share := paced(func(p paceResult) float64 { return p.deliveredRate() / p.acceptedRate() })
		var ratios []string
		for _, p := range []struct {
			rate float64
			of   string
		}{{peer, ""}, {deepPeer, " at max_depth=100000"}} {
			if p.rate > 0 && r.c.server != hookaido {
				x := accepted / p.rate
				ratios = append(ratios, fmt.Sprintf("%.1f× %s%s", x, yes(math.Round(x*10) >= peerTarget*10), p.of)) // as shown
			}
		}
		xPeer := "–"
		if len(ratios) > 0 {
			xPeer = strings.Join(ratios, "; ")
		}
		lines = append(lines, fmt.Sprintf("| %s | %s / %s | %.2f %s | %s | %.1f | %s | %s / %s | %.2f %s | %.0f | %s / %s | %.1f |",
			strings.TrimPrefix(r.c.name, "webhook-dedup, "), thousands(accepted), thousands(delivered), fullShare, yes(math.Round(fullShare*100) >= fullShareTarget*100), xPeer, fullDrain,
			thousands(paced(func(p paceResult) float64 { return p.Rate })),
			thousands(paced(paceResult.acceptedRate)), thousands(paced(paceResult.deliveredRate)), share, yes(math.Round(share*100) >= pacedShareTarget*100), // as shown
			paced(func(p paceResult) float64 { return float64(p.Late) }),
			ms(paced(func(p paceResult) float64 { return float64(p.P50) })), ms(paced(func(p paceResult) float64 { return float64(p.P99) })),
			paced(func(p paceResult) float64 { return p.Drained.Seconds() })))
	}
	printTable(w, fmt.Sprintf("| delivery during intake | full intake: accepted / delivered per s | delivered ÷ accepted (≥ %.2f) | accepted ÷ Hookaido's (≥ %.0f×) | backlog delivered in s | paced: offered/s | accepted / delivered per s | delivered ÷ accepted (≥ %.2f) | late | sender p50 / p99 ms | backlog delivered in s |", fullShareTarget, peerTarget, pacedShareTarget), lines,
		"Full intake is the 32-connection run: wrk sends as fast as it is answered, and the deliveries share the server core with the intake. Deliveries of the warm-up's backlog count too, so the ratio may pass 1. Accepted ÷ Hookaido's: the median accepted/s of the full intake against the Hookaido row's, when it ran (\"–\" otherwise), and against the row of Hookaido with its queue bounded at 100,000 events as webhook-dedup's is (QUEUE_MAX_DEPTH), when that ran: as shipped, Hookaido's queue holds 10,000, and a minute's intake faster than its delivery fills it within half a minute, after which it accepts at its delivery's rate. Paced: request i of the run is due at start + i ÷ rate, at half the rate the 32-connection run of the same server accepted, on 32 connections, for the 32-connection run's duration; accepted and delivered per second count the answers and the app's requests from the first request to the last answer, late the requests sent over 10 ms after they were due (every connection was waiting for an answer); the sender's latencies run from when each request was due. Each backlog is timed as in the table above, from the last answer.")
}

// orderTarget is the goal of ordered delivery: a backlog over orderKeys
// keys delivered at least this share of the same route's rate unordered.
const orderTarget = 0.80

// orderTable puts each store's ordered route beside the same route
// unordered: how fast each delivers a backlog over orderKeys customers.
func orderTable(w io.Writer, rows []row) {
	backlog := func(r *row, f func(backlogResult) float64) float64 {
		v, _ := r.medianOf(func(run result) (float64, bool) {
			if run.Backlog == nil {
				return 0, false
			}
			return f(*run.Backlog), true
		})
		return v
	}
	accepted := func(r *row) float64 {
		v, _ := r.medianOf(func(run result) (float64, bool) { return run.Load.acceptedRate(), true })
		return v
	}
	var lines []string
	for _, s := range []store{dataDir, redisStore, postgresStore} {
		name := fmt.Sprintf("webhook-dedup, %s, %s, %s", s, uniqueJSON, customers)
		ur, or := findRow(rows, name+", async"), findRow(rows, name+", "+orderOption+", async")
		if ur == nil || or == nil {
			continue
		}
		// The ratio of each repeat's pair, which ran close together.
		var ratios []float64
		for _, o := range or.runs {
			for _, u := range ur.runs {
				if u.Repeat == o.Repeat && u.Backlog != nil && o.Backlog != nil && u.Backlog.rate() > 0 {
					ratios = append(ratios, o.Backlog.rate()/u.Backlog.rate())
				}
			}
		}
		x := median(ratios)
		lines = append(lines, fmt.Sprintf("| %s | %s / %s | %s / %s | %s / %s | %.2f %s |", s,
			thousands(accepted(ur)), thousands(accepted(or)),
			thousands(backlog(ur, func(b backlogResult) float64 { return float64(b.Events) })), thousands(backlog(or, func(b backlogResult) float64 { return float64(b.Events) })),
			thousands(backlog(ur, backlogResult.rate)), thousands(backlog(or, backlogResult.rate)),
			x, yes(len(ratios) > 0 && math.Round(x*100) >= orderTarget*100))) // as shown
	}
	printTable(w, fmt.Sprintf("| ordered delivery over %s (unordered / %s) | accepted/s, the app held | backlog, events | backlog delivered per s | ordered ÷ unordered (≥ %.2f) |", customers, orderOption, orderTarget), lines,
		fmt.Sprintf("The Stripe route with and without %s, on the same events: request n names customer n mod %s, so the queue holds %s keys at once, a few events each. After the warm-up's backlog is delivered, the app holds every request (uncounted) while wrk runs at 32 connections, so the queue fills with no delivery reaching the app; then the app is let go and the backlog's delivery is timed, as in the tables above, alone on the servers' core: events the app received ÷ the time until it has as many as the server queued. The ratio is the median of each repeat's ordered ÷ unordered.", orderOption, thousands(orderKeys), thousands(orderKeys)))
}

// durableTable puts PostgreSQL as deployed (fsync=on) beside PostgreSQL
// as the tests run it (fsync off): what the flush of each commit costs.
func durableTable(w io.Writer, rows []row) {
	kinds := []struct{ what, suffix string }{
		{"unique JSON (sync)", "unique JSON"},
		{"unique JSON, async (the accept path)", "unique JSON, async"},
		{"duplicate JSON", "duplicate JSON"},
		{fmt.Sprintf("duplicate JSON, CACHE_SIZE=%d", cacheSize), fmt.Sprintf("duplicate JSON, CACHE_SIZE=%d", cacheSize)},
	}
	var lines []string
	for _, k := range kinds {
		off, on := findRow(rows, "webhook-dedup, PostgreSQL, "+k.suffix), findRow(rows, "webhook-dedup, PostgreSQL "+fsyncOn+", "+k.suffix)
		if off == nil || on == nil {
			continue
		}
		lines = append(lines, fmt.Sprintf("| %s | %s / %s | %.2f× | %s / %s | %s / %s | %.3f / %.3f | %d / %d |",
			k.what, thousands(median(off.rps)), thousands(median(on.rps)), median(on.rps)/median(off.rps),
			ms(median(off.p50)), ms(median(on.p50)), ms(median(off.p99)), ms(median(on.p99)),
			median(off.store), median(on.store), off.errs, on.errs))
	}
	printTable(w, "| PostgreSQL (fsync off / fsync=on) | req/s | on ÷ off | p50 ms | p99 ms | store CPU s/10k req | errors |", lines,
		"At 32 connections. fsync=on runs the server as deployed: fsync, synchronous_commit and full_page_writes on, so each commit waits for its WAL to reach the disk (concurrent commits share a flush); the tests' server, the other rows', leaves the flush to the kernel. A duplicate is a read, with no commit; with CACHE_SIZE it does not reach the server.")
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
		{"header-sourced on Redis ≥ 0.70× the Go proxy (on the JSON load, as set)", "webhook-dedup, Redis, unique header", atLeast(0.70)},
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
	var lines []string
	for _, t := range ts {
		r := findRow(rows, t.row)
		if r == nil || len(r.xGo) == 0 {
			continue
		}
		v, ok := t.measure(r)
		lines = append(lines, fmt.Sprintf("| %s | %s | %s |", t.what, v, yes(ok)))
	}
	// The header load's requests cost every server more than the JSON
	// load's (three more headers to parse and forward): the same ratio
	// against the Go proxy on that load, beside the target, not instead.
	if r := findRow(rows, "webhook-dedup, Redis, unique header"); r != nil && len(r.xGoLoad) > 0 {
		lines = append(lines, fmt.Sprintf("| header-sourced on Redis ÷ the Go proxy on the same header load | %.2f× (per core-second %.2f×) | (no goal) |",
			median(r.xGoLoad), median(r.capXGoLoad)))
	}
	if len(lines) == 0 {
		return // none of their rows ran
	}
	fmt.Fprintln(w, "| target | measured | met |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, l := range lines {
		fmt.Fprintln(w, l)
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

// seconds formats d as seconds, to a tenth.
func seconds(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

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

// settleRange describes how long the runs waited for a quiet disk: the
// median and the longest.
func settleRange(results map[string][]result) string {
	var waits []time.Duration
	for _, rs := range results {
		for _, r := range rs {
			waits = append(waits, r.Settled)
		}
	}
	if len(waits) == 0 {
		return "nothing"
	}
	slices.Sort(waits)
	return fmt.Sprintf("%v median, %v at most", waits[len(waits)/2].Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond))
}
