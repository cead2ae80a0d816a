package test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// asyncStore is a store async delivery runs on, as the tests set it up.
type asyncStore struct {
	name string
	env  func(t *testing.T) map[string]string
}

var (
	diskStore = asyncStore{"DATA_DIR", func(t *testing.T) map[string]string {
		return map[string]string{"DATA_DIR": t.TempDir()}
	}}
	redisStore = asyncStore{"Redis", func(t *testing.T) map[string]string {
		srv := redistest.New(t, "--appendonly", "yes", "--maxmemory-policy", "noeviction")
		return map[string]string{"REDIS_URL": srv.URL()}
	}}
	clusterStore = asyncStore{"Redis Cluster", func(t *testing.T) map[string]string {
		c := redistest.NewCluster(t, redistest.ClusterConfig{Args: []string{"--appendonly", "yes"}})
		return map[string]string{"REDIS_CLUSTER_ADDRS": strings.Join(c.Addrs(), ",")}
	}}
)

// TestAsyncSlowApp: behind an app that is still working on the event, the
// sender is answered 202 queued at once; the admin API shows the event
// queued or being delivered, then completed; a copy meanwhile is a
// duplicate; one effect.
func TestAsyncSlowApp(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	px := startProxy(t, asyncEnv(app.URL, diskStore.env(t)))
	ctx, client := testContext(t), newClient(t)
	// The app works until the test lets it go: an answer that arrives
	// meanwhile did not wait for the app, however slowly a loaded machine
	// made it come.
	finish := app.Hold()
	t.Cleanup(finish)

	ev := stripe.Event(1)
	// Queued is answered once the event is claimed, whatever the app does.
	queued := px.bounds().claimed()
	start := time.Now()
	sendCtx, cancel := context.WithTimeout(ctx, queued)
	a, err := stripe.send(sendCtx, client, px.Addr, ev)
	cancel()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("no answer within %s while the app still works on the event: the sender waits for the app (%v)", queued, err)
	}
	expect(t, "first delivery", a, http.StatusAccepted, "queued")
	if want := fmt.Sprintf(`{"status":"queued","event_id":%q}`, ev.ID); strings.TrimSpace(string(a.Body)) != want {
		t.Errorf("body %s, want %s", a.Body, want)
	}
	if st := px.event(t, stripe, ev.ID).State; st != "queued" && st != "delivering" {
		t.Errorf("admin API right after the 202: state %q, want queued or delivering", st)
	}
	app.awaitEntered(t, key(stripe, ev.ID), px.bounds().delivered(1))
	if got := px.event(t, stripe, ev.ID); got.State != "delivering" || got.Attempts != 1 {
		t.Errorf("admin API while the app works: %+v, want delivering, attempt 1", got)
	}
	expect(t, "a copy while it is delivered", mustSend(t, ctx, client, px, stripe, ev), 200, "duplicate")
	finish()
	done := px.awaitState(t, stripe, ev.ID, "completed", px.bounds().delivered(1))
	if done.Status != 200 {
		t.Errorf("completed with status %d, want the app's 200", done.Status)
	}
	expect(t, "a copy after completion", mustSend(t, ctx, client, px, stripe, ev), 200, "duplicate")
	if n := app.Effects(key(stripe, ev.ID)); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
	t.Logf("e2e async slow app: sender answered in %s while the app was still working", took.Round(time.Millisecond))
}

// TestAsyncExactlyOnceDisk: hundreds of events, each sent 1–4 times with
// concurrent copies, while the app fails a fifth of its requests: every
// sender attempt is answered 2xx, every event takes effect exactly once.
func TestAsyncExactlyOnceDisk(t *testing.T) {
	t.Parallel()
	asyncExactlyOnceRun(t, diskStore)
}

// TestAsyncExactlyOnceRedis is the same run on one Redis.
func TestAsyncExactlyOnceRedis(t *testing.T) {
	t.Parallel()
	asyncExactlyOnceRun(t, redisStore)
}

