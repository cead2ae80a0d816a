package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

const adminToken = "e2e-admin-token-5b1c"

// TestOpsReadinessFollowsRedis: /readyz and the healthcheck subcommand say
// ready while Redis answers, not ready while it is down, and ready again
// once it is back, without a restart; /healthz says alive throughout.
func TestOpsReadinessFollowsRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL()}))
	healthcheck := func(want int, what string) {
		t.Helper()
		code, out, errOut := cli(t, map[string]string{"ADMIN_ADDR": px.Admin}, "healthcheck")
		if code != want {
			t.Errorf("%s: webhook-dedup healthcheck exited %d, want %d; stdout %q, stderr %q", what, code, want, out, errOut)
		}
	}

	if err := px.pollAdmin("/readyz", http.StatusOK, storeStateDeadline); err != nil {
		t.Fatalf("readyz with Redis up: %v", err)
	}
	healthcheck(0, "Redis up")

	srv.Stop()
	if err := px.pollAdmin("/readyz", http.StatusServiceUnavailable, storeStateDeadline); err != nil {
		t.Fatalf("readyz with Redis down: %v", err)
	}
	healthcheck(1, "Redis down")
	if err := px.pollAdmin("/healthz", http.StatusOK, loadMargin); err != nil {
		t.Errorf("healthz with Redis down: %v (the process is alive)", err)
	}

	srv.Start()
	if err := px.pollAdmin("/readyz", http.StatusOK, storeStateDeadline); err != nil {
		t.Fatalf("readyz after Redis is back: %v", err)
	}
	healthcheck(0, "Redis back")
}

// TestOpsMetricsMoveWithTraffic: /metrics parses as Prometheus's text
// format, carries the Go runtime and process metrics, and its counters
// and histograms move with each kind of traffic.
func TestOpsMetricsMoveWithTraffic(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL(), "MAX_BODY_BYTES": "4096"}))
	ctx, client := testContext(t), newClient(t)

	before := px.metrics(t)
	for _, name := range []string{
		"go_goroutines", "go_memstats_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes",
		"webhook_dedup_upstream_duration_seconds", "webhook_dedup_added_latency_seconds",
		"webhook_dedup_claims_released_total", "webhook_dedup_leases_lost_total", "webhook_dedup_inflight_claims",
	} {
		if _, ok := before[name]; !ok {
			t.Errorf("/metrics before any traffic lacks %s", name)
		}
	}
	if v := sample(before, "webhook_dedup_inflight_claims", nil); v != 0 {
		t.Errorf("webhook_dedup_inflight_claims = %v with nothing in flight", v)
	}

	requests := func(route, outcome string) map[string]string {
		return map[string]string{"route": route, "outcome": outcome}
	}
	// Each step sends traffic of one kind, then waits for the metric that
	// must count it to reach its expected value.
	steps := []struct {
		what   string
		send   func()
		metric string
		labels map[string]string
		delta  float64
	}{
		{"first delivery", func() {
			expect(t, "first delivery", mustSend(t, ctx, client, px, acme, acme.Event(1)), 200, "forwarded")
		}, "webhook_dedup_requests_total", requests(acme.Path, "forwarded"), 1},
		{"duplicate", func() {
			expect(t, "redelivery", settledSend(t, ctx, client, px, acme, acme.Event(1)), 200, "duplicate")
		}, "webhook_dedup_requests_total", requests(acme.Path, "duplicate"), 1},
		{"invalid signature", func() {
			req, err := stripe.request(ctx, px.Addr, stripe.Event(1))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Stripe-Signature", stripeSignature("whsec_wrong", time.Now(), stripe.Event(1).Body))
			a, err := do(client, req)
			if err != nil {
				t.Fatal(err)
			}
			expect(t, "forged delivery", a, 401, "invalid-signature")
		}, "webhook_dedup_requests_total", requests(stripe.Path, "invalid-signature"), 1},
		{"too large", func() {
			expect(t, "large delivery", mustSend(t, ctx, client, px, jsonPath, jsonOfSize("big", 8192)), 413, "too-large")
		}, "webhook_dedup_requests_total", requests(jsonPath.Path, "too-large"), 1},
		{"missing ID", func() {
			expect(t, "delivery without ID", mustSend(t, ctx, client, px, acme, event{Body: []byte("no id")}), 200, "forwarded-unchecked")
		}, "webhook_dedup_requests_total", requests(acme.Path, "forwarded-unchecked"), 1},
		{"app answers 500: claim released", func() {
			app.FailWhen(func(k string, attempt int) bool { return k == key(acme, acme.Event(2).ID) && attempt == 1 })
			expect(t, "delivery the app fails", mustSend(t, ctx, client, px, acme, acme.Event(2)), 500, "forwarded")
		}, "webhook_dedup_claims_released_total", nil, 1},
		{"claims", nil, "webhook_dedup_store_duration_seconds", map[string]string{"op": "claim"}, 3},
		{"completions", nil, "webhook_dedup_store_duration_seconds", map[string]string{"op": "complete"}, 1},
		{"releases", nil, "webhook_dedup_store_duration_seconds", map[string]string{"op": "release"}, 1},
		{"upstream exchanges", nil, "webhook_dedup_upstream_duration_seconds", nil, 3},
		{"added latency", nil, "webhook_dedup_added_latency_seconds", nil, 3},
		{"Redis down", func() {
			srv.Stop()
			expect(t, "delivery with Redis down", mustSend(t, ctx, client, px, acme, acme.Event(3)), 503, "store-unavailable")
		}, "webhook_dedup_store_errors_total", map[string]string{"op": "claim"}, 1},
		{"store-unavailable", nil, "webhook_dedup_requests_total", requests(acme.Path, "store-unavailable"), 1},
	}
	for _, s := range steps {
		base := sample(before, s.metric, s.labels)
		if s.send != nil {
			s.send()
		}
		px.awaitMetric(t, s.metric, s.labels, base+s.delta)
	}

	after := px.metrics(t)
	if v := sample(after, "webhook_dedup_inflight_claims", nil); v != 0 {
		t.Errorf("webhook_dedup_inflight_claims = %v after every request finished", v)
	}
	if v := sample(after, "webhook_dedup_store_errors_total", map[string]string{"op": "complete"}); v != 0 {
		t.Errorf("store errors on complete: %v; Redis was up for every completion", v)
	}
	// The upstream histogram's observations are real durations.
	fam := after["webhook_dedup_upstream_duration_seconds"]
	if h := fam.GetMetric()[0].GetHistogram(); h.GetSampleSum() <= 0 || len(h.GetBucket()) == 0 {
		t.Errorf("webhook_dedup_upstream_duration_seconds: sum %v with %d buckets; want a positive sum over buckets", h.GetSampleSum(), len(h.GetBucket()))
	}
}

