package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The tool is its own upstream and its own plain Go proxy: `bench upstream`
// and `bench goproxy` run them as separate processes, so each can be pinned
// and measured like webhook-dedup and nginx.

// runUpstream is the app: it reads the whole body and answers 200. It
// counts what it received (countPath), so that the bench can time the
// delivery of an async proxy's backlog and count the copies of each event.
func runUpstream(args []string) error {
	fs := flag.NewFlagSet("upstream", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	delay := fs.Duration("delay", 0, "how long the app works on each request (a slow app)")
	ids := fs.Bool("ids", false, "count the distinct event IDs received too (a map insert per request)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ok := []byte("ok\n")
	var c appCounter
	if *ids {
		c.ids = map[string]int64{}
	}
	var g gate
	return serve(*listen, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case countPath:
			c.serve(w, r)
			return
		case gatePath:
			g.serve(w, r)
			return
		}
		if !g.pass(r) {
			return
		}
		if err := c.read(r); err != nil {
			return
		}
		if *delay > 0 {
			t := time.NewTimer(*delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		w.Header()["Content-Type"] = []string{"text/plain"}
		_, _ = w.Write(ok)
	}))
}

// countPath is where the upstream answers its appCount.
const countPath = "/_bench/count"

// gatePath is where the upstream is held and let go: POST ?hold=1 makes
// every request wait (uncounted) until POST ?hold=0.
const gatePath = "/_bench/gate"

// gate holds the upstream's requests while closed: the backlog rows fill
// an async proxy's queue behind it, then time the queue's delivery alone.
// Its zero value is open.
type gate struct {
	held atomic.Pointer[chan struct{}] // nil: open; closed when let go
}

// pass waits while the gate is held; false if r was given up meanwhile.
func (g *gate) pass(r *http.Request) bool {
	ch := g.held.Load()
	if ch == nil {
		return true
	}
	select {
	case <-*ch:
		return true
	case <-r.Context().Done():
		return false
	}
}

func (g *gate) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("hold") == "1" {
		ch := make(chan struct{})
		g.held.Store(&ch)
	} else if ch := g.held.Swap(nil); ch != nil {
		close(*ch)
	}
	w.WriteHeader(http.StatusNoContent)
}

// setGate holds the upstream at base (hold) or lets it go.
func setGate(base string, hold bool) error {
	v := "0"
	if hold {
		v = "1"
	}
	resp, err := http.Post(base+gatePath+"?hold="+v, "text/plain", nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("POST %s: %s", gatePath, resp.Status)
	}
	return nil
}

// appCount is what the upstream has received.
type appCount struct {
	Requests int64 `json:"requests"` // every POST
	// Of the events evt_<nonce>_<i>, i < below, that the query names:
	// how many the app received, and its requests for them.
	Reached int64 `json:"reached,omitempty"`
	Copies  int64 `json:"copies,omitempty"`
}

// appCounter counts the upstream's POSTs with an atomic add, which costs
// the baselines nothing measurable, and, when ids is not nil, the
// requests for each event ID.
type appCounter struct {
	requests atomic.Int64
	mu       sync.Mutex
	ids      map[string]int64
}

// read reads the body of r and counts it.
func (c *appCounter) read(r *http.Request) error {
	if r.Method != http.MethodPost {
		_, err := io.Copy(io.Discard, r.Body)
		return err
	}
	var id string
	if c.ids != nil {
		// The Stripe events begin with their ID: the head of the body
		// is enough, and the rest is read as the other rows read it.
		var head [64]byte
		n, _ := io.ReadFull(r.Body, head[:])
		id = eventID(head[:n], r.Header)
	}
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		return err
	}
	c.requests.Add(1)
	if id != "" {
		c.mu.Lock()
		c.ids[id]++
		c.mu.Unlock()
	}
	return nil
}

// serve answers the count; ?nonce=N&below=K adds what the app received
// of the events evt_N_0 to evt_N_(K-1).
func (c *appCounter) serve(w http.ResponseWriter, r *http.Request) {
	prefix := "evt_" + r.URL.Query().Get("nonce") + "_"
	below, _ := strconv.ParseInt(r.URL.Query().Get("below"), 10, 64)
	c.mu.Lock()
	n := appCount{Requests: c.requests.Load()}
	for id, copies := range c.ids {
		v, ok := strings.CutPrefix(id, prefix)
		if i, err := strconv.ParseInt(v, 10, 64); ok && err == nil && i < below {
			n.Reached++
			n.Copies += copies
		}
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(n)
}

// eventID is a Stripe-style event's ID from the head of its body, or a
// GitHub-style one's from its header; empty when neither has one.
func eventID(head []byte, h http.Header) string {
	if rest, ok := bytes.CutPrefix(head, []byte(stripeHead)); ok {
		if id, _, found := bytes.Cut(rest, []byte(`"`)); found {
			return string(id)
		}
	}
	return h.Get("X-GitHub-Delivery")
}

// countApp reads the upstream's appCount at url.
func countApp(url string) (appCount, error) {
	var n appCount
	resp, err := http.Get(url)
	if err != nil {
		return n, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return n, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return n, json.NewDecoder(resp.Body).Decode(&n)
}

// runGoProxy is the floor a Go proxy cannot beat: httputil.ReverseProxy
// with nothing added, on a transport sized like webhook-dedup's.
func runGoProxy(args []string) error {
	fs := flag.NewFlagSet("goproxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	upstream := fs.String("upstream", "", "upstream base URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" {
		return fmt.Errorf("goproxy: -upstream %q is not a URL", *upstream)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	t.DisableCompression = true
	return serve(*listen, &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		Transport: t,
	})
}

func serve(addr string, h http.Handler) error {
	s := &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	fmt.Fprintf(os.Stderr, "serving on %s\n", addr)
	return s.ListenAndServe()
}