// TestAsyncExactlyOnceCluster is the same run on a Redis Cluster.
func TestAsyncExactlyOnceCluster(t *testing.T) {
	t.Parallel()
	asyncExactlyOnceRun(t, clusterStore)
}

func asyncExactlyOnceRun(t *testing.T, st asyncStore) {
	app := newUpstream(t)
	fails := func(k string, attempt int) bool { return seeded(runSeed, runFailOneIn, k, attempt) }
	app.FailWhen(fails)
	const mostWork = 8 * time.Millisecond // the app's longest answer
	app.WorkFor(func(k string, attempt int) time.Duration {
		return time.Duration(draw(runSeed+1, k, attempt)%8) * time.Millisecond
	})
	env := asyncEnv(app.URL, st.env(t))
	env["RETRY_INITIAL_INTERVAL"], env["RETRY_MAX_INTERVAL"] = "20ms", "100ms"
	// The senders never retry, so a store call queued behind two dozen
	// events on a loaded machine must be slow, not unavailable: 2.5s
	// instead of the default 1s, as in exactlyOnceRun.
	env["STORE_TIMEOUT"] = "2500ms"
	px := startProxy(t, env)
	px.awaitReady(t) // every send here must be queued

	deliveries, copies := planDeliveries(runEvents, runSeed+2, 4)
	s := &sender{client: newClient(t), addr: px.Addr, maxAttempts: 1, backoff: func(int) time.Duration { return 0 }, tally: newTally()}
	ctx := testContext(t)
	start := time.Now()
	var (
		mu     sync.Mutex
		failed []string
	)
	// One attempt per copy (maxAttempts 1): a sender that never retries.
	sendPlanned(ctx, s, deliveries, runConcurrent, func(_ answer, err error) {
		if err != nil {
			mu.Lock()
			failed = append(failed, err.Error())
			mu.Unlock()
		}
	})
	accepted := time.Since(start)
	for _, f := range failed {
		t.Errorf("a sender attempt was not answered 2xx: %s", f)
	}
	// The app's failures are drawn from the seed, so the attempts each
	// event takes are known: the queue is drained once every event has had
	// its attempts, the one that needs the most of them last.
	var keys []string
	attempts, most := 0, 1
	for _, d := range deliveries {
		k := key(d.p, d.ev.ID)
		keys = append(keys, k)
		n := 1
		for fails(k, n) {
			n++
		}
		attempts, most = attempts+n, max(most, n)
	}
	b := px.bounds()
	awaitEffects(t, app, keys, b.delivered(most)+b.drained(attempts, mostWork))
	delivered := time.Since(start)
	px.awaitMetric(t, "webhook_dedup_deliveries_total", map[string]string{"result": "succeeded"}, float64(runEvents))
	checkOnceEach(t, app, deliveries)
	tl := s.tally
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for outcome, n := range tl.outcomes {
		if outcome != "queued" && outcome != "duplicate" {
			t.Errorf("%d answers had X-Webhook-Dedup %q, want queued or duplicate", n, outcome)
		}
	}
	if tl.outcomes["queued"] != runEvents || app.Failures() == 0 || tl.outcomes["duplicate"] == 0 {
		t.Errorf("queued %d (want %d), duplicates %d, app failures %d: the run proves nothing", tl.outcomes["queued"], runEvents, tl.outcomes["duplicate"], app.Failures())
	}
	summary := fmt.Sprintf("e2e async exactly-once [%s]: events=%d deliveries=%d answered-2xx=%d app-500s=%d effects=1 each; all accepted in %s, all delivered in %s",
		st.name, runEvents, copies, tl.requests-tl.errors, app.Failures(), accepted.Round(time.Millisecond), delivered.Round(time.Millisecond))
	t.Log(summary)
	fmt.Println(summary)
}