// TestOpsAdminAPI: the events API refuses a missing or wrong token,
// inspects in-flight and completed events (a generic route's namespace
// path-escaped), and forgets one so that its redelivery is forwarded again.
// Without ADMIN_TOKEN it does not exist.
func TestOpsAdminAPI(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL(), "ADMIN_TOKEN": adminToken}))
	ctx, client := testContext(t), newClient(t)

	ev := acme.Event(1)
	acmePath := "/v1/events/" + url.PathEscape(acme.Path) + "/" + url.PathEscape(ev.ID)
	if acmePath != "/v1/events/%2Fhooks%2Facme/"+ev.ID {
		t.Fatalf("escaped path %q", acmePath)
	}
	if a := px.adminDo(t, http.MethodGet, acmePath, adminToken); a.Status != http.StatusNotFound {
		t.Errorf("GET before any delivery: %s, want 404", a)
	}
	expect(t, "first delivery", mustSend(t, ctx, client, px, acme, ev), 200, "forwarded")
	expect(t, "redelivery", settledSend(t, ctx, client, px, acme, ev), 200, "duplicate")

	for _, tc := range []struct {
		name, tok string
	}{{"no token", ""}, {"wrong token", "not-" + adminToken}} {
		for _, method := range []string{http.MethodGet, http.MethodDelete} {
			a := px.adminDo(t, method, acmePath, tc.tok)
			if a.Status != http.StatusUnauthorized || !strings.HasPrefix(a.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s: %s WWW-Authenticate %q; want 401 with a Bearer challenge", method, tc.name, a, a.Header.Get("WWW-Authenticate"))
			}
		}
	}

	a := px.adminDo(t, http.MethodGet, acmePath, adminToken)
	if a.Status != http.StatusOK {
		t.Fatalf("GET a completed event: %s, want 200", a)
	}
	got := decodeEvent(t, "completed event", a.Body)
	if got.State != "completed" || got.Status == nil || *got.Status != 200 || got.Namespace != acme.Path || got.ID != ev.ID {
		t.Errorf("completed event: %s; want state completed, status 200, namespace %q, id %q", a.Body, acme.Path, ev.ID)
	}

	// An event still at the app.
	gh := github.Event(1)
	release := app.Hold()
	t.Cleanup(release)
	first := sendAsync(ctx, client, px, github, gh)
	app.awaitEntered(t, key(github, gh.ID), px.bounds().claimed())
	ghPath := "/v1/events/github/" + gh.ID
	a = px.adminDo(t, http.MethodGet, ghPath, adminToken)
	if a.Status != http.StatusOK {
		t.Fatalf("GET an in-flight event: %s, want 200", a)
	}
	lease := px.bounds().cfg.LeaseTTL
	if got := decodeEvent(t, "in-flight event", a.Body); got.State != "in-flight" || got.Status != nil || *got.TTLSeconds > lease.Seconds() {
		t.Errorf("in-flight event: %s; want state in-flight, no status, ttl_seconds ≤ the %s lease", a.Body, lease)
	}
	release()
	expect(t, "the held delivery", px.receive(t, "held delivery", first), 200, "forwarded")

	// Forget: the redelivery is forwarded again, once.
	if a := px.adminDo(t, http.MethodDelete, acmePath, adminToken); a.Status != http.StatusNoContent {
		t.Fatalf("DELETE: %s, want 204", a)
	}
	if a := px.adminDo(t, http.MethodGet, acmePath, adminToken); a.Status != http.StatusNotFound {
		t.Errorf("GET after DELETE: %s, want 404", a)
	}
	if a := px.adminDo(t, http.MethodDelete, acmePath, adminToken); a.Status != http.StatusNotFound {
		t.Errorf("second DELETE: %s, want 404", a)
	}
	expect(t, "redelivery after forget", mustSend(t, ctx, client, px, acme, ev), 200, "forwarded")
	expect(t, "next redelivery", settledSend(t, ctx, client, px, acme, ev), 200, "duplicate")
	if n := app.Attempts(key(acme, ev.ID)); n != 2 {
		t.Errorf("the app saw %d deliveries of the forgotten event, want 2", n)
	}
	px.awaitLog(t, "event forgotten by the admin API", 1)

	// Without ADMIN_TOKEN the API does not exist, whatever is sent.
	closed := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL()}))
	for _, tok := range []string{"", adminToken} {
		for _, method := range []string{http.MethodGet, http.MethodDelete, http.MethodPost} {
			if a := closed.adminDo(t, method, acmePath, tok); a.Status != http.StatusNotFound {
				t.Errorf("without ADMIN_TOKEN, %s %s (token %q): %s, want 404", method, acmePath, tok, a)
			}
		}
	}
	if a := closed.adminDo(t, http.MethodGet, "/v1/events/github/"+gh.ID, ""); a.Status != http.StatusNotFound {
		t.Errorf("without ADMIN_TOKEN, GET a known event: %s, want 404", a)
	}
}

