package test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// procBytes reads a field of /proc/PID/status that is a size in kB (VmRSS,
// VmHWM) and returns it in bytes.
func (p *proxy) procBytes(t testing.TB, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("/proc/PID/status %s: %v", field, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("/proc/PID/status has no %s", field)
	return 0
}

// holdConnections opens n connections to addr that each send head and
// then nothing more, and closes them when the test ends.
func holdConnections(t *testing.T, addr string, n int, head string) {
	t.Helper()
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
}

// TestHeaderOnlyConnectionsDoNotTakeMemory: connections that each declare
// a body of MAX_BODY_BYTES (10 MiB) on a route that reads the body, and
// send only their headers, leave the process's memory where it was: the
// proxy holds a body's bytes as they arrive, not what a header promises.
// (Before, 300 such connections took it from 13 MB to 2.7 GB.)
func TestHeaderOnlyConnectionsDoNotTakeMemory(t *testing.T) {
	t.Parallel()
	const conns = 200
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{
		"REDIS_URL":    srv.URL(),
		"KEY_PREFIX":   "e2e-idle:",
		"READ_TIMEOUT": "60s", // the connections must stay open while the test measures
	}))
	before := px.procBytes(t, "VmRSS")
	held := px.awaitMetric(t, "go_goroutines", nil, 1)

	head := signedHead(t, testContext(t), px, stripe, stripe.Event(1), 10<<20)
	holdConnections(t, px.Addr, conns, head)
	// The connections' handlers are reading their bodies once the process
	// runs a goroutine more for each (less a few the process may have
	// ended meanwhile); awaitMetric polls, under a deadline.
	px.awaitMetric(t, "go_goroutines", nil, held+conns-5)
	hwm := px.procBytes(t, "VmHWM")
	t.Logf("%d connections declaring 10 MiB bodies, headers only: VmRSS %d MiB before, VmHWM %d MiB with them",
		conns, before>>20, hwm>>20)
	if grown := hwm - before; grown > 100<<20 {
		t.Errorf("the process grew by %d MiB (VmRSS %d MiB before, VmHWM %d MiB); want less than 100 MiB", grown>>20, before>>20, hwm>>20)
	}
	if n := app.Total(); n != 0 {
		t.Errorf("the app received %d requests", n)
	}
	expectNoPanic(t, px)
}

// TestBufferedBytesBound: once the bodies being read take
// MAX_BUFFERED_BYTES, a webhook that must read its body is answered 503
// with Retry-After at once, and counted; once they are read, webhooks are
// served again.
func TestBufferedBytesBound(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{
		"REDIS_URL":          srv.URL(),
		"KEY_PREFIX":         "e2e-buffered:",
		"MAX_BODY_BYTES":     strconv.Itoa(limit),
		"MAX_BUFFERED_BYTES": strconv.Itoa(limit),
	}))
	ctx, client := testContext(t), newClient(t)

	// A body of the largest size allowed, of which all but its last byte
	// arrives: its buffer takes the whole budget while it waits for it.
	big := jsonOfSize("obj_buffered_big", limit)
	c, err := net.Dial("tcp", px.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := signedHead(t, ctx, px, jsonPath, big, len(big.Body)) + string(big.Body)
	if _, err := io.WriteString(c, data[:len(data)-1]); err != nil {
		t.Fatal(err)
	}
	px.awaitMetric(t, "webhook_dedup_body_bytes_held", nil, limit)

	start := time.Now()
	a := mustSend(t, ctx, client, px, stripe, stripe.Event(1))
	hostileLine(t, "a webhook while the bodies held take MAX_BUFFERED_BYTES", a.short())
	expect(t, "a webhook beyond MAX_BUFFERED_BYTES", a, 503, "too-large")
	if secs, err := a.retryAfter(); err != nil || secs < 1 {
		t.Errorf("Retry-After: %d, %v; want whole seconds", secs, err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("the 503 took %s; want it at once", elapsed)
	}
	if n := px.awaitMetric(t, "webhook_dedup_body_budget_refused_total", nil, 1); n != 1 {
		t.Errorf("webhook_dedup_body_budget_refused_total = %v, want 1", n)
	}
	// A header-sourced route streams its body: it holds none, and is served.
	expect(t, "a header-sourced webhook meanwhile", mustSend(t, ctx, client, px, acme, acme.Event(1)), 200, "forwarded")

	// The last byte arrives: the big body is forwarded, and its buffer
	// given back.
	if _, err := io.WriteString(c, data[len(data)-1:]); err != nil {
		t.Fatal(err)
	}
	got, err := readAnswer(bufio.NewReader(c))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "the big body, once whole", got, 200, "forwarded")
	// Its buffer is given back once its handling ends, which is after the
	// answer: the record is completed right after the sender is answered.
	await(t, px.bounds().observed(), func() error {
		if held := sample(px.metrics(t), "webhook_dedup_body_bytes_held", nil); held != 0 {
			return fmt.Errorf("webhook_dedup_body_bytes_held = %v once the big body was answered, want 0", held)
		}
		return nil
	})
	expect(t, "the refused webhook, retried", settledSend(t, ctx, client, px, stripe, stripe.Event(1)), 200, "forwarded")
	if n := app.Effects(key(stripe, stripe.Event(1).ID)); n != 1 {
		t.Errorf("the app processed the retried event %d times, want 1", n)
	}
	expectNoPanic(t, px)
}

// TestMaxConnections: with MAX_CONNECTIONS set, a connection beyond the
// limit waits, unanswered, until one of the open ones closes; then it is
// served as usual.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	const limit = 3
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{
		"REDIS_URL":       srv.URL(),
		"KEY_PREFIX":      "e2e-maxconn:",
		"MAX_CONNECTIONS": strconv.Itoa(limit),
	}))
	var open []net.Conn
	for i := 0; i < limit; i++ {
		c, err := net.Dial("tcp", px.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		open = append(open, c)
	}

	// The kernel queues connections in order, so this one is past the limit.
	extra, err := net.Dial("tcp", px.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	ev := acme.Event(1)
	if _, err := io.WriteString(extra, signedHead(t, testContext(t), px, acme, ev, len(ev.Body))+string(ev.Body)); err != nil {
		t.Fatal(err)
	}
	// Unanswered for a while: a bound, not a wait for something to happen
	// (a broken limit answers within milliseconds).
	_ = extra.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	r := bufio.NewReader(extra)
	if a, err := readAnswer(r); err == nil {
		t.Fatalf("a connection beyond MAX_CONNECTIONS=%d was answered: %s", limit, a.short())
	}
	if n := app.Total(); n != 0 {
		t.Fatalf("the app received %d requests", n)
	}

	open[0].Close() // a slot frees: the waiting connection is taken
	_ = extra.SetReadDeadline(time.Now().Add(cutOffDeadline))
	a, err := readAnswer(r)
	if err != nil {
		t.Fatalf("once a connection closed, the waiting one got no answer: %v", err)
	}
	hostileLine(t, fmt.Sprintf("connection %d with MAX_CONNECTIONS=%d, once one closed", limit+1, limit), a.short())
	expect(t, "the waiting connection's webhook", a, 200, "forwarded")
	expectNoPanic(t, px)
}