// TestAsyncAppDown: GitHub never retries. While the app is down, every
// delivery is still answered 202 and kept; once the app is back, each is
// delivered once.
func TestAsyncAppDown(t *testing.T) {
	t.Parallel()
	// The app is down: connections to its port are refused. The port is
	// drawn below the ephemeral range, so no outgoing connection takes it
	// before the app comes up on it.
	addr := redistest.FreeAddr(t)
	px := startProxy(t, asyncEnv("http://"+addr, diskStore.env(t)))
	const n = 20
	queued := time.Now()
	keys := queueEvents(t, px, github, n)
	// Events were tried and failed while the app was down, until the
	// workers took the app for down (DELIVERY_CONCURRENCY failures in a
	// row) and probed it one attempt at a time.
	px.awaitMetric(t, "webhook_dedup_deliveries_total", map[string]string{"result": "retry"}, 16)
	px.awaitLog(t, "the app does not answer: delivering one probe at a time", 1)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the app's port was taken meanwhile: %v", err)
	}
	app := newUpstreamOn(t, ln)
	// The next probe goes out within the probe pause, which doubles from a
	// tenth of a second: never longer than the probing so far, itself
	// shorter than the time since the events were queued. Then the queue
	// drains as usual.
	b := px.bounds()
	awaitEffects(t, app, keys, time.Since(queued)+b.delivered(1)+b.drained(n, 0))
	px.awaitMetric(t, "webhook_dedup_deliveries_total", map[string]string{"result": "succeeded"}, n)
	for _, k := range keys {
		if got := app.Effects(k); got != 1 {
			t.Errorf("%s took effect %d times, want once", k, got)
		}
	}
}

// TestAsyncDeadLetterAndRetry: an event the app keeps refusing is
// dead-lettered after RETRY_MAX_ATTEMPTS, listed (API and CLI), counted;
// once the app is fixed, a retry delivers it.
func TestAsyncDeadLetterAndRetry(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	broken := true
	app := newScriptedApp(t, func(id string, n int) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		if broken {
			return http.StatusInternalServerError, ""
		}
		return http.StatusOK, ""
	})
	env := asyncEnv(app.URL, diskStore.env(t))
	env["RETRY_MAX_ATTEMPTS"] = "3"
	px := startProxy(t, env)
	ctx, client := testContext(t), newClient(t)
	ev := acme.Event(7)
	expect(t, "delivery", mustSend(t, ctx, client, px, acme, ev), 202, "queued")
	failed := px.awaitState(t, acme, ev.ID, "failed", px.bounds().delivered(3))
	if failed.Attempts != 3 || failed.LastStatus != 500 || failed.LastError == "" {
		t.Errorf("dead letter: %+v, want 3 attempts, last status 500, an error", failed)
	}
	seen := app.seen(ev.ID)
	if len(seen) != 3 || seen[0].header != "1" || seen[2].header != "3" {
		t.Errorf("app saw %+v, want attempts 1, 2, 3", seen)
	}
	px.awaitMetric(t, "webhook_dedup_dead_letters", nil, 1)
	px.awaitMetric(t, "webhook_dedup_deliveries_total", map[string]string{"result": "dead-lettered"}, 1)
	px.awaitLog(t, `"level":"error"`, 1)
	expect(t, "a copy of the dead letter", mustSend(t, ctx, client, px, acme, ev), 200, "duplicate")

	list := px.adminDo(t, http.MethodGet, "/v1/dead-letters?limit=10", adminToken)
	if list.Status != 200 || !strings.Contains(string(list.Body), `"id":"`+ev.ID+`"`) || !strings.Contains(string(list.Body), `"namespace":"/hooks/acme"`) ||
		!strings.Contains(string(list.Body), `"next_cursor":""`) {
		t.Errorf("GET /v1/dead-letters: %s", list)
	}
	cliEnv := map[string]string{"ADMIN_ADDR": px.Admin, "ADMIN_TOKEN": adminToken}
	code, out, errOut := cli(t, cliEnv, "dead-letters")
	if code != 0 || !strings.Contains(out, ev.ID) {
		t.Errorf("webhook-dedup dead-letters: exit %d, %q %q", code, out, errOut)
	}
	mu.Lock()
	broken = false
	mu.Unlock()
	code, out, errOut = cli(t, cliEnv, "retry", "/hooks/acme", ev.ID)
	if code != 0 {
		t.Fatalf("webhook-dedup retry: exit %d, %q %q", code, out, errOut)
	}
	done := px.awaitState(t, acme, ev.ID, "completed", px.bounds().delivered(1))
	if done.Attempts != 1 {
		t.Errorf("completed after %d attempts since the retry, want 1 (a new first attempt)", done.Attempts)
	}
	if seen := app.seen(ev.ID); len(seen) != 4 || seen[3].header != "1" {
		t.Errorf("after the retry the app saw %+v, want a 4th request marked attempt 1", seen)
	}
	if r := px.adminDo(t, http.MethodPost, "/v1/events/%2Fhooks%2Facme/"+ev.ID+"/retry", adminToken); r.Status != 409 {
		t.Errorf("retry of a completed event: %s, want 409", r)
	}
	if r := px.adminDo(t, http.MethodPost, "/v1/events/%2Fhooks%2Facme/nope/retry", adminToken); r.Status != 404 {
		t.Errorf("retry of an unknown event: %s, want 404", r)
	}
	px.awaitMetric(t, "webhook_dedup_deliveries_total", map[string]string{"result": "succeeded"}, 1)
}