// TestOpsCLI: inspect and forget work straight against the running
// proxy's Redis, with the proxy's own configuration; healthcheck asks its
// admin port; usage errors exit 2.
func TestOpsCLI(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	env := proxyEnv(app, map[string]string{"REDIS_URL": srv.URL(), "KEY_PREFIX": "e2e-cli:"})
	px := startProxy(t, env)
	ctx, client := testContext(t), newClient(t)
	// The commands get the same environment the proxy has.
	cmdEnv := map[string]string{"ADMIN_ADDR": px.Admin}
	for k, v := range env {
		cmdEnv[k] = v
	}

	ev := stripe.Event(1)
	expect(t, "first delivery", mustSend(t, ctx, client, px, stripe, ev), 200, "forwarded")
	expect(t, "redelivery", settledSend(t, ctx, client, px, stripe, ev), 200, "duplicate")

	code, out, errOut := cli(t, cmdEnv, "inspect", "stripe", ev.ID)
	if code != 0 {
		t.Fatalf("inspect: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var rec struct {
		State      string   `json:"state"`
		Status     int      `json:"status"`
		TTLSeconds *float64 `json:"ttl_seconds"`
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.State != "completed" || rec.Status != 200 || rec.TTLSeconds == nil || *rec.TTLSeconds < 72*3600 {
		t.Errorf("inspect printed %q (%v); want JSON with state completed, status 200, ttl_seconds beyond Stripe's 3 days", out, err)
	}
	// A generic route's namespace is its path.
	expect(t, "acme delivery", mustSend(t, ctx, client, px, acme, acme.Event(1)), 200, "forwarded")
	if code, out, errOut := cli(t, cmdEnv, "inspect", acme.Path, acme.Event(1).ID); code != 0 || !strings.Contains(out, acme.Event(1).ID) {
		t.Errorf("inspect %s: exit %d, stdout %q, stderr %q", acme.Path, code, out, errOut)
	}

	if code, out, errOut := cli(t, cmdEnv, "forget", "stripe", ev.ID); code != 0 || !strings.Contains(out, "forgot") {
		t.Errorf("forget: exit %d, stdout %q, stderr %q; want 0", code, out, errOut)
	}
	if code, _, errOut := cli(t, cmdEnv, "inspect", "stripe", ev.ID); code != 1 || !strings.Contains(errOut, "no record") {
		t.Errorf("inspect after forget: exit %d, stderr %q; want 1 saying there is no record", code, errOut)
	}
	if code, _, errOut := cli(t, cmdEnv, "forget", "stripe", ev.ID); code != 1 {
		t.Errorf("second forget: exit %d, stderr %q; want 1", code, errOut)
	}
	expect(t, "redelivery after forget", mustSend(t, ctx, client, px, stripe, ev), 200, "forwarded")
	if n := app.Attempts(key(stripe, ev.ID)); n != 2 {
		t.Errorf("the app saw %d deliveries of the forgotten event, want 2", n)
	}

	if code, out, errOut := cli(t, cmdEnv, "healthcheck"); code != 0 || strings.TrimSpace(out) != "ready" {
		t.Errorf("healthcheck: exit %d, stdout %q, stderr %q; want 0 and \"ready\"", code, out, errOut)
	}
	for _, args := range [][]string{{"inspect"}, {"forget", "stripe"}, {"inspect", "a", "b", "c"}} {
		if code, _, errOut := cli(t, cmdEnv, args...); code != 2 || !strings.Contains(errOut, "usage") {
			t.Errorf("webhook-dedup %s: exit %d, stderr %q; want 2 with a usage line", strings.Join(args, " "), code, errOut)
		}
	}
	if code, _, errOut := cli(t, map[string]string{}, "inspect", "stripe", ev.ID); code != 2 || !strings.Contains(errOut, "REDIS_URL") {
		t.Errorf("inspect without REDIS_URL: exit %d, stderr %q; want 2 naming REDIS_URL", code, errOut)
	}
}

// TestOpsShutdownCompletesSlowRequest: SIGTERM while the app works on a
// delivery: the delivery still gets the app's 2xx, the claim is completed
// (a redelivery to the next proxy on the same Redis is a duplicate), and
// the process exits 0.
func TestOpsShutdownCompletesSlowRequest(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	env := proxyEnv(app, map[string]string{"REDIS_URL": srv.URL(), "SHUTDOWN_TIMEOUT": "10s"})
	px := startProxy(t, env)
	ctx, client := testContext(t), newClient(t)

	ev := stripe.Event(1)
	release := app.Hold()
	t.Cleanup(release)
	first := sendAsync(ctx, client, px, stripe, ev)
	app.awaitEntered(t, key(stripe, ev.ID), px.bounds().claimed())
	px.Terminate()
	// Shutdown has begun once readyz turns 503, at once on SIGTERM; the
	// app then finishes.
	if err := px.pollAdmin("/readyz", http.StatusServiceUnavailable, loadMargin); err != nil {
		t.Errorf("readyz after SIGTERM: %v", err)
	}
	release()
	expect(t, "the delivery at the app during shutdown", px.receive(t, "delivery during shutdown", first), 200, "forwarded")
	if code := px.waitExit(px.bounds().exited()); code != 0 {
		t.Errorf("exit status after SIGTERM: %d, want 0", code)
	}

	next := startProxy(t, env)
	expect(t, "redelivery to the next proxy", mustSend(t, ctx, client, next, stripe, ev), 200, "duplicate")
	if a, e := app.Attempts(key(stripe, ev.ID)), app.Effects(key(stripe, ev.ID)); a != 1 || e != 1 {
		t.Errorf("%d attempts with %d effects at the app; want 1 and 1", a, e)
	}
}

// TestOpsShutdownReleasesUnfinishedClaim: SIGTERM while the app works on a
// delivery longer than SHUTDOWN_TIMEOUT: the proxy gives up on it, releases
// its claim and exits 0; the provider's retry, to the next proxy on the
// same Redis, is forwarded (not refused as in flight until the lease ends).
func TestOpsShutdownReleasesUnfinishedClaim(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	env := proxyEnv(app, map[string]string{
		"REDIS_URL":        srv.URL(),
		"SHUTDOWN_TIMEOUT": "1s",
		"UPSTREAM_TIMEOUT": "30s", // the lease (45s) outlasts the test
	})
	px := startProxy(t, env)
	ctx, client := testContext(t), newClient(t)

	ev := stripe.Event(1)
	k := key(stripe, ev.ID)
	release := app.Hold()
	t.Cleanup(release)
	first := sendAsync(ctx, client, px, stripe, ev)
	app.awaitEntered(t, k, px.bounds().claimed())
	px.Terminate()
	// Abandoned once draining runs out of time, before the exit.
	app.awaitAbandoned(t, k, px.bounds().exited())
	if code := px.waitExit(px.bounds().exited()); code != 0 {
		t.Errorf("exit status after SIGTERM: %d, want 0", code)
	}
	// The sender gets the proxy's 502, or loses the connection as the
	// server closes; either way it retries.
	if a := px.receive(t, "abandoned delivery", first); a.Status >= 200 && a.Status < 300 {
		t.Errorf("the abandoned delivery was answered %s; want no 2xx", a)
	} else {
		t.Logf("the abandoned delivery got: %s", a)
	}
	if !strings.Contains(px.Logs(), "drain timed out") {
		t.Errorf("the proxy did not log that draining ran out of time")
	}
	if keys := redisKeys(srv.Addr); strings.Contains(keys, ev.ID) {
		t.Errorf("the claim is still in Redis after shutdown: keys %q", keys)
	}

	release()
	next := startProxy(t, env)
	expect(t, "retry to the next proxy", mustSend(t, ctx, client, next, stripe, ev), 200, "forwarded")
	if a, e := app.Attempts(k), app.Effects(k); a != 2 || e != 1 {
		t.Errorf("%d attempts with %d effects at the app; want 2 and 1", a, e)
	}
}

// TestOpsShadowMode: with SHADOW_MODE every duplicate is still forwarded,
// marked shadow-duplicate, logged and counted; a changed payload under a
// known ID is counted as a mismatch.
func TestOpsShadowMode(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{"SHADOW_MODE": "true"}))
	ctx, client := testContext(t), newClient(t)

	for _, p := range []provider{acme, stripe} {
		ev := p.Event(1)
		expect(t, p.Name+" first delivery", mustSend(t, ctx, client, px, p, ev), 200, "forwarded")
		for i := range 2 {
			a := mustSend(t, ctx, client, px, p, ev)
			expect(t, fmt.Sprintf("%s redelivery %d", p.Name, i+1), a, 200, "shadow-duplicate")
			if want := fmt.Sprintf(`{"received":%q}`, key(p, ev.ID)); string(a.Body) != want {
				t.Errorf("%s redelivery: body %q, want the app's %s", p.Name, a.Body, want)
			}
		}
		if n := app.Attempts(key(p, ev.ID)); n != 3 {
			t.Errorf("%s: the app saw %d of 3 deliveries; shadow mode forwards every one", p.Name, n)
		}
		px.awaitMetric(t, "webhook_dedup_requests_total", map[string]string{"route": p.Path, "outcome": "shadow-duplicate"}, 2)
	}

	// Same Stripe event ID, different body.
	changed := stripe.Event(1)
	changed.Body = []byte(strings.Replace(string(changed.Body), `"amount_paid":101`, `"amount_paid":999`, 1))
	if string(changed.Body) == string(stripe.Event(1).Body) {
		t.Fatal("the changed body is the same")
	}
	expect(t, "changed payload", mustSend(t, ctx, client, px, stripe, changed), 200, "shadow-duplicate")
	px.awaitMetric(t, "webhook_dedup_payload_mismatch_total", map[string]string{"route": stripe.Path}, 1)
	px.awaitLog(t, "different body", 1)
	px.awaitLog(t, `"outcome":"shadow-duplicate"`, 5)
}

