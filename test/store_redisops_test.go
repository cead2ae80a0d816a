package test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// What a Redis that evicts, fills up, forgets or stalls does to
// deduplication, and what the proxy tells the operator about it. Each test
// logs the figure it measured (t.Logf, shown with -v).

// rawRedis is a client of srv for the test's own commands.
func rawRedis(t *testing.T, srv *redistest.Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// awaitErrorLog polls the proxy's JSON log until an error-level line's
// message contains substr.
func (p *proxy) awaitErrorLog(t *testing.T, substr string) {
	t.Helper()
	await(t, p.bounds().observed(), func() error {
		for _, line := range strings.Split(p.Logs(), "\n") {
			var entry struct{ Level, Msg string }
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Level == "error" && strings.Contains(entry.Msg, substr) {
				return nil
			}
		}
		return fmt.Errorf("no error-level log line saying %q", substr)
	})
}

// sendAll sends events 1..n of p, eight at a time, and returns the answers.
func sendAll(t *testing.T, ctx context.Context, client *http.Client, px *proxy, p provider, n int) []answer {
	t.Helper()
	answers := make([]answer, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			a, err := p.send(ctx, client, px.Addr, p.Event(i+1))
			if err != nil {
				a = answer{Status: -1, Body: []byte(err.Error())}
			}
			answers[i] = a
		})
	}
	wg.Wait()
	return answers
}

// processedTwice counts the events 1..n of p that reached the app twice or more.
func processedTwice(app *upstream, p provider, n int) int {
	twice := 0
	for i := range n {
		if app.Attempts(key(p, p.Event(i+1).ID)) >= 2 {
			twice++
		}
	}
	return twice
}