// TestAsyncRetryAfter: a 503 with Retry-After: 2 puts the next attempt at
// least 2 s later, though the backoff alone would retry within 50 ms; a
// Retry-After of an hour is capped at RETRY_MAX_INTERVAL (3 s).
func TestAsyncRetryAfter(t *testing.T) {
	t.Parallel()
	app := newScriptedApp(t, func(id string, n int) (int, string) {
		switch {
		case n == 1 && id == acme.Event(1).ID:
			return http.StatusServiceUnavailable, "2"
		case n == 1:
			return http.StatusTooManyRequests, "3600"
		}
		return http.StatusOK, ""
	})
	env := asyncEnv(app.URL, diskStore.env(t))
	env["RETRY_MAX_INTERVAL"] = "3s"
	px := startProxy(t, env)
	capped := acme.Event(2)
	expect(t, "delivery", mustSend(t, testContext(t), newClient(t), px, acme, capped), 202, "queued")
	ctx, client := testContext(t), newClient(t)
	ev := acme.Event(1)
	expect(t, "delivery", mustSend(t, ctx, client, px, acme, ev), 202, "queued")
	// Queued again after its first attempt, for the 2 s Retry-After asks.
	b := px.bounds()
	var queued asyncEvent
	await(t, b.delivered(1), func() error {
		if queued = px.event(t, acme, ev.ID); queued.State != "queued" || queued.LastStatus == 0 {
			return fmt.Errorf("event %s: %+v, want queued after its first attempt", ev.ID, queued)
		}
		return nil
	})
	if queued.LastStatus != 503 || queued.NextAttemptAt == "" {
		t.Errorf("after the 503: %+v, want last_status 503 and a next_attempt_at", queued)
	}
	px.awaitState(t, acme, ev.ID, "completed", b.delivered(2))
	seen := app.seen(ev.ID)
	if len(seen) != 2 {
		t.Fatalf("the app saw %d attempts, want 2", len(seen))
	}
	// The stores keep due times to the millisecond.
	if gap := seen[1].at.Sub(seen[0].at); gap < 2*time.Second-5*time.Millisecond {
		t.Errorf("second attempt %s after the first, want at least Retry-After's 2s", gap)
	} else {
		t.Logf("second attempt %s after a 503 with Retry-After: 2", gap.Round(time.Millisecond))
	}
	// Capped: delivered within RETRY_MAX_INTERVAL, not an hour later.
	px.awaitState(t, acme, capped.ID, "completed", b.delivered(2))
	if seen := app.seen(capped.ID); len(seen) != 2 || seen[1].at.Sub(seen[0].at) < 3*time.Second-5*time.Millisecond {
		t.Errorf("after a 429 with Retry-After: 3600 the app saw %+v; want the second attempt RETRY_MAX_INTERVAL (3s) later", seen)
	}
}