// TestOpsReplayResponse: with REPLAY_RESPONSE a duplicate gets the original
// answer's status, Content-Type and body (a TwiML reply, say); an answer
// larger than REPLAY_MAX_BYTES is not kept, and its duplicates get the
// plain duplicate answer.
func TestOpsReplayResponse(t *testing.T) {
	t.Parallel()
	const twiml = `<?xml version="1.0" encoding="UTF-8"?><Response><Message>Thanks!</Message></Response>`
	big := strings.Repeat("x", 200)
	app := newAnsweringApp(t, func(id string) (int, string, string) {
		if id == "big" {
			return http.StatusAccepted, "text/plain", big
		}
		return http.StatusCreated, "application/xml; charset=utf-8", twiml
	})
	px := startProxy(t, map[string]string{
		"UPSTREAM_URL":     app.URL,
		"ROUTES":           routes(acme),
		"REPLAY_RESPONSE":  "true",
		"REPLAY_MAX_BYTES": "128",
	})
	ctx, client := testContext(t), newClient(t)

	ev := acme.Event(1)
	first := mustSend(t, ctx, client, px, acme, ev)
	expect(t, "first delivery", first, http.StatusCreated, "forwarded")
	for i := range 2 {
		dup := mustSend(t, ctx, client, px, acme, ev)
		expect(t, "redelivery", dup, http.StatusCreated, "duplicate")
		if ct := dup.Header.Get("Content-Type"); ct != "application/xml; charset=utf-8" || string(dup.Body) != twiml {
			t.Errorf("redelivery %d: Content-Type %q, body %q; want the original's", i+1, ct, dup.Body)
		}
	}
	if n := app.Calls(ev.ID); n != 1 {
		t.Errorf("the app saw %d deliveries, want 1", n)
	}

	bigEv := event{ID: "big", Body: []byte("big")}
	if a := mustSend(t, ctx, client, px, acme, bigEv); a.Status != http.StatusAccepted || string(a.Body) != big {
		t.Errorf("first delivery of an event with a large answer: %s", a)
	}
	dup := mustSend(t, ctx, client, px, acme, bigEv)
	expect(t, "redelivery of an event whose answer was too large to keep", dup, 200, "duplicate")
	if !strings.HasPrefix(dup.Header.Get("Content-Type"), "application/json") || !strings.Contains(string(dup.Body), `"duplicate"`) {
		t.Errorf("redelivery of an event whose answer was too large: %s; want the plain duplicate JSON", dup)
	}
	if n := app.Calls("big"); n != 1 {
		t.Errorf("the app saw %d deliveries of the large-answer event, want 1", n)
	}
}

