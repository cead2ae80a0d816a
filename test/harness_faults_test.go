package test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// faultLink is a real TCP proxy (toxiproxy, run inside the test process)
// on one link between two real processes: webhook-dedup and its store, or
// webhook-dedup and its app. With no fault applied it passes bytes as
// they come; apply puts a fault on every connection through it, open or
// new, until remove.
type faultLink struct {
	// Addr is the host:port to dial instead of the target's.
	Addr string

	t     testing.TB
	proxy *toxiproxy.Proxy
}

// newFaultLink starts a link on a loopback port of the kernel's choosing
// in front of target (host:port), and stops it, closing its connections,
// when the test ends. The kernel's choice, made as the link binds: a port
// picked free beforehand (redistest.FreeAddr) was once taken by another
// listener before the link bound it.
func newFaultLink(t testing.TB, target string) *faultLink {
	t.Helper()
	// An API server toxiproxy's proxy reports to; never listening: the
	// test drives the link through its methods, not over HTTP.
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(api, "link", "127.0.0.1:0", target)
	if err := p.Start(); err != nil {
		t.Fatalf("fault link in front of %s: %v", target, err)
	}
	t.Cleanup(p.Stop)
	return &faultLink{Addr: p.Listen, t: t, proxy: p}
}

// toxic is one of toxiproxy's toxics, on one direction of a link.
type toxic struct {
	// Type is toxiproxy's name for it: latency, reset_peer, timeout,
	// slow_close, bandwidth, …
	Type string `json:"type"`
	// Stream is "upstream" (what the client sends: requests, queries)
	// or "downstream" (what the server sends back: replies).
	Stream string `json:"stream"`
	// Attributes are the toxic's (milliseconds, or KB/s for bandwidth).
	Attributes map[string]int64 `json:"attributes"`
}

// linkFault is one shape of network fault: a row of faultShapes.
type linkFault struct {
	// name names the row in subtest names.
	name string
	// toxics make the fault, together.
	toxics []toxic
	// losesReplies says the fault can cut a request off after the server
	// acted on it, before its reply gets back: the one case where an app
	// may see an event more than once (see faultCell).
	losesReplies bool
}

// faultShapes are the faults the matrix puts on each link. A new fault is
// a new row. The figures sit below the timeouts the matrix configures
// (faultTimeouts) where the row is about a slow link, and cut the link
// where it is about a broken one.
var faultShapes = []linkFault{{
	// Every reply 100 ms late (± 25 ms): slower, never broken.
	name:   "latency",
	toxics: []toxic{{Type: "latency", Stream: "downstream", Attributes: map[string]int64{"latency": 100, "jitter": 25}}},
}, {
	// The server's reply starts and the connection is reset: the request
	// was acted on, its answer is lost. A connection opened while the
	// fault is on is reset with an RST; one already open, with a FIN.
	name:         "reset-mid-reply",
	toxics:       []toxic{{Type: "reset_peer", Stream: "downstream", Attributes: map[string]int64{"timeout": 0}}},
	losesReplies: true,
}, {
	// Bytes vanish both ways and the connection stays open (a partition,
	// a peer that died without a FIN): only the client's own timeouts end
	// a call. Removing the fault closes the connections it held.
	name: "blackhole",
	toxics: []toxic{
		{Type: "timeout", Stream: "upstream", Attributes: map[string]int64{"timeout": 0}},
		{Type: "timeout", Stream: "downstream", Attributes: map[string]int64{"timeout": 0}},
	},
	losesReplies: true,
}, {
	// A close is passed on a second late, both ways: a peer that hangs up
	// is seen to do so late.
	name: "slow-close",
	toxics: []toxic{
		{Type: "slow_close", Stream: "upstream", Attributes: map[string]int64{"delay": 1000}},
		{Type: "slow_close", Stream: "downstream", Attributes: map[string]int64{"delay": 1000}},
	},
}, {
	// 8 KB/s each way: a congested link, every message trickles.
	name: "bandwidth",
	toxics: []toxic{
		{Type: "bandwidth", Stream: "upstream", Attributes: map[string]int64{"rate": 8}},
		{Type: "bandwidth", Stream: "downstream", Attributes: map[string]int64{"rate": 8}},
	},
}, {
	// Bytes vanish both ways and each connection is closed 500 ms after
	// it carried something: a middlebox that times out a flow.
	name: "timeout",
	toxics: []toxic{
		{Type: "timeout", Stream: "upstream", Attributes: map[string]int64{"timeout": 500}},
		{Type: "timeout", Stream: "downstream", Attributes: map[string]int64{"timeout": 500}},
	},
	losesReplies: true,
}}

// apply puts f on the link.
func (l *faultLink) apply(f linkFault) {
	l.t.Helper()
	for _, tx := range f.toxics {
		spec := struct {
			Name string `json:"name"`
			toxic
			Toxicity float32 `json:"toxicity"`
		}{f.name + "-" + tx.Stream, tx, 1}
		data, err := json.Marshal(spec)
		if err != nil {
			l.t.Fatal(err)
		}
		if _, err := l.proxy.Toxics.AddToxicJson(bytes.NewReader(data)); err != nil {
			l.t.Fatalf("fault %s on the link to %s: %v", f.name, l.proxy.Upstream, err)
		}
	}
}

// remove takes every fault off the link. A fault that held bytes back
// (latency, bandwidth) lets them through; one that dropped them
// (blackhole, timeout) closes the connections it held.
func (l *faultLink) remove() {
	l.proxy.Toxics.ResetToxics(context.Background())
}

// healthWatch polls the admin port's /healthz while a fault is on, and
// keeps what went wrong.
type healthWatch struct {
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	polls    int
	failures []string
}

// healthTimeout bounds one /healthz: an admin port held up by a fault on
// another link would answer late or never.
const healthTimeout = 2 * time.Second

// watchHealth polls px's /healthz every 100 ms until the returned watch
// is ended.
func watchHealth(px *proxy) *healthWatch {
	w := &healthWatch{stop: make(chan struct{}), done: make(chan struct{})}
	client := &http.Client{Timeout: healthTimeout}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			start := time.Now()
			resp, err := client.Get("http://" + px.Admin + "/healthz")
			failure := ""
			switch {
			case err != nil:
				failure = err.Error()
			case resp.StatusCode != http.StatusOK:
				failure = resp.Status
			}
			if err == nil {
				resp.Body.Close()
			}
			w.mu.Lock()
			w.polls++
			if failure != "" {
				w.failures = append(w.failures, failure+" after "+time.Since(start).Round(time.Millisecond).String())
			}
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// end stops polling and returns how many polls ran and the failures.
func (w *healthWatch) end() (int, []string) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polls, w.failures
}