// TestAsyncConcurrency: with DELIVERY_CONCURRENCY=3 and a queue of ten,
// the app holds exactly three requests at once, never more.
func TestAsyncConcurrency(t *testing.T) {
	t.Parallel()
	app := newScriptedApp(t, nil)
	release := app.holdAll()
	t.Cleanup(release)
	env := asyncEnv(app.URL, diskStore.env(t))
	env["DELIVERY_CONCURRENCY"] = "3"
	px := startProxy(t, env)
	ctx, client := testContext(t), newClient(t)
	for i := range 10 {
		expect(t, "delivery", mustSend(t, ctx, client, px, acme, acme.Event(i)), 202, "queued")
	}
	b := px.bounds()
	await(t, b.delivered(1), func() error {
		if n := app.inside.Load(); n < 3 {
			return fmt.Errorf("%d requests at the app, want 3", n)
		}
		return nil
	})
	release()
	await(t, b.delivered(1)+b.drained(10, 0), func() error {
		if n := app.total(); n < 10 {
			return fmt.Errorf("%d of 10 events reached the app", n)
		}
		return nil
	})
	if m := app.most.Load(); m != 3 {
		t.Errorf("at most %d requests at the app at once, want DELIVERY_CONCURRENCY's 3", m)
	}
}

// TestAsyncRouteOverrides: ";async" under DELIVERY=sync, and ";sync"
// under DELIVERY=async.
func TestAsyncRouteOverrides(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	ctx, client := testContext(t), newClient(t)

	env := asyncEnv(app.URL, diskStore.env(t))
	env["DELIVERY"] = "sync"
	env["ROUTES"] = stripe.Path + "=" + stripe.Source + ";async," + github.Path + "=" + github.Source
	px := startProxy(t, env)
	expect(t, "stripe;async under DELIVERY=sync", mustSend(t, ctx, client, px, stripe, stripe.Event(1)), 202, "queued")
	expect(t, "github under DELIVERY=sync", mustSend(t, ctx, client, px, github, github.Event(1)), 200, "forwarded")
	px.awaitState(t, stripe, stripe.Event(1).ID, "completed", px.bounds().delivered(1))

	env = asyncEnv(app.URL, diskStore.env(t))
	env["ROUTES"] = stripe.Path + "=" + stripe.Source + "," + github.Path + "=" + github.Source + ";sync"
	px2 := startProxy(t, env)
	expect(t, "stripe under DELIVERY=async", mustSend(t, ctx, client, px2, stripe, stripe.Event(2)), 202, "queued")
	expect(t, "github;sync under DELIVERY=async", mustSend(t, ctx, client, px2, github, github.Event(2)), 200, "forwarded")
	px2.awaitState(t, stripe, stripe.Event(2).ID, "completed", px2.bounds().delivered(1))
	for _, k := range []string{key(stripe, stripe.Event(1).ID), key(stripe, stripe.Event(2).ID), key(github, github.Event(1).ID), key(github, github.Event(2).ID)} {
		if n := app.Effects(k); n != 1 {
			t.Errorf("%s: %d effects, want 1", k, n)
		}
	}
}

// TestAsyncRefusedInMemory: async delivery on the in-memory store (no
// DATA_DIR, no Redis) is refused at start, naming DELIVERY and DATA_DIR;
// so is an ";async" route, naming ROUTES (DELIVERY is not set).
func TestAsyncRefusedInMemory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env   map[string]string
		names string
	}{
		// Secrets, so that the store is what is refused.
		{map[string]string{"UPSTREAM_URL": "http://127.0.0.1:1", "DELIVERY": "async", "STRIPE_WEBHOOK_SECRET": stripeSecret}, "DELIVERY: "},
		{map[string]string{"UPSTREAM_URL": "http://127.0.0.1:1", "ROUTES": "/webhooks/github=github;async", "GITHUB_WEBHOOK_SECRET": githubSecret}, "ROUTES: "},
	} {
		code, logs, err := runToExit(t, tc.env)
		if err != nil || code != 2 || !strings.Contains(logs, tc.names) || !strings.Contains(logs, "DATA_DIR") {
			t.Errorf("%v: exit %d (%v), output %q; want exit 2 naming %s and DATA_DIR", tc.env, code, err, logs, tc.names)
		}
	}
}

