package test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// TestRedisOutageAndRecovery: with Redis down the proxy answers 503
// store-unavailable with Retry-After and forwards nothing, /readyz turns
// 503; once Redis is back the next delivery is forwarded without a proxy
// restart, and /readyz turns 200.
func TestRedisOutageAndRecovery(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	outageAndRecovery(t, "Redis", map[string]string{"REDIS_URL": srv.URL()}, srv.Stop, srv.Start)
}

// outageAndRecovery runs the outage test against the store that storeEnv
// configures, taken down by stop and brought back by start.
func outageAndRecovery(t *testing.T, name string, storeEnv map[string]string, stop, start func()) {
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, storeEnv))
	ctx, client := testContext(t), newClient(t)
	if err := px.pollAdmin("/readyz", 200, storeStateDeadline); err != nil {
		t.Fatalf("readyz with %s up: %v", name, err)
	}
	expect(t, "delivery with "+name+" up", mustSend(t, ctx, client, px, acme, acme.Event(1)), 200, "forwarded")
	expect(t, "redelivery with "+name+" up", mustSend(t, ctx, client, px, acme, acme.Event(1)), 200, "duplicate")

	stop()
	for _, p := range []provider{acme, stripe} {
		ev := p.Event(2)
		a := mustSend(t, ctx, client, px, p, ev)
		expect(t, p.Name+" delivery with "+name+" down", a, 503, "store-unavailable")
		if ra, err := a.retryAfter(); err != nil || ra < 1 || ra > 30 {
			t.Errorf("%s with %s down: Retry-After %q; want a few whole seconds: %v", p.Name, name, a.Header.Get("Retry-After"), err)
		}
		if n := app.Attempts(key(p, ev.ID)); n != 0 {
			t.Errorf("%s with %s down reached the app %d times, want 0", p.Name, name, n)
		}
	}
	if err := px.pollAdmin("/readyz", 503, storeStateDeadline); err != nil {
		t.Errorf("readyz with %s down: %v", name, err)
	}

	start()
	// go-redis stops dialing a server that refused PoolSize dials and probes
	// it once a second, so the proxy resumes within about a second of Redis
	// answering (docs/operations.md runbook: "Redis is down"); PostgreSQL's pool dials afresh
	// for each request. The sender retries 503s meanwhile.
	ev := acme.Event(2)
	deadline := time.Now().Add(px.bounds().reconnected())
	var first answer
	for {
		first = mustSend(t, ctx, client, px, acme, ev)
		if first.Dedup() != "store-unavailable" || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the sender's backoff between retries
	}
	expect(t, "first delivery forwarded after "+name+" is back", first, 200, "forwarded")
	if err := px.pollAdmin("/readyz", 200, storeStateDeadline); err != nil {
		t.Errorf("readyz after %s is back: %v", name, err)
	}
	if first.Dedup() == "forwarded" {
		expect(t, "redelivery after "+name+" is back", mustSend(t, ctx, client, px, acme, ev), 200, "duplicate")
		if n := app.Effects(key(acme, ev.ID)); n != 1 {
			t.Errorf("took effect %d times, want 1", n)
		}
	}
}

// TestStoreErrorForward: with ON_STORE_ERROR=forward and Redis down, every
// delivery is forwarded (fail open) and marked forwarded-unchecked.
func TestStoreErrorForward(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL(), "ON_STORE_ERROR": "forward"}))
	ctx, client := testContext(t), newClient(t)
	expect(t, "delivery with Redis up", mustSend(t, ctx, client, px, acme, acme.Event(1)), 200, "forwarded")
	expect(t, "redelivery with Redis up", mustSend(t, ctx, client, px, acme, acme.Event(1)), 200, "duplicate")

	srv.Stop()
	for _, p := range []provider{acme, stripe} {
		ev := p.Event(2)
		k := key(p, ev.ID)
		for range 2 {
			a := mustSend(t, ctx, client, px, p, ev)
			expect(t, p.Name+" delivery with Redis down", a, 200, "forwarded-unchecked")
			if want := fmt.Sprintf(`{"received":%q}`, k); string(a.Body) != want {
				t.Errorf("%s with Redis down: body %q, want the app's %s", p.Name, a.Body, want)
			}
		}
		if n := app.Effects(k); n != 2 {
			t.Errorf("%s: %d of 2 deliveries reached the app with Redis down, want both (fail open)", k, n)
		}
	}
}