// TestRedisEvictionWarned: on a Redis whose maxmemory-policy evicts
// records, duplicates of evicted events are forwarded again; the proxy
// cannot prevent that, but says so at start (error level, and a metric)
// and counts the evictions.
func TestRedisEvictionWarned(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t, "--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru")
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL(), "REDIS_CHECK_INTERVAL": "200ms"}))
	ctx, client := testContext(t), newClient(t)
	raw := rawRedis(t, srv)

	const n = 500
	for i, a := range sendAll(t, ctx, client, px, stripe, n) {
		expect(t, fmt.Sprintf("event %d", i+1), a, 200, "forwarded")
	}
	// Other data pushes the records out.
	for round := range 8 {
		p := raw.Pipeline()
		for i := range 500 {
			p.Set(ctx, fmt.Sprintf("other:%d:%d", round, i), strings.Repeat("y", 1000), 0)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sendAll(t, ctx, client, px, stripe, n)
	twice := processedTwice(app, stripe, n)
	t.Logf("allkeys-lru: %d of %d re-sent events processed twice after eviction", twice, n)
	if twice == 0 {
		t.Fatal("no record was evicted: the test did not make Redis evict")
	}

	px.awaitErrorLog(t, "Redis may evict records")
	px.awaitMetric(t, "webhook_dedup_redis_eviction_policy_evicts", nil, 1)
	px.awaitErrorLog(t, "Redis evicted keys")
	px.awaitMetric(t, "webhook_dedup_redis_evicted_keys_total", nil, float64(twice))
	px.awaitMetric(t, "webhook_dedup_redis_maxmemory_bytes", nil, 3<<20)
	px.awaitMetric(t, "webhook_dedup_redis_used_memory_bytes", nil, 1)
}

// TestRedisFullCompletes: on a Redis that filled up (noeviction), events
// the app is already processing are still completed, so their
// redeliveries are duplicates, not processed again once the lease ends;
// new events get 503, and /readyz says 503 while writes are refused.
func TestRedisFullCompletes(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	// The held requests wait at the app while the others arrive and Redis
	// is filled: UPSTREAM_TIMEOUT (30s) and the lease outlast that on a
	// loaded machine, so each completion meets a full Redis, not a 504 or
	// an expired lease.
	px := startProxy(t, proxyEnv(app, map[string]string{
		"REDIS_URL": srv.URL(), "REDIS_CHECK_INTERVAL": "200ms",
	}))
	ctx, client := testContext(t), newClient(t)
	raw := rawRedis(t, srv)

	const n = 5
	release := app.Hold()
	t.Cleanup(release)
	var chans []<-chan answer
	for i := range n {
		chans = append(chans, sendAsync(ctx, client, px, stripe, stripe.Event(i+1)))
	}
	await(t, px.bounds().claimed(), func() error {
		if got := app.Total(); got < n {
			return fmt.Errorf("%d of %d held events reached the app", got, n)
		}
		return nil
	})
	srv.FillMemory(t)
	release()
	for i, ch := range chans {
		expect(t, fmt.Sprintf("event %d, completed on a full Redis", i+1), px.receive(t, "held event", ch), 200, "forwarded")
	}
	if err := px.pollAdmin("/readyz", http.StatusServiceUnavailable, storeStateDeadline); err != nil {
		t.Errorf("readyz while Redis refuses writes: %v", err)
	}
	if a := mustSend(t, ctx, client, px, stripe, stripe.Event(n+1)); a.Status != http.StatusServiceUnavailable {
		t.Errorf("a new event on a full Redis: %s; want 503", a)
	}
	px.awaitMetric(t, "webhook_dedup_redis_out_of_memory", nil, 1)

	if err := raw.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := px.pollAdmin("/readyz", http.StatusOK, storeStateDeadline); err != nil {
		t.Errorf("readyz once Redis has room again: %v", err)
	}
	// A redelivery finds the event completed; had the completion been
	// refused, it would find it in flight until the lease ends (longer
	// than settledSend retries), and then be forwarded again.
	for i := range n {
		expect(t, fmt.Sprintf("redelivery of event %d", i+1), settledSend(t, ctx, client, px, stripe, stripe.Event(i+1)), 200, "duplicate")
	}
	twice := processedTwice(app, stripe, n)
	t.Logf("full Redis: %d of %d events whose completion met OOM processed twice", twice, n)
	if twice > 0 {
		t.Errorf("%d of %d events completed while Redis was full were processed again", twice, n)
	}
}

// TestRedisDataLossDetected: a flushed Redis, or one restarted without
// persistence, has forgotten every record, so old events are processed
// again; the proxy logs it at error level and counts it.
func TestRedisDataLossDetected(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL(), "REDIS_CHECK_INTERVAL": "200ms"}))
	ctx, client := testContext(t), newClient(t)
	raw := rawRedis(t, srv)

	const n = 50
	sendAll(t, ctx, client, px, stripe, n)
	if err := px.pollAdmin("/readyz", http.StatusOK, storeStateDeadline); err != nil {
		t.Fatal(err)
	}
	if err := raw.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	sendAll(t, ctx, client, px, stripe, n)
	t.Logf("FLUSHALL: %d of %d old events processed again", processedTwice(app, stripe, n), n)
	px.awaitErrorLog(t, "Redis lost its records")
	px.awaitMetric(t, "webhook_dedup_redis_data_loss_total", nil, 1)

	srv.Stop()
	srv.Start() // without persistence
	px.awaitMetric(t, "webhook_dedup_redis_data_loss_total", nil, 2)
}

