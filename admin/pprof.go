package admin

import (
	"fmt"
	"html"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"
)

// Go's profiles, served under /debug/pprof/ in the paths and forms of
// net/http/pprof, which `go tool pprof` and `go tool trace` read. They are
// written here on runtime/pprof rather than by importing net/http/pprof,
// whose init registers them, unguarded, on http.DefaultServeMux.

// maxProfileSeconds bounds a CPU profile or an execution trace, which
// hold the request (and the admin port's write deadline, extended for it)
// that long.
const maxProfileSeconds = 300

// profiling serves /debug/pprof/: the index, profile (CPU), trace,
// cmdline, and each named profile (heap, goroutine, allocs, block, mutex,
// threadcreate).
func profiling(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	switch name {
	case "":
		profileIndex(w)
	case "profile", "trace":
		timed(w, r, name)
	case "cmdline":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, strings.Join(os.Args, "\x00"))
	default:
		p := pprof.Lookup(name)
		if p == nil {
			http.Error(w, "unknown profile "+strconv.Quote(name), http.StatusNotFound)
			return
		}
		debug, _ := strconv.Atoi(r.URL.Query().Get("debug"))
		if name == "heap" && r.URL.Query().Get("gc") != "" {
			runtime.GC()
		}
		if debug != 0 {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		} else {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
		}
		_ = p.WriteTo(w, debug)
	}
}

// timed records a CPU profile or an execution trace for ?seconds= (30 by
// default, as net/http/pprof), past the admin port's write timeout.
func timed(w http.ResponseWriter, r *http.Request, kind string) {
	seconds := 30
	if v := r.URL.Query().Get("seconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxProfileSeconds {
			http.Error(w, "seconds must be a number from 1 to "+strconv.Itoa(maxProfileSeconds), http.StatusBadRequest)
			return
		}
		seconds = n
	}
	d := time.Duration(seconds) * time.Second
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d + 10*time.Second))
	start, stop := pprof.StartCPUProfile, pprof.StopCPUProfile
	if kind == "trace" {
		start, stop = trace.Start, trace.Stop
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+kind+`"`)
	if err := start(w); err != nil {
		// One profile or trace at a time, process-wide.
		w.Header().Del("Content-Disposition")
		http.Error(w, "could not start the "+kind+": "+err.Error(), http.StatusConflict)
		return
	}
	select {
	case <-time.After(d):
	case <-r.Context().Done():
	}
	stop()
}

// profileIndex lists the profiles, linked, as net/http/pprof's index does.
func profileIndex(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var b strings.Builder
	b.WriteString("<!DOCTYPE html><html><head><title>/debug/pprof/</title></head><body><h1>/debug/pprof/</h1><table>\n")
	for _, p := range pprof.Profiles() {
		n := html.EscapeString(p.Name())
		fmt.Fprintf(&b, "<tr><td>%d</td><td><a href=\"%s?debug=1\">%s</a></td></tr>\n", p.Count(), n, n)
	}
	b.WriteString("<tr><td></td><td><a href=\"profile\">profile</a> (CPU, ?seconds=30)</td></tr>\n")
	b.WriteString("<tr><td></td><td><a href=\"trace?seconds=5\">trace</a> (execution trace)</td></tr>\n")
	b.WriteString("<tr><td></td><td><a href=\"cmdline\">cmdline</a></td></tr>\n")
	b.WriteString("</table><p><code>curl -H \"Authorization: Bearer $ADMIN_TOKEN\" -o cpu.pprof 'http://ADMIN_ADDR/debug/pprof/profile?seconds=30' &amp;&amp; go tool pprof -http=: cpu.pprof</code></p></body></html>\n")
	_, _ = w.Write([]byte(b.String()))
}