// TestAsyncSIGTERM: SIGTERM with a queue: the attempts under way finish,
// the process exits 0, and the next process on the same store delivers the
// rest, each event once.
func TestAsyncSIGTERM(t *testing.T) {
	t.Parallel()
	asyncSIGTERMRun(t, diskStore)
}

// TestAsyncSIGTERMRedis is the same on Redis.
func TestAsyncSIGTERMRedis(t *testing.T) {
	t.Parallel()
	asyncSIGTERMRun(t, redisStore)
}

func asyncSIGTERMRun(t *testing.T, st asyncStore) {
	app := newUpstream(t)
	env := asyncEnv(app.URL, st.env(t))
	env["DELIVERY_CONCURRENCY"] = "2"
	px := launch(t, env)
	px.waitHealthy()
	px.awaitReady(t) // every send here must be queued
	// The app holds the attempts under way until the process has taken
	// SIGTERM, so the queue is still backed up then however slowly the
	// events were sent.
	release := app.Hold()
	t.Cleanup(release)
	keys := queueEvents(t, px, stripe, 20)
	app.awaitEntered(t, keys[0], px.bounds().delivered(1))
	px.Terminate()
	px.awaitLog(t, `"msg":"shutting down"`, 1)
	release()
	if code := px.waitExit(px.bounds().exited()); code != 0 {
		t.Fatalf("exit status after SIGTERM: %d, want 0", code)
	}
	before := 0
	for _, n := range app.EffectsSnapshot() {
		before += n
	}
	if before == 0 || before == len(keys) {
		t.Fatalf("%d of %d events delivered before the process stopped: the test proves nothing", before, len(keys))
	}
	next := startProxy(t, env)
	b := next.bounds()
	awaitEffects(t, app, keys, b.delivered(1)+b.drained(len(keys), 0))
	for _, k := range keys {
		if n := app.Effects(k); n != 1 {
			t.Errorf("%s took effect %d times, want once", k, n)
		}
	}
	next.awaitMetric(t, "webhook_dedup_deliveries_total", map[string]string{"result": "succeeded"}, float64(len(keys)-before))
	t.Logf("e2e async SIGTERM [%s]: %d of %d delivered before the stop (running attempts finished), the rest by the next process, each once", st.name, before, len(keys))
}

// TestAsyncKillRestart: a proxy SIGKILLed with events queued and in
// delivery, then restarted on the same store: none is lost. The ones whose
// attempt was cut short are taken over once their lease runs out; the app
// may then see one twice (at-least-once after a crash), which is counted.
func TestAsyncKillRestart(t *testing.T) {
	t.Parallel()
	asyncKillRun(t, diskStore)
}

// TestAsyncKillRestartRedis is the same on Redis.
func TestAsyncKillRestartRedis(t *testing.T) {
	t.Parallel()
	asyncKillRun(t, redisStore)
}

