package test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
)

// Bounds on waiting for the proxy to cut a hostile client off. They are
// deadlines, not expectations: each wait ends as soon as the connection does.
const cutOffDeadline = 10 * time.Second

// hostileLine logs one hostile input and the answer it got, in a form the
// closing note of the issue can quote (go test -v shows them).
func hostileLine(t *testing.T, input, got string) {
	t.Helper()
	t.Logf("hostile input: %-62s → %s", input, got)
}

// short describes an answer in one line: status and X-Webhook-Dedup.
func (a answer) short() string {
	if d := a.Dedup(); d != "" {
		return fmt.Sprintf("%d %s", a.Status, d)
	}
	return fmt.Sprintf("%d (no X-Webhook-Dedup: answered by net/http)", a.Status)
}

// rawHead is req's request line and headers as a sender would write them,
// with contentLength as its Content-Length (-1: none).
func rawHead(req *http.Request, contentLength int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", req.Method, req.URL.RequestURI(), req.Host)
	names := make([]string, 0, len(req.Header))
	for name := range req.Header {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, v := range req.Header[name] {
			fmt.Fprintf(&b, "%s: %s\r\n", name, v)
		}
	}
	if contentLength >= 0 {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", contentLength)
	}
	b.WriteString("\r\n")
	return b.String()
}

// signedHead is the raw head of one signed attempt of ev by p, declaring
// contentLength bytes of body.
func signedHead(t *testing.T, ctx context.Context, px *proxy, p provider, ev event, contentLength int) string {
	t.Helper()
	req, err := p.request(ctx, px.Addr, ev)
	if err != nil {
		t.Fatal(err)
	}
	return rawHead(req, contentLength)
}

// rawExchange sends data on a fresh connection to addr while reading the
// answer (a server that refuses a request may answer and close before it
// has read all of it), and returns the answer.
func rawExchange(addr, data string) (answer, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return answer{}, err
	}
	_ = c.SetDeadline(time.Now().Add(cutOffDeadline))
	written := make(chan struct{})
	go func() {
		defer close(written)
		_, _ = io.WriteString(c, data)
	}()
	defer func() { c.Close(); <-written }()
	return readAnswer(bufio.NewReader(c))
}

func readAnswer(r *bufio.Reader) (answer, error) {
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return answer{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// trickler is a raw connection that sends its data a few bytes at a time,
// slower than any server should wait for.
type trickler struct {
	conn    net.Conn
	start   time.Time
	stopped chan struct{} // closed when the writer has given up
}

// trickle dials addr, writes head at once (may be empty), then writes
// drip, chunk bytes every interval, until the server closes the connection
// or the test ends.
func trickle(t *testing.T, addr, head, drip string, chunk int, interval time.Duration) *trickler {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tr := &trickler{conn: c, start: time.Now(), stopped: make(chan struct{})}
	t.Cleanup(func() { c.Close(); <-tr.stopped })
	go func() {
		defer close(tr.stopped)
		if _, err := io.WriteString(c, head); err != nil {
			return
		}
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; i < len(drip); i += chunk {
			<-tick.C
			if _, err := io.WriteString(c, drip[i:min(i+chunk, len(drip))]); err != nil {
				return
			}
		}
	}()
	return tr
}

// awaitCutOff waits until the server ends the connection: it reads (and
// returns) whatever answer the server wrote before closing, and how long
// after the connection opened it ended. It fails the test if the
// connection is still open at the deadline.
func (tr *trickler) awaitCutOff(t *testing.T) (string, time.Duration) {
	t.Helper()
	_ = tr.conn.SetReadDeadline(time.Now().Add(cutOffDeadline))
	got, err := io.ReadAll(tr.conn)
	elapsed := time.Since(tr.start)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection was still open after %s (read %q)", elapsed.Round(time.Millisecond), got)
	}
	if len(got) == 0 {
		return "connection closed without an answer", elapsed
	}
	a, rerr := readAnswer(bufio.NewReader(strings.NewReader(string(got))))
	if rerr != nil {
		return fmt.Sprintf("connection closed after %q", got), elapsed
	}
	return a.short() + ", then closed", elapsed
}

// awaitNoKey polls Redis until key does not exist: the claim was released
// (or never taken). Once the request has ended (cut off, or its sender
// gone), p releases its claim in one store operation (claimed).
func (p *proxy) awaitNoKey(t *testing.T, redisAddr, key string) {
	t.Helper()
	await(t, p.bounds().claimed(), func() error {
		n, err := redisInt(redisAddr, "EXISTS", key)
		if err == nil && n == 0 {
			return nil
		}
		return fmt.Errorf("key %q still exists (EXISTS: %d, %v); keys: %s", key, n, err, redisKeys(redisAddr))
	})
}

// expectNoPanic fails if the proxy's output shows a panic or a race.
func expectNoPanic(t *testing.T, px *proxy) {
	t.Helper()
	logs := px.Logs()
	for _, sign := range crashSigns {
		if strings.Contains(logs, sign) {
			t.Errorf("webhook-dedup wrote %q", sign)
		}
	}
}

// outcomeCount reads webhook_dedup_requests_total{route,outcome} from the
// admin port's /metrics (0 when the series does not exist yet).
func outcomeCount(px *proxy, route, outcome string) (float64, error) {
	resp, err := http.Get("http://" + px.Admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	want := []string{`outcome="` + outcome + `"`, `route="` + route + `"`}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "webhook_dedup_requests_total{") || !strings.Contains(line, want[0]) || !strings.Contains(line, want[1]) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		return v, nil
	}
	return 0, sc.Err()
}

// awaitOutcome waits until the proxy has counted n requests on route with
// outcome: its handler has returned (its claim, if any, settled), even if
// nobody was left to read the answer.
func awaitOutcome(t *testing.T, px *proxy, route, outcome string, n float64) {
	t.Helper()
	deadline := time.Now().Add(cutOffDeadline)
	for {
		got, err := outcomeCount(px, route, outcome)
		if err == nil && got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook_dedup_requests_total{route=%q,outcome=%q} is %v (%v) after %s, want %v",
				route, outcome, got, err, cutOffDeadline, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
