package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metrics scrapes /metrics and parses it as Prometheus's text format.
func (p *proxy) metrics(t testing.TB) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := p.scrape()
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return fams
}

func (p *proxy) scrape() (map[string]*dto.MetricFamily, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + p.Admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics answered %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		return nil, fmt.Errorf("GET /metrics: Content-Type %q, want Prometheus's text format", ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	return fams, nil
}

// sample sums, over the series of family name whose labels include want,
// the value of a counter or gauge, or the sample count of a histogram. A
// family that is absent (no series yet) sums to 0.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	fam, ok := fams[name]
	if !ok {
		return 0
	}
	var sum float64
next:
	for _, m := range fam.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		sum += value(fam.GetType(), m)
	}
	return sum
}

// value is a counter's or gauge's value, or a histogram's sample count.
func value(typ dto.MetricType, m *dto.Metric) float64 {
	switch typ {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_HISTOGRAM:
		return float64(m.GetHistogram().GetSampleCount())
	default:
		return m.GetUntyped().GetValue()
	}
}

// series describes a family's series, for failure messages.
func series(fams map[string]*dto.MetricFamily, name string) string {
	fam, ok := fams[name]
	if !ok {
		return name + " is not exported"
	}
	var lines []string
	for _, m := range fam.GetMetric() {
		var labels []string
		for _, lp := range m.GetLabel() {
			labels = append(labels, lp.GetName()+"="+lp.GetValue())
		}
		lines = append(lines, fmt.Sprintf("{%s} %v", strings.Join(labels, ","), value(fam.GetType(), m)))
	}
	sort.Strings(lines)
	return name + " " + strings.Join(lines, " ")
}

// awaitMetric polls /metrics until the value of name{labels} (see sample)
// is at least min, and returns it; it fails the test once the proxy has
// had its bound to show what happened (observed). The proxy counts a
// webhook just after its answer is written, so a scrape sent the moment
// the answer arrives may come a little early.
func (p *proxy) awaitMetric(t testing.TB, name string, labels map[string]string, min float64) float64 {
	t.Helper()
	var v float64
	await(t, p.bounds().observed(), func() error {
		fams := p.metrics(t)
		if v = sample(fams, name, labels); v < min {
			return fmt.Errorf("%s%v = %v; want at least %v. Series: %s", name, labels, v, min, series(fams, name))
		}
		return nil
	})
	return v
}

// awaitLog polls the process's output until substr occurs at least n
// times: the process buffers its log, and writes it out at least every
// second.
func (p *proxy) awaitLog(t testing.TB, substr string, n int) {
	t.Helper()
	p.awaitLogWithin(t, substr, n, p.bounds().observed())
}

// awaitLogWithin is awaitLog with a deadline of the caller's.
func (p *proxy) awaitLogWithin(t testing.TB, substr string, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := strings.Count(p.Logs(), substr)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the logs hold %q %d times, want at least %d within %s", substr, got, n, within)
		}
		time.Sleep(25 * time.Millisecond) // polling interval
	}
}

// adminDo sends method on an admin path (already escaped) with the bearer
// token tok ("" for no Authorization header).
func (p *proxy) adminDo(t testing.TB, method, path, tok string) answer {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+p.Admin+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	a, err := do(&http.Client{Timeout: 5 * time.Second}, req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return a
}

// adminEvent is the admin API's JSON view of one record.
type adminEvent struct {
	Namespace  string   `json:"namespace"`
	ID         string   `json:"id"`
	State      string   `json:"state"`
	Status     *int     `json:"status"`
	AgeSeconds *float64 `json:"age_seconds"`
	TTLSeconds *float64 `json:"ttl_seconds"`
}

func decodeEvent(t testing.TB, what string, body []byte) adminEvent {
	t.Helper()
	var ev adminEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		t.Fatalf("%s: %q is not the events API's JSON: %v", what, body, err)
	}
	if ev.AgeSeconds == nil || ev.TTLSeconds == nil || *ev.AgeSeconds < 0 || *ev.TTLSeconds <= 0 {
		t.Fatalf("%s: %s; want age_seconds ≥ 0 and ttl_seconds > 0", what, body)
	}
	return ev
}

// cli runs the binary once with args and exactly env (nothing else from the
// test's environment), and returns its exit status, stdout and stderr.
func cli(t testing.TB, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), exitDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = envList(env)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("webhook-dedup %s did not exit within %s", strings.Join(args, " "), exitDeadline)
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatalf("webhook-dedup %s: %v", strings.Join(args, " "), err)
	}
	return 0, stdout.String(), stderr.String()
}

// sendAsync sends one attempt of ev in the background; the answer (status
// -1 and the error as body on a transport error) arrives on the channel.
func sendAsync(ctx context.Context, client *http.Client, px *proxy, p provider, ev event) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		a, err := p.send(ctx, client, px.Addr, ev)
		if err != nil {
			a = answer{Status: -1, Body: []byte(err.Error())}
		}
		ch <- a
	}()
	return ch
}

// receive waits for the answer of a webhook sent to p with sendAsync, for
// as long as p may take to answer one (answered): what it waited on is
// released, or the webhook is on its way, when the test calls it.
func (p *proxy) receive(t testing.TB, what string, ch <-chan answer) answer {
	t.Helper()
	deadline := p.bounds().answered()
	select {
	case a := <-ch:
		return a
	case <-time.After(deadline):
		t.Fatalf("%s: no answer within %s", what, deadline)
		return answer{}
	}
}

// answeringApp is an app whose answer to each event is scripted: for tests
// about what the proxy does with the app's answer. It counts requests by
// event ID (the X-Acme-Event-Id header the acme provider sends).
type answeringApp struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string]int
}

func newAnsweringApp(t testing.TB, answer func(id string) (status int, contentType, body string)) *answeringApp {
	a := &answeringApp{calls: map[string]int{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		id := r.Header.Get("X-Acme-Event-Id")
		a.mu.Lock()
		a.calls[id]++
		a.mu.Unlock()
		status, ct, body := answer(id)
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(a.Close)
	return a
}

// Calls is how many requests for the event reached the app.
func (a *answeringApp) Calls(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[id]
}