func asyncKillRun(t *testing.T, st asyncStore) {
	app := newUpstream(t)
	// The first few requests the app sees are done in 200ms; later ones
	// stay at the app until the kill cuts them off, so events are still
	// queued and in delivery at the kill however slowly they were sent.
	// After the kill, every request is done in 200ms.
	const doneBeforeKill, work = 4, 200 * time.Millisecond
	var seen atomic.Int32
	var killed atomic.Bool
	app.WorkFor(func(string, int) time.Duration {
		if killed.Load() || seen.Add(1) <= doneBeforeKill {
			return work
		}
		return time.Hour
	})
	env := asyncEnv(app.URL, st.env(t))
	env["DELIVERY_CONCURRENCY"] = "4"
	env["UPSTREAM_TIMEOUT"], env["LEASE_TTL"] = "2s", "3s"
	px := launch(t, env)
	px.waitHealthy()
	px.awaitReady(t) // every send here must be queued
	keys := queueEvents(t, px, github, 40)
	// Kill it once some events are done and others are at the app.
	b := px.bounds()
	await(t, b.delivered(1)+b.drained(doneBeforeKill+1, work), func() error {
		if done, n := len(app.EffectsSnapshot()), seen.Load(); done < doneBeforeKill || n <= doneBeforeKill {
			return fmt.Errorf("%d deliveries completed and %d requests reached the app before the kill, want %d and more", done, n, doneBeforeKill)
		}
		return nil
	})
	killed.Store(true)
	px.Kill()
	px.waitExit(exitDeadline)
	before := len(app.EffectsSnapshot())

	next := startProxy(t, env)
	// The attempts the kill cut off are taken over once their lease runs
	// out; the rest are due at once.
	awaitEffects(t, app, keys, b.delivered(1)+b.drained(len(keys), work))
	twice, cut := 0, 0
	for _, k := range keys {
		if n := app.Effects(k); n > 1 {
			twice++
		}
		cut += app.Attempts(k) - app.Effects(k)
	}
	next.awaitMetric(t, "webhook_dedup_deliveries_total", map[string]string{"result": "succeeded"}, 1)
	summary := fmt.Sprintf("e2e async kill -9 [%s]: %d events, %d delivered before the kill, none lost after the restart, %d delivered twice (%d attempts cut off at the app by the kill, rolled back, taken over after LEASE_TTL)", st.name, len(keys), before, twice, cut)
	t.Log(summary)
	fmt.Println(summary)
	if before >= len(keys) {
		t.Errorf("every event was delivered before the kill: the test proves nothing")
	}
}

// TestAsyncRedisDurabilityLogged: at start, an async route on a Redis that
// would lose accepted events (no append-only file, an evicting policy) is
// logged at error level saying what to change; a Redis that keeps them is
// logged at info.
func TestAsyncRedisDurabilityLogged(t *testing.T) {
	t.Parallel()
	risky := redistest.New(t, "--appendonly", "no", "--maxmemory-policy", "allkeys-lru")
	px := startProxy(t, asyncEnv("http://127.0.0.1:1", map[string]string{"REDIS_URL": risky.URL()}))
	px.awaitLog(t, "appendonly is no", 1)
	px.awaitLog(t, "maxmemory-policy is allkeys-lru", 1)
	for _, line := range strings.Split(px.Logs(), "\n") {
		if strings.Contains(line, "appendonly is no") && !strings.Contains(line, `"level":"error"`) {
			t.Errorf("the durability problem is not logged at error level: %s", line)
		}
	}

	// Managed Redis often forbids CONFIG: the proxy reads INFO instead,
	// and says so; where INFO is forbidden too, it says it cannot check.
	managed := redistest.New(t, "--rename-command", "CONFIG", "", "--appendonly", "yes")
	px = startProxy(t, asyncEnv("http://127.0.0.1:1", map[string]string{"REDIS_URL": managed.URL()}))
	px.awaitLog(t, "read from INFO", 1)
	locked := redistest.New(t, "--rename-command", "CONFIG", "", "--rename-command", "INFO", "")
	px = startProxy(t, asyncEnv("http://127.0.0.1:1", map[string]string{"REDIS_URL": locked.URL()}))
	px.awaitLog(t, "cannot read Redis's appendonly and maxmemory-policy", 1)

	safe := redistest.New(t, "--appendonly", "yes", "--maxmemory-policy", "noeviction")
	px = startProxy(t, asyncEnv("http://127.0.0.1:1", map[string]string{"REDIS_URL": safe.URL()}))
	px.awaitLog(t, "accepted events survive a Redis restart", 1)
	if strings.Contains(px.Logs(), `"level":"error"`) {
		t.Errorf("a Redis that keeps accepted events was logged at error level:\n%s", px.Logs())
	}
}