// TestOpsInflightWait: with INFLIGHT_WAIT a copy that arrives while the
// first is at the app waits for its outcome: it is a duplicate if the first
// completes, and forwarded if the first is released; when the wait ends
// with the first still at the app it gets INFLIGHT_STATUS with Retry-After.
func TestOpsInflightWait(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)

	// waiting reports once a copy is waiting: its polls of the first's
	// record show up as store lookups.
	waiting := func(t *testing.T, px *proxy) {
		t.Helper()
		base := sample(px.metrics(t), "webhook_dedup_store_duration_seconds", map[string]string{"op": "lookup"})
		px.awaitMetric(t, "webhook_dedup_store_duration_seconds", map[string]string{"op": "lookup"}, base+1)
	}

	t.Run("first completes during the wait", func(t *testing.T) {
		t.Parallel()
		app := newUpstream(t)
		px := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL(), "KEY_PREFIX": "e2e-wait-a:", "INFLIGHT_WAIT": "20s"}))
		ctx, client := testContext(t), newClient(t)
		ev := acme.Event(1)
		release := app.Hold()
		t.Cleanup(release)
		first := sendAsync(ctx, client, px, acme, ev)
		app.awaitEntered(t, key(acme, ev.ID), px.bounds().claimed())
		copyCh := sendAsync(ctx, client, px, acme, ev)
		waiting(t, px)
		release()
		expect(t, "first delivery", px.receive(t, "first", first), 200, "forwarded")
		expect(t, "copy that waited", px.receive(t, "copy", copyCh), 200, "duplicate")
		if n := app.Attempts(key(acme, ev.ID)); n != 1 {
			t.Errorf("the app saw %d deliveries, want 1", n)
		}
	})

	t.Run("first is released during the wait", func(t *testing.T) {
		t.Parallel()
		app := newUpstream(t)
		app.FailWhen(func(_ string, attempt int) bool { return attempt == 1 })
		px := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL(), "KEY_PREFIX": "e2e-wait-b:", "INFLIGHT_WAIT": "20s"}))
		ctx, client := testContext(t), newClient(t)
		ev := acme.Event(1)
		release := app.Hold()
		t.Cleanup(release)
		first := sendAsync(ctx, client, px, acme, ev)
		app.awaitEntered(t, key(acme, ev.ID), px.bounds().claimed())
		copyCh := sendAsync(ctx, client, px, acme, ev)
		waiting(t, px)
		release()
		expect(t, "first delivery, which the app fails", px.receive(t, "first", first), 500, "forwarded")
		expect(t, "copy that waited", px.receive(t, "copy", copyCh), 200, "forwarded")
		if a, e := app.Attempts(key(acme, ev.ID)), app.Effects(key(acme, ev.ID)); a != 2 || e != 1 {
			t.Errorf("%d attempts with %d effects at the app; want 2 and 1", a, e)
		}
	})

	t.Run("wait ends with the first still at the app", func(t *testing.T) {
		t.Parallel()
		app := newUpstream(t)
		// The first stays at the app, within UPSTREAM_TIMEOUT, until the
		// test has seen the copy's wait run out.
		px := startProxy(t, proxyEnv(app, map[string]string{
			"REDIS_URL": srv.URL(), "KEY_PREFIX": "e2e-wait-c:",
			"INFLIGHT_WAIT": "300ms", "INFLIGHT_STATUS": "503",
		}))
		ctx, client := testContext(t), newClient(t)
		ev := acme.Event(1)
		release := app.Hold()
		t.Cleanup(release)
		first := sendAsync(ctx, client, px, acme, ev)
		app.awaitEntered(t, key(acme, ev.ID), px.bounds().claimed())
		dup := mustSend(t, ctx, client, px, acme, ev)
		expect(t, "copy whose wait ran out", dup, http.StatusServiceUnavailable, "in-flight")
		if ra, err := dup.retryAfter(); err != nil || ra < 1 || time.Duration(ra)*time.Second > px.bounds().cfg.LeaseTTL {
			t.Errorf("Retry-After %q; want whole seconds in [1, %s] (the lease left): %v", dup.Header.Get("Retry-After"), px.bounds().cfg.LeaseTTL, err)
		}
		// It waited: it looked at the first's record.
		px.awaitMetric(t, "webhook_dedup_store_duration_seconds", map[string]string{"op": "lookup"}, 1)
		release()
		expect(t, "first delivery", px.receive(t, "first", first), 200, "forwarded")
		if n := app.Attempts(key(acme, ev.ID)); n != 1 {
			t.Errorf("the app saw %d deliveries, want 1", n)
		}
	})
}