// TestRedisStallBounded: while Redis is stalled (DEBUG SLEEP), every
// store call is bounded by REDIS_TIMEOUT=500ms (go-redis's retries and
// pool wait included), so every webhook is answered before Redis answers
// again; and once Redis is back no claim the stall interrupted is left in
// flight: retries are forwarded, not 409.
func TestRedisStallBounded(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t, "--enable-debug-command", "yes")
	app := newUpstream(t)
	const redisTimeout = 500 * time.Millisecond
	px := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL(), "REDIS_TIMEOUT": redisTimeout.String(), "KEY_PREFIX": "stall:"}))
	ctx, client := testContext(t), newClient(t)
	expect(t, "before the stall", mustSend(t, ctx, client, px, stripe, stripe.Event(100)), 200, "forwarded")

	// Every claim meets the stall, however long Stall takes to see it
	// begin and the machine to send them. The stall ends after stallEnd,
	// as DEBUG SLEEP is sent after it is taken.
	stall := redistest.StallDeadline + loadMargin
	stallEnd := time.Now().Add(stall)
	claimsBefore := px.metrics(t)
	srv.Stall(t, stall)

	const n = 20
	took := make([]time.Duration, n)
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			start := time.Now()
			a, err := stripe.send(ctx, client, px.Addr, stripe.Event(i+1))
			if err != nil {
				a = answer{Status: -1, Body: []byte(err.Error())}
			}
			took[i], answers[i] = time.Since(start), a
		})
	}
	wg.Wait()
	answered := time.Now()
	slowest := time.Duration(0)
	for _, d := range took {
		slowest = max(slowest, d)
	}
	// The bound, measured by the proxy itself, so that nothing the test's
	// own side of a loaded machine adds counts: each claim ended within
	// REDIS_TIMEOUT, or at least in the histogram's next bucket above it.
	claims := px.metrics(t)
	total, within, bucket := claimsWithin(claims, redisTimeout)
	total0, within0, _ := claimsWithin(claimsBefore, redisTimeout)
	t.Logf("DEBUG SLEEP %s, REDIS_TIMEOUT=%s: slowest of %d answers after %s (sender's clock); %d of %d claims within %gs (proxy's clock)",
		stall, redisTimeout, n, slowest.Round(time.Millisecond), within-within0, total-total0, bucket)
	if total-total0 < n || within-within0 < total-total0 {
		t.Errorf("%d of the %d claims during the stall took longer than %gs, want every one bounded by REDIS_TIMEOUT=%s. %s",
			(total-total0)-(within-within0), total-total0, bucket, redisTimeout, series(claims, "webhook_dedup_store_duration_seconds"))
	}
	if !answered.Before(stallEnd) {
		t.Errorf("the last answer came after the %s stall had ended: the proxy waited for Redis", stall)
	}
	if err := redistest.WaitPing(srv.Addr, stall+loadMargin); err != nil {
		t.Fatal(err)
	}

	// No claim left in flight: the keys the stall interrupted are gone
	// (or completed, for a claim that went through).
	raw := rawRedis(t, srv)
	inFlight := func() []string {
		var held []string
		for _, k := range raw.Keys(ctx, "stall:stripe:*").Val() {
			if v, err := raw.Get(ctx, k).Result(); err == nil && v != "" && v[0] == 0x01 {
				held = append(held, k)
			}
		}
		return held
	}
	// A claim queued in Redis during the stall may land a moment after
	// Redis answers again (on a loaded machine, after this loop's first
	// look), and its late release looks again up to a second later: so the
	// keys must stay clear for longer than that, not be clear once.
	const settled = 2 * time.Second
	deadline := time.Now().Add(px.bounds().reconnected() + settled)
	lastHeld := time.Now()
	for time.Now().Before(deadline) && time.Since(lastHeld) < settled {
		if len(inFlight()) > 0 {
			lastHeld = time.Now()
		}
		time.Sleep(25 * time.Millisecond) // polling interval
	}
	if held := inFlight(); len(held) > 0 {
		t.Errorf("%d claims still in flight %s after the stall: %v", len(held), px.bounds().reconnected()+settled, held)
	}
	conflicts := 0
	for i := range n {
		a := mustSend(t, ctx, client, px, stripe, stripe.Event(i+1))
		if a.Dedup() == "in-flight" {
			conflicts++
		}
		if answers[i].Dedup() == "forwarded" {
			expect(t, fmt.Sprintf("retry of event %d, forwarded during the stall", i+1), a, 200, "duplicate")
		} else {
			expect(t, fmt.Sprintf("retry of event %d, answered %d during the stall", i+1, answers[i].Status), a, 200, "forwarded")
		}
	}
	t.Logf("after the stall: %d of %d retries answered in-flight", conflicts, n)
}