// TestAsyncCLIOnRedis: without ADMIN_TOKEN, dead-letters and retry go
// straight to the shared store, as inspect does.
func TestAsyncCLIOnRedis(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	broken := true
	app := newScriptedApp(t, func(string, int) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		if broken {
			return http.StatusBadGateway, ""
		}
		return http.StatusOK, ""
	})
	store := redisStore.env(t)
	env := asyncEnv(app.URL, store)
	env["RETRY_MAX_ATTEMPTS"] = "1"
	px := startProxy(t, env)
	ev := acme.Event(3)
	queueEvents(t, px, acme, 4)
	px.awaitState(t, acme, ev.ID, "failed", px.bounds().delivered(1))

	cliEnv := map[string]string{"REDIS_URL": store["REDIS_URL"]}
	code, out, errOut := cli(t, cliEnv, "dead-letters")
	if code != 0 || !strings.Contains(out, `"id": "`+ev.ID+`"`) || !strings.Contains(out, `"last_status": 502`) {
		t.Errorf("dead-letters on Redis: exit %d, %q %q", code, out, errOut)
	}
	mu.Lock()
	broken = false
	mu.Unlock()
	if code, out, errOut := cli(t, cliEnv, "retry", "/hooks/acme", ev.ID); code != 0 || !strings.Contains(out, "queued") {
		t.Fatalf("retry on Redis: exit %d, %q %q", code, out, errOut)
	}
	px.awaitState(t, acme, ev.ID, "completed", px.bounds().delivered(1))
	if code, _, errOut := cli(t, cliEnv, "retry", "/hooks/acme", ev.ID); code != 1 || !strings.Contains(errOut, "not dead-lettered") {
		t.Errorf("retry of a completed event: exit %d, %q; want 1, not dead-lettered", code, errOut)
	}
	if code, _, errOut := cli(t, cliEnv, "retry", "/hooks/acme", "nope"); code != 1 || !strings.Contains(errOut, "no record") {
		t.Errorf("retry of an unknown event: exit %d, %q; want 1, no record", code, errOut)
	}
	if code, _, errOut := cli(t, map[string]string{}, "dead-letters"); code != 2 || !strings.Contains(errOut, "ADMIN_TOKEN") {
		t.Errorf("dead-letters with no store and no token: exit %d, %q; want 2 naming ADMIN_TOKEN", code, errOut)
	}
}

// TestAsyncStoreDown: while Redis is down an async route answers 503
// store-unavailable with Retry-After and queues nothing; once Redis is
// back the retry is queued and delivered.
func TestAsyncStoreDown(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t, "--appendonly", "yes")
	asyncStoreDownRun(t, "Redis", map[string]string{"REDIS_URL": srv.URL()}, srv.Stop, srv.Start)
}

// asyncStoreDownRun runs that test on the store storeEnv configures, taken
// down by stop and brought back by start.
func asyncStoreDownRun(t *testing.T, name string, storeEnv map[string]string, stop, start func()) {
	app := newUpstream(t)
	px := startProxy(t, asyncEnv(app.URL, storeEnv))
	ctx, client := testContext(t), newClient(t)
	ev := stripe.Event(1)
	stop()
	a := mustSend(t, ctx, client, px, stripe, ev)
	expect(t, "delivery with "+name+" down", a, 503, "store-unavailable")
	if _, err := a.retryAfter(); err != nil {
		t.Error(err)
	}
	start()
	if err := px.pollAdmin("/readyz", 200, storeStateDeadline); err != nil {
		t.Fatalf("readyz after %s is back: %v", name, err)
	}
	expect(t, "the retry once "+name+" is back", settledQueued(t, ctx, client, px, stripe, ev), 202, "queued")
	awaitEffects(t, app, []string{key(stripe, ev.ID)}, px.bounds().delivered(1))
	if n := app.Effects(key(stripe, ev.ID)); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
}

// settledQueued sends ev until it is not answered store-unavailable (the
// proxy's pool may take a moment to reconnect after /readyz turned 200).
func settledQueued(t *testing.T, ctx context.Context, client *http.Client, px *proxy, p provider, ev event) answer {
	t.Helper()
	deadline := time.Now().Add(px.bounds().reconnected())
	for {
		a := mustSend(t, ctx, client, px, p, ev)
		if a.Dedup() != "store-unavailable" || time.Now().After(deadline) {
			return a
		}
		time.Sleep(50 * time.Millisecond)
	}
}