// TestOpsRequestIDInLogs: each webhook's log line carries a request_id
// (the sender's X-Request-Id, else the provider's delivery ID) and the
// W3C traceparent, so it can be matched with the app's own logs.
func TestOpsRequestIDInLogs(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, nil))
	ctx, client := testContext(t), newClient(t)

	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	gh := github.Event(1)
	req, err := github.request(ctx, px.Addr, gh)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Traceparent", traceparent)
	a, err := do(client, req)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "GitHub delivery", a, 200, "forwarded")
	req, err = acme.request(ctx, px.Addr, acme.Event(1))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Request-Id", "ingress-req-42")
	if a, err = do(client, req); err != nil {
		t.Fatal(err)
	}
	expect(t, "acme delivery", a, 200, "forwarded")

	want := map[string]map[string]string{
		gh.ID:            {"request_id": gh.ID, "traceparent": traceparent},
		acme.Event(1).ID: {"request_id": "ingress-req-42"},
	}
	deadline := time.Now().Add(px.bounds().observed())
	for {
		found := map[string]map[string]any{}
		for _, line := range strings.Split(px.Logs(), "\n") {
			var entry map[string]any
			if json.Unmarshal([]byte(line), &entry) != nil || entry["msg"] != "webhook" {
				continue
			}
			if id, _ := entry["event_id"].(string); id != "" {
				found[id] = entry
			}
		}
		if len(found) >= len(want) || time.Now().After(deadline) {
			for id, fields := range want {
				for k, v := range fields {
					if got := found[id][k]; got != v {
						t.Errorf("log line for %s: %s = %v, want %q (line %v)", id, k, got, v, found[id])
					}
				}
			}
			return
		}
		time.Sleep(25 * time.Millisecond) // polling interval
	}
}