// claimsWithin reads the proxy's histogram of claims: how many there were,
// and how many took at most its first bucket at or above bound (which it
// returns, in seconds).
func claimsWithin(fams map[string]*dto.MetricFamily, bound time.Duration) (total, within uint64, bucket float64) {
	fam, ok := fams["webhook_dedup_store_duration_seconds"]
	if !ok {
		return 0, 0, bound.Seconds()
	}
	for _, m := range fam.GetMetric() {
		op := ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "op" {
				op = lp.GetValue()
			}
		}
		if op != "claim" {
			continue
		}
		h := m.GetHistogram()
		total += h.GetSampleCount()
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() >= bound.Seconds() {
				within += b.GetCumulativeCount()
				bucket = b.GetUpperBound()
				break
			}
		}
	}
	return total, within, bucket
}

// TestAppNameOwnsPrefix: a sidecar whose KEY_PREFIX holds another app's
// records (another APP_NAME) refuses to start, saying to set KEY_PREFIX;
// replicas of one app share the prefix.
func TestAppNameOwnsPrefix(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	appNameOwnsPrefix(t, map[string]string{"REDIS_URL": srv.URL()})
}

// appNameOwnsPrefix runs that test on the store storeEnv configures.
func appNameOwnsPrefix(t *testing.T, storeEnv map[string]string) {
	env := func(more ...string) map[string]string {
		m := maps.Clone(storeEnv)
		for i := 0; i < len(more); i += 2 {
			m[more[i]] = more[i+1]
		}
		return m
	}
	appA, appB := newUpstream(t), newUpstream(t)
	// Each proxy is sent to once ready: PostgreSQL's tables and owner
	// may be set up a moment after the process serves.
	a := startProxy(t, proxyEnv(appA, env("APP_NAME", "billing")))
	a.awaitReady(t)
	ctx, client := testContext(t), newClient(t)
	const n = 10
	for i, ans := range sendAll(t, ctx, client, a, stripe, n) {
		expect(t, fmt.Sprintf("app A, event %d", i+1), ans, 200, "forwarded")
	}
	replica := startProxy(t, proxyEnv(appA, env("APP_NAME", "billing")))
	replica.awaitReady(t)
	expect(t, "app A's replica, event 1", mustSend(t, ctx, client, replica, stripe, stripe.Event(1)), 200, "duplicate")

	b := launch(t, proxyEnv(appB, env("APP_NAME", "crm")))
	select {
	case <-b.done:
		code, out := b.cmd.ProcessState.ExitCode(), b.Logs()
		if code != 2 || !strings.Contains(out, "KEY_PREFIX") || !strings.Contains(out, "billing") {
			t.Errorf("app B on app A's prefix exited %d; want 2 with a message naming KEY_PREFIX and the owner billing:\n%s", code, out)
		}
	case <-time.After(exitDeadline):
		b.waitHealthy()
		b.awaitReady(t)
		dups := 0
		for _, ans := range sendAll(t, ctx, client, b, stripe, n) {
			if ans.Dedup() == "duplicate" {
				dups++
			}
		}
		t.Errorf("app B started on app A's KEY_PREFIX: it answered duplicate for %d of the %d events app A had, which app B never saw", dups, n)
	}

	own := startProxy(t, proxyEnv(appB, env("APP_NAME", "crm", "KEY_PREFIX", "crm:")))
	own.awaitReady(t)
	expect(t, "app B on its own prefix, event 1", mustSend(t, ctx, client, own, stripe, stripe.Event(1)), 200, "forwarded")
}

// TestReadyzHidesStoreDetail: /readyz answers the bare state to anyone; the
// store's error (its address among it) only with ADMIN_TOKEN.
func TestReadyzHidesStoreDetail(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL(), "ADMIN_TOKEN": adminToken}))
	srv.Stop()
	if err := px.pollAdmin("/readyz", http.StatusServiceUnavailable, storeStateDeadline); err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(srv.Addr, ":")
	bare := px.adminDo(t, http.MethodGet, "/readyz", "")
	if strings.Contains(string(bare.Body), port) || strings.Contains(string(bare.Body), "error") {
		t.Errorf("/readyz without the token: %s; want the bare state, without the store's address or error", bare.Body)
	}
	detailed := px.adminDo(t, http.MethodGet, "/readyz", adminToken)
	if !strings.Contains(string(detailed.Body), port) {
		t.Errorf("/readyz with ADMIN_TOKEN: %s; want the store's error", detailed.Body)
	}
}
