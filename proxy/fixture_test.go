package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"
	"github.com/webhook-dedup/webhook-dedup/policy"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/timing"
	"github.com/webhook-dedup/webhook-dedup/providers"
	"github.com/webhook-dedup/webhook-dedup/proxy"
)

// upstream is a real HTTP server standing in for the app: it records what
// it received and answers as told.
type upstream struct {
	*httptest.Server
	mu       sync.Mutex
	received []*received
	calls    atomic.Int64
	// answer decides the response; nil: 200 "ok".
	answer func(w http.ResponseWriter, r *http.Request, body []byte)
}

type received struct {
	method, path, query, host string
	header                    http.Header
	body                      string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		u.calls.Add(1)
		u.mu.Lock()
		u.received = append(u.received, &received{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Clone(), string(body)})
		answer := u.answer
		u.mu.Unlock()
		if answer != nil {
			answer(w, r, body)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) setAnswer(f func(w http.ResponseWriter, r *http.Request, body []byte)) {
	u.mu.Lock()
	u.answer = f
	u.mu.Unlock()
}

func (u *upstream) last(t *testing.T) *received {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.received) == 0 {
		t.Fatal("upstream received nothing")
	}
	return u.received[len(u.received)-1]
}

type fixture struct {
	up    *upstream
	store proxy.Store
	h     *proxy.Handler
	srv   *httptest.Server
	reg   *prometheus.Registry // the handler's metrics
}

// newFixture runs the proxy in front of a fresh upstream with routes (the
// ROUTES syntax), on an embedded store unless cfg names one.
func newFixture(t *testing.T, routes string, cfg proxy.Config) *fixture {
	t.Helper()
	return newWrappedFixture(t, routes, cfg, nil)
}

// newWrappedFixture is newFixture with the proxy's handler inside wrap
// (nil: none), for a test that watches the requests it serves.
func newWrappedFixture(t *testing.T, routes string, cfg proxy.Config, wrap func(http.Handler) http.Handler) *fixture {
	t.Helper()
	up := newUpstream(t)
	u, _ := url.Parse(up.URL)
	cfg.Upstream = u
	if cfg.Store == nil {
		m := memstore.New()
		t.Cleanup(func() { m.Close() })
		cfg.Store = m
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "test:"
	}
	reg := prometheus.NewRegistry()
	cfg.Metrics = proxy.NewMetrics(reg)
	for _, entry := range strings.Split(routes, ",") {
		// path=source[;mode[;order=key source]]
		path, spec, _ := strings.Cut(entry, "=")
		spec, rest, _ := strings.Cut(spec, ";")
		mode, option, _ := strings.Cut(rest, ";")
		var delivery policy.DeliveryMode
		if mode != "" {
			if err := delivery.UnmarshalText([]byte(mode)); err != nil {
				t.Fatal(err)
			}
		}
		src, err := providers.ParseSource(path, spec, providers.Options{})
		if err != nil {
			t.Fatalf("ParseSource(%q, %q): %v", path, spec, err)
		}
		route := proxy.Route{Path: path, Source: src, Delivery: delivery}
		if option != "" {
			keySpec, ok := strings.CutPrefix(option, "order=")
			if !ok {
				t.Fatalf("route %s: option %q: the fixture knows order= only", path, option)
			}
			if route.Order, err = providers.ParseKey(keySpec); err != nil {
				t.Fatalf("ParseKey(%q): %v", keySpec, err)
			}
		}
		cfg.Routes = append(cfg.Routes, route)
	}
	h := newHandler(t, cfg)
	var served http.Handler = h
	if wrap != nil {
		served = wrap(h)
	}
	srv := httptest.NewServer(served)
	t.Cleanup(srv.Close)
	return &fixture{up: up, store: cfg.Store, h: h, srv: srv, reg: reg}
}

// counter is the value of the metric name whose label has the value, summed
// over its other labels; 0 when there is no such series.
func (f *fixture) counter(t *testing.T, name, label, value string) float64 {
	t.Helper()
	return counterValue(t, f.reg, name, label, value)
}

// counterValue is fixture.counter for any registry.
func counterValue(t *testing.T, reg prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// gauge is the value of the unlabelled gauge name; 0 when there is none.
func (f *fixture) gauge(t *testing.T, name string) float64 {
	t.Helper()
	families, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		if fam.GetName() == name && len(fam.GetMetric()) == 1 {
			return fam.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// loadMargin is what every wait in these tests allows beyond the timeouts
// the test itself configures: the time a loaded 2-core machine (the suite
// under the race detector, beside other work) may add to scheduling the
// proxy's handlers, its store, its upstream and the test. An event with
// no configured timeout in its way (an in-memory store, an httptest
// upstream) takes only that: timing.LoadMargin, the one guess the
// module's tests make, stated once.
const loadMargin = timing.LoadMargin

// pollCounter waits, with a deadline, for a counter to reach want: a
// handler whose sender is gone finishes after the sender stops waiting.
func (f *fixture) pollCounter(t *testing.T, name, label, value string, want float64) {
	t.Helper()
	deadline := time.Now().Add(loadMargin)
	for f.counter(t, name, label, value) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s{%s=%q} = %v after %s, want %v", name, label, value, f.counter(t, name, label, value), loadMargin, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fixture) post(t *testing.T, path string, header map[string]string, body string) *http.Response {
	t.Helper()
	resp, err := f.send(t, path, header, body)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// postAsync posts from another goroutine; the answer arrives on the channel.
func (f *fixture) postAsync(t *testing.T, path string, header map[string]string, body string) <-chan *http.Response {
	ch := make(chan *http.Response, 1)
	go func() {
		resp, err := f.send(t, path, header, body)
		if err != nil {
			t.Error(err)
		}
		ch <- resp
	}()
	return ch
}

func (f *fixture) send(t *testing.T, path string, header map[string]string, body string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, nil
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wantAnswer(t *testing.T, resp *http.Response, status int, outcome string) {
	t.Helper()
	if resp.StatusCode != status || resp.Header.Get(proxy.HeaderOutcome) != outcome {
		t.Fatalf("got %d %s=%q, want %d %q", resp.StatusCode, proxy.HeaderOutcome, resp.Header.Get(proxy.HeaderOutcome), status, outcome)
	}
}

func gh(id string) map[string]string { return map[string]string{"X-GitHub-Delivery": id} }

func assertFree(t *testing.T, s proxy.Store, key string) {
	t.Helper()
	if rec, err := s.Lookup(context.Background(), key); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("key %s: %v %v, want released", key, rec.State, err)
	}
}
