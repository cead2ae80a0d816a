package test

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// slowSender is a provider whose client gives up after timeout and that
// retries every backoff, attempts times in all, until it gets a 2xx.
func slowSender(t *testing.T, px *proxy, timeout, backoff time.Duration, attempts int) *sender {
	client := newClient(t)
	client.Timeout = timeout
	return &sender{
		client:      client,
		addr:        px.Addr,
		maxAttempts: attempts,
		backoff:     func(int) time.Duration { return backoff },
		tally:       newTally(),
	}
}

// TestSlowAppProcessedOnce: the classic duplicate. The app takes 3 s and,
// like most legacy apps, keeps working when its client hangs up; the sender
// gives up after 2 s and retries every second, six times. The app processes
// the event once, and the retry after it finished is answered 200 duplicate.
func TestSlowAppProcessedOnce(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	app.IgnoreHangUp()
	const work = 3 * time.Second
	app.WorkFor(func(string, int) time.Duration { return work })
	px := startProxy(t, proxyEnv(app, nil))

	ev := github.Event(1)
	k := key(github, ev.ID)
	s := slowSender(t, px, 2*time.Second, time.Second, 6)
	a, err := s.deliver(testContext(t), github, ev)

	// The app's last effect may come after the sender stopped: wait for the
	// app to be idle (every request it received has ended) before counting.
	awaitAppIdle(t, app, k, work)
	s.tally.mu.Lock()
	summary := fmt.Sprintf("e2e slow app: app 3s, sender timeout 2s, retry every 1s: attempts=%d (answers %v, timeouts %d) reached-app=%d effects=%d",
		s.tally.requests, s.tally.outcomes, s.tally.errors, app.Attempts(k), app.Effects(k))
	s.tally.mu.Unlock()
	t.Log(summary)
	fmt.Println(summary)

	if err != nil {
		t.Fatalf("the sender never got a 2xx: %v", err)
	}
	expect(t, "the retry after the app finished", a, 200, "duplicate")
	if n := app.Effects(k); n != 1 {
		t.Errorf("the app processed the event %d times, want once", n)
	}
	if n := app.Attempts(k); n != 1 {
		t.Errorf("the event reached the app %d times, want once", n)
	}
}

// awaitAppIdle waits until every request for k the app received has taken
// effect: a stubborn app counts its effect its work time after the request
// reached it.
func awaitAppIdle(t *testing.T, app *upstream, k string, work time.Duration) {
	t.Helper()
	await(t, work+loadMargin, func() error {
		if e, a := app.Effects(k), app.Attempts(k); e < a {
			return fmt.Errorf("%s: %d of the %d requests that reached the app took effect", k, e, a)
		}
		return nil
	})
}

// TestSlowAppManyEventsRedis: 30 events across Stripe, GitHub, Shopify and
// Standard Webhooks, all signed and all at once, to an app that takes 1.5 s
// and ignores hang-ups, from senders that give up after 1 s and retry up to
// 10 times: each event takes effect once and each delivery ends with a 2xx.
func TestSlowAppManyEventsRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	slowAppRun(t, "redis", srv.URL())
}

// TestSlowAppManyEventsEmbedded is the same run on the embedded store.
func TestSlowAppManyEventsEmbedded(t *testing.T) {
	t.Parallel()
	slowAppRun(t, "embedded", "")
}

func slowAppRun(t *testing.T, store, redisURL string) {
	app := newUpstream(t)
	app.IgnoreHangUp()
	const work = 1500 * time.Millisecond
	app.WorkFor(func(string, int) time.Duration { return work })
	px := startProxy(t, proxyEnv(app, map[string]string{
		"REDIS_URL":                redisURL,
		"SHOPIFY_WEBHOOK_SECRET":   shopifySecret,
		"STANDARD_WEBHOOKS_SECRET": standardSecret,
	}))
	providers := []provider{stripe, github, shopify, standardWebhooks}
	const events = 30
	s := slowSender(t, px, time.Second, 500*time.Millisecond, 10)
	ctx := testContext(t)

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []string
		sent   []string
	)
	start := time.Now()
	for i := range events {
		p := providers[i%len(providers)]
		ev := p.Event(100 + i)
		sent = append(sent, key(p, ev.ID))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.deliver(ctx, p, ev); err != nil {
				mu.Lock()
				failed = append(failed, err.Error())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, k := range sent {
		awaitAppIdle(t, app, k, work)
	}

	for _, f := range failed {
		t.Errorf("no 2xx: %s", f)
	}
	effects := app.EffectsSnapshot()
	total := 0
	for _, k := range sent {
		if n := effects[k]; n != 1 {
			t.Errorf("%s took effect %d times, want once", k, n)
		}
		total += effects[k]
	}
	s.tally.mu.Lock()
	defer s.tally.mu.Unlock()
	summary := fmt.Sprintf("e2e slow apps [%s]: events=%d attempts=%d timeouts=%d effects=%d in %s; answers %v",
		store, events, s.tally.requests, s.tally.errors, total, elapsed.Round(time.Millisecond), s.tally.outcomes)
	t.Log(summary)
	fmt.Println(summary)
}

// TestSlowAppSenderGoneMidBody: on a route that streams the body, a sender
// that hangs up after the app has its headers but before its last byte:
// the app never sees a complete request, the claim is released (not left
// for its lease), and the retry is forwarded.
func TestSlowAppSenderGoneMidBody(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	app.IgnoreHangUp()
	px := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL(), "KEY_PREFIX": "e2e-slow:"}))
	ctx, client := testContext(t), newClient(t)

	ev := acme.Event(7)
	k := key(acme, ev.ID)
	c, err := net.Dial("tcp", px.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(signedHead(t, ctx, px, acme, ev, 1000) + string(ev.Body[:10]))); err != nil {
		t.Fatal(err)
	}
	app.awaitArrived(t, acme.Path, px.bounds().claimed())
	c.Close()

	px.awaitNoKey(t, srv.Addr, "e2e-slow:"+namespace(acme)+":"+ev.ID)
	if n := app.Attempts(k); n != 0 {
		t.Errorf("the broken request reached the app complete %d times", n)
	}
	expect(t, "the retry", mustSend(t, ctx, client, px, acme, ev), http.StatusOK, "forwarded")
	if n := app.Effects(k); n != 1 {
		t.Errorf("took effect %d times, want 1 (the retry)", n)
	}
}