// TestProxyKilledMidRequest: a proxy killed (SIGKILL) while the app works
// leaves its claim behind; another proxy on the same Redis answers in-flight
// until the lease expires, then forwards the retry.
func TestProxyKilledMidRequest(t *testing.T) {
	t.Parallel()
	// The held request is still at the app when its proxy dies, and the
	// survivor's first retry still finds the claim, however slowly a
	// loaded machine takes the test's steps between them (at most
	// loadMargin); the test waits the lease out, so neither is longer
	// than that.
	const upstreamTimeout = loadMargin
	const leaseTTL = upstreamTimeout + 2*time.Second
	srv := redistest.New(t)
	app := newUpstream(t)
	env := proxyEnv(app, map[string]string{
		"REDIS_URL":        srv.URL(),
		"UPSTREAM_TIMEOUT": upstreamTimeout.String(),
		"LEASE_TTL":        leaseTTL.String(),
	})
	doomed := startProxy(t, env)
	// The survivor runs before the crash, so the whole lease is left to observe.
	survivor := startProxy(t, env)
	ctx, client := testContext(t), newClient(t)

	ev := stripe.Event(1)
	k := key(stripe, ev.ID)
	release := app.Hold()
	t.Cleanup(release)
	crashed := make(chan error, 1)
	go func() {
		_, err := stripe.send(ctx, client, doomed.Addr, ev)
		crashed <- err
	}()
	app.awaitEntered(t, k, doomed.bounds().claimed())
	doomed.Kill()
	// The app sees the connection drop and rolls back; only then is it let go.
	app.awaitAbandoned(t, k, loadMargin)
	release()
	if err := <-crashed; err == nil {
		t.Errorf("the request to the killed proxy got an answer; want a broken connection")
	}

	first := mustSend(t, ctx, client, survivor, stripe, ev)
	expect(t, "retry to the survivor within the lease", first, http.StatusConflict, "in-flight")
	if ra, err := first.retryAfter(); err != nil || ra < 1 || time.Duration(ra)*time.Second > leaseTTL {
		t.Errorf("in-flight: Retry-After %q; want whole seconds in [1, %s] (the lease left): %v", first.Header.Get("Retry-After"), leaseTTL, err)
	}

	// The provider keeps retrying; the lease, which began before now, must
	// expire.
	deadline := time.Now().Add(leaseTTL + loadMargin)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	inflight := 1
	var last answer
	for {
		<-tick.C
		last = mustSend(t, ctx, client, survivor, stripe, ev)
		if last.Dedup() != "in-flight" {
			break
		}
		inflight++
		if n := app.Attempts(k); n != 1 {
			t.Fatalf("an in-flight answer was given, yet the app saw %d attempts (want 1)", n)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still in-flight %s after a %s lease began: %s", leaseTTL+loadMargin, leaseTTL, last)
		}
	}
	expect(t, "retry after the lease expired", last, 200, "forwarded")
	t.Logf("%d in-flight answers before the %s lease expired", inflight, leaseTTL)
	if a, e := app.Attempts(k), app.Effects(k); a != 2 || e != 1 {
		t.Errorf("%d attempts reached the app with %d effects; want 2 and 1", a, e)
	}
}