// TestOpsForgetWithBodyFingerprint: with DEDUP_BODY_FINGERPRINT the proxy
// also remembers each completed body; forgetting the event through the
// admin API forgets that too, so the redelivery (same body) is forwarded.
func TestOpsForgetWithBodyFingerprint(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{
		"REDIS_URL": srv.URL(), "ADMIN_TOKEN": adminToken, "DEDUP_BODY_FINGERPRINT": "true",
	}))
	ctx, client := testContext(t), newClient(t)

	ev := stripe.Event(1)
	expect(t, "first delivery", mustSend(t, ctx, client, px, stripe, ev), 200, "forwarded")
	expect(t, "redelivery", settledSend(t, ctx, client, px, stripe, ev), 200, "duplicate")
	if a := px.adminDo(t, http.MethodDelete, "/v1/events/stripe/"+ev.ID, adminToken); a.Status != http.StatusNoContent {
		t.Fatalf("DELETE: %s, want 204", a)
	}
	if keys := redisKeys(srv.Addr); strings.Contains(keys, "stripe") {
		t.Errorf("records of the forgotten event are left in Redis: %q", keys)
	}
	expect(t, "redelivery after forget", mustSend(t, ctx, client, px, stripe, ev), 200, "forwarded")
	if n := app.Attempts(key(stripe, ev.ID)); n != 2 {
		t.Errorf("the app saw %d deliveries, want 2", n)
	}
}