// TestRedisKeys: records live under KEY_PREFIX + namespace + ":" + ID, where
// the namespace is the preset's name or the route's path; completed records
// expire after the preset's retry window (or DEDUP_TTL), in-flight claims
// after LEASE_TTL.
func TestRedisKeys(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{
		"REDIS_URL":        srv.URL(),
		"KEY_PREFIX":       "e2e-keys:",
		"UPSTREAM_TIMEOUT": "5s",
		"LEASE_TTL":        "20s",
	}))
	ctx, client := testContext(t), newClient(t)

	ttl := func(k string) time.Duration {
		t.Helper()
		ms, err := redisInt(srv.Addr, "PTTL", k)
		if err != nil {
			t.Fatalf("PTTL %s: %v", k, err)
		}
		return time.Duration(ms) * time.Millisecond
	}
	for _, tc := range []struct {
		p      provider
		key    string
		minTTL time.Duration
	}{
		// SPEC: Stripe retries for 3 days; its records outlive that.
		{stripe, "e2e-keys:stripe:" + stripe.Event(1).ID, 72 * time.Hour},
		{acme, "e2e-keys:/hooks/acme:" + acme.Event(1).ID, time.Second},
		{jsonPath, "e2e-keys:/hooks/json:" + jsonPath.Event(1).ID, time.Second},
	} {
		expect(t, tc.p.Name, mustSend(t, ctx, client, px, tc.p, tc.p.Event(1)), 200, "forwarded")
		// The record is completed before the sender has its answer.
		expect(t, tc.p.Name+" redelivery", mustSend(t, ctx, client, px, tc.p, tc.p.Event(1)), 200, "duplicate")
		if got := ttl(tc.key); got < tc.minTTL {
			t.Errorf("completed record %q: PTTL %s; want at least %s (-2ms: missing, -1ms: never expires). Keys: %q",
				tc.key, got, tc.minTTL, redisKeys(srv.Addr))
		}
	}

	ev := github.Event(1)
	claim := "e2e-keys:github:" + ev.ID
	release := app.Hold()
	t.Cleanup(release)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = github.send(ctx, client, px.Addr, ev)
	}()
	app.awaitEntered(t, key(github, ev.ID), px.bounds().claimed())
	if got := ttl(claim); got <= 0 || got > 20*time.Second {
		t.Errorf("in-flight claim %q: PTTL %s; want in (0, LEASE_TTL=20s]. Keys: %q", claim, got, redisKeys(srv.Addr))
	}
	release()
	<-done

	// DEDUP_TTL overrides every preset's lifetime.
	short := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL(), "KEY_PREFIX": "e2e-short:", "DEDUP_TTL": "1h"}))
	expect(t, "stripe with DEDUP_TTL=1h", mustSend(t, ctx, client, short, stripe, stripe.Event(2)), 200, "forwarded")
	expect(t, "stripe redelivery with DEDUP_TTL=1h", mustSend(t, ctx, client, short, stripe, stripe.Event(2)), 200, "duplicate")
	if got := ttl("e2e-short:stripe:" + stripe.Event(2).ID); got <= 0 || got > time.Hour {
		t.Errorf("with DEDUP_TTL=1h the completed record's PTTL is %s; want in (0, 1h]", got)
	}
}

func redisKeys(addr string) string {
	reply, err := redisCommand(addr, "KEYS", "*")
	if err != nil {
		return err.Error()
	}
	return reply
}

// redisInt runs one command that answers an integer.
func redisInt(addr string, args ...string) (int64, error) {
	reply, err := redisCommand(addr, args...)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(reply, 10, 64)
}

// redisCommand runs one command over RESP and returns its reply as text
// (arrays joined by spaces): enough to inspect keys without a client library.
// Its deadline is no wait for an event but a guard against a Redis that
// never answers: a command to a Redis on loopback takes nothing the
// proxy configures, only what a loaded machine adds (loadMargin).
func redisCommand(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, loadMargin)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(loadMargin))
	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, req.String()); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch kind, rest := line[0], line[1:]; kind {
	case '+', ':':
		return rest, nil
	case '-':
		return "", fmt.Errorf("redis: %s", rest)
	case '$':
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, n)
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, " "), nil
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
}