// TestOpsForgetInFlight: forgetting an event while its first delivery is
// at the app frees the ID at once; the first delivery's completion is then
// refused (counted as a lost lease, logged) rather than overwriting what
// happened since, and the next delivery is forwarded. This is why the
// runbook says to forget an in-flight event only when its proxy is gone.
func TestOpsForgetInFlight(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL(), "ADMIN_TOKEN": adminToken}))
	ctx, client := testContext(t), newClient(t)

	ev := acme.Event(1)
	path := "/v1/events/" + url.PathEscape(acme.Path) + "/" + ev.ID
	release := app.Hold()
	t.Cleanup(release)
	first := sendAsync(ctx, client, px, acme, ev)
	app.awaitEntered(t, key(acme, ev.ID), px.bounds().claimed())
	if a := px.adminDo(t, http.MethodDelete, path, adminToken); a.Status != http.StatusNoContent {
		t.Fatalf("DELETE an in-flight event: %s, want 204", a)
	}
	release()
	expect(t, "the first delivery", px.receive(t, "first", first), 200, "forwarded")
	px.awaitMetric(t, "webhook_dedup_leases_lost_total", nil, 1)
	px.awaitLog(t, "lease expired before complete", 1)
	if a := px.adminDo(t, http.MethodGet, path, adminToken); a.Status != http.StatusNotFound {
		t.Errorf("GET after the refused completion: %s, want 404", a)
	}
	expect(t, "next delivery", mustSend(t, ctx, client, px, acme, ev), 200, "forwarded")
}

// TestOpsSIGINT: SIGINT (Ctrl-C) stops the process as SIGTERM does, exit 0.
func TestOpsSIGINT(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, nil))
	if err := px.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := px.waitExit(px.bounds().exited()); code != 0 {
		t.Errorf("exit status after SIGINT: %d, want 0", code)
	}
	if !strings.Contains(px.Logs(), `"msg":"stopped"`) {
		t.Errorf("the process did not log that it stopped")
	}
}
