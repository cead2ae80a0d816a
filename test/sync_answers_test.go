package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// proxyEnv is the configuration most tests start from: every provider's
// route, Stripe's and GitHub's secrets, the embedded store.
func proxyEnv(app *upstream, more map[string]string) map[string]string {
	env := map[string]string{"UPSTREAM_URL": app.URL, "ROUTES": routes(allProviders...)}
	for k, v := range signedSecrets {
		env[k] = v
	}
	for k, v := range more {
		env[k] = v
	}
	return env
}

// testContext is the context of a test's sends: it ends with the test.
// Each send is bounded by its client's timeout, not by a guess at how long
// the whole test may take on a loaded machine.
func testContext(t *testing.T) context.Context {
	return t.Context()
}

// mustSend sends one signed attempt and fails the test on a transport error.
func mustSend(t *testing.T, ctx context.Context, client *http.Client, px *proxy, p provider, ev event) answer {
	t.Helper()
	a, err := p.send(ctx, client, px.Addr, ev)
	if err != nil {
		t.Fatalf("POST %s (%s): %v", p.Path, ev.ID, err)
	}
	return a
}

// settledSend sends ev like a provider retrying promptly: while the proxy
// answers in-flight it sends again. The proxy settles a claim before the
// sender sees the app's answer, but when it answers 502 or 504 itself the
// release, one store operation, may follow the answer, so a retry sent
// that moment may still find the claim in flight.
func settledSend(t *testing.T, ctx context.Context, client *http.Client, px *proxy, p provider, ev event) answer {
	t.Helper()
	deadline := time.Now().Add(px.bounds().claimed())
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		a := mustSend(t, ctx, client, px, p, ev)
		if a.Dedup() != "in-flight" || time.Now().After(deadline) {
			return a
		}
		<-tick.C
	}
}

// expect fails the test unless a has the status and X-Webhook-Dedup value.
func expect(t *testing.T, what string, a answer, status int, dedup string) {
	t.Helper()
	if a.Status != status || a.Dedup() != dedup {
		t.Errorf("%s: answered %s; want %d with X-Webhook-Dedup %q", what, a, status, dedup)
	}
}

// TestDuplicateAfterCompletion: once an event completed, a redelivery is
// answered 200 {"status":"duplicate","event_id":…} by the proxy, and the app
// is not contacted again.
func TestDuplicateAfterCompletion(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL()}))
	ctx, client := testContext(t), newClient(t)

	for _, p := range allProviders {
		for _, n := range []int{1, 3} { // 3: a numeric ID on the JSON route
			ev := p.Event(n)
			k := key(p, ev.ID)
			first := mustSend(t, ctx, client, px, p, ev)
			expect(t, k+" first delivery", first, 200, "forwarded")
			if want := fmt.Sprintf(`{"received":%q}`, k); string(first.Body) != want || first.Header.Get("X-App") != "processed" {
				t.Errorf("%s first delivery: body %q, X-App %q; want the app's answer %s", k, first.Body, first.Header.Get("X-App"), want)
			}

			dup := mustSend(t, ctx, client, px, p, ev)
			expect(t, k+" redelivery", dup, 200, "duplicate")
			if ct := dup.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("%s redelivery: Content-Type %q, want application/json", k, ct)
			}
			var got struct {
				Status  string `json:"status"`
				EventID string `json:"event_id"`
			}
			if err := json.Unmarshal(dup.Body, &got); err != nil || got.Status != "duplicate" || got.EventID != ev.ID {
				t.Errorf("%s redelivery: body %q; want {\"status\":\"duplicate\",\"event_id\":%q}", k, dup.Body, ev.ID)
			}
			if n := app.Attempts(k); n != 1 {
				t.Errorf("%s reached the app %d times, want 1", k, n)
			}
		}
	}
}

// TestDuplicateInFlight: a copy that arrives while the first is still at the
// app is answered 409 (or INFLIGHT_STATUS) with Retry-After, without
// contacting the app; once the first completes, copies are duplicates.
func TestDuplicateInFlight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		store  string // "redis" or "embedded"
		env    map[string]string
	}{
		{name: "default 409 on redis", status: http.StatusConflict, store: "redis"},
		{name: "INFLIGHT_STATUS=503 embedded", status: http.StatusServiceUnavailable, store: "embedded", env: map[string]string{"INFLIGHT_STATUS": "503"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			app := newUpstream(t)
			env := proxyEnv(app, nil)
			for k, v := range tc.env {
				env[k] = v
			}
			if tc.store == "redis" {
				env["REDIS_URL"] = redistest.New(t).URL()
			}
			px := startProxy(t, env)
			ctx, client := testContext(t), newClient(t)
			lease := px.bounds().cfg.LeaseTTL

			for _, p := range []provider{stripe, acme} {
				ev := p.Event(7)
				k := key(p, ev.ID)
				release := app.Hold()
				t.Cleanup(release)
				firstDone := make(chan answer, 1)
				go func() {
					a, err := p.send(ctx, client, px.Addr, ev)
					if err != nil {
						a = answer{Status: -1, Body: []byte(err.Error())}
					}
					firstDone <- a
				}()
				app.awaitEntered(t, k, px.bounds().claimed())

				dup := mustSend(t, ctx, client, px, p, ev)
				expect(t, k+" copy while the first is at the app", dup, tc.status, "in-flight")
				if ra, err := dup.retryAfter(); err != nil || ra < 1 || time.Duration(ra)*time.Second > lease {
					t.Errorf("%s in-flight: Retry-After %q; want whole seconds in [1, %s] (the lease time left): %v", k, dup.Header.Get("Retry-After"), lease, err)
				}
				if n := app.Attempts(k); n != 1 {
					t.Errorf("%s reached the app %d times while in flight, want 1", k, n)
				}

				release()
				expect(t, k+" first delivery", <-firstDone, 200, "forwarded")
				expect(t, k+" copy after completion", mustSend(t, ctx, client, px, p, ev), 200, "duplicate")
				if n := app.Effects(k); n != 1 {
					t.Errorf("%s took effect %d times, want 1", k, n)
				}
			}
		})
	}
}

// TestUpstreamErrorRelayedThenRetried: the app's 500 reaches the sender
// unchanged, the claim is released, and the provider's retry is forwarded.
func TestUpstreamErrorRelayedThenRetried(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	app.FailWhen(func(_ string, attempt int) bool { return attempt == 1 })
	px := startProxy(t, proxyEnv(app, nil))
	ctx, client := testContext(t), newClient(t)

	for _, p := range allProviders {
		ev := p.Event(11)
		k := key(p, ev.ID)
		failed := mustSend(t, ctx, client, px, p, ev)
		expect(t, k+" first delivery", failed, 500, "forwarded")
		if want := "app failed on " + k + " attempt 1\n"; string(failed.Body) != want || failed.Header.Get("X-App-Failure") != "on purpose" {
			t.Errorf("%s: the app's 500 was not relayed unchanged: body %q, X-App-Failure %q; want body %q", k, failed.Body, failed.Header.Get("X-App-Failure"), want)
		}
		expect(t, k+" retry", mustSend(t, ctx, client, px, p, ev), 200, "forwarded")
		if a, e := app.Attempts(k), app.Effects(k); a != 2 || e != 1 {
			t.Errorf("%s: %d attempts reached the app with %d effects; want 2 and 1", k, a, e)
		}
	}
}

// TestMissingID: a webhook without an event ID is forwarded unchecked by
// default, and refused with 400 missing-id under ON_MISSING_ID=reject.
func TestMissingID(t *testing.T) {
	t.Parallel()
	noID := []struct {
		name string
		p    provider
		ev   event
	}{
		{"header route without the header", acme, event{Body: []byte("no id here\n")}},
		{"JSON route without the path", jsonPath, event{Body: []byte(`{"type":"object.updated","data":{}}`)}},
		{"JSON route with a blank ID", jsonPath, event{Body: []byte(`{"data":{"object":{"id":"   "}}}`)}},
		{"JSON route with a non-JSON body", jsonPath, event{Body: []byte(`not json`)}},
	}
	t.Run("forward (default)", func(t *testing.T) {
		t.Parallel()
		app := newUpstream(t)
		px := startProxy(t, proxyEnv(app, nil))
		ctx, client := testContext(t), newClient(t)
		for _, tc := range noID {
			before := app.Total()
			for range 2 {
				a := mustSend(t, ctx, client, px, tc.p, tc.ev)
				expect(t, tc.name, a, 200, "forwarded-unchecked")
			}
			if got := app.Total() - before; got != 2 {
				t.Errorf("%s: %d of 2 deliveries reached the app, want both (nothing recorded)", tc.name, got)
			}
		}
	})
	t.Run("reject", func(t *testing.T) {
		t.Parallel()
		app := newUpstream(t)
		px := startProxy(t, proxyEnv(app, map[string]string{"ON_MISSING_ID": "reject"}))
		ctx, client := testContext(t), newClient(t)
		for _, tc := range noID {
			expect(t, tc.name, mustSend(t, ctx, client, px, tc.p, tc.ev), 400, "missing-id")
		}
		if n := app.Total(); n != 0 {
			t.Errorf("%d requests without an ID reached the app, want none", n)
		}
	})
}

// TestInvalidID: IDs longer than 512 bytes or with control characters are
// refused with 400 invalid-id; 512 bytes is fine.
func TestInvalidID(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, nil))
	ctx, client := testContext(t), newClient(t)

	long := acme.Event(1)
	long.ID = strings.Repeat("a", 513)
	expect(t, "513-byte ID", mustSend(t, ctx, client, px, acme, long), 400, "invalid-id")
	control := event{ID: "obj\x01x", Body: []byte(`{"data":{"object":{"id":"obj\u0001x"}}}`)}
	expect(t, "ID with a control character", mustSend(t, ctx, client, px, jsonPath, control), 400, "invalid-id")
	if n := app.Total(); n != 0 {
		t.Errorf("%d requests with invalid IDs reached the app, want none", n)
	}

	longest := acme.Event(2)
	longest.ID = strings.Repeat("b", 512)
	expect(t, "512-byte ID", mustSend(t, ctx, client, px, acme, longest), 200, "forwarded")
}

// TestNamespacesSeparateRoutes: the same ID on two routes is two events.
func TestNamespacesSeparateRoutes(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, nil))
	ctx, client := testContext(t), newClient(t)

	const id = "shared-id-1"
	onAcme := acme.Event(1)
	onAcme.ID = id
	onJSON := event{ID: id, Body: []byte(`{"data":{"object":{"id":"` + id + `"}}}`)}
	expect(t, "ID on the header route", mustSend(t, ctx, client, px, acme, onAcme), 200, "forwarded")
	expect(t, "same ID on the JSON route", mustSend(t, ctx, client, px, jsonPath, onJSON), 200, "forwarded")
	expect(t, "same ID on the header route again", mustSend(t, ctx, client, px, acme, onAcme), 200, "duplicate")
}

// TestBodyLimits: a route that must read the body refuses bodies over
// MAX_BODY_BYTES with 413 too-large; a header-sourced route streams any size.
func TestBodyLimits(t *testing.T) {
	t.Parallel()
	const limit = 2048
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{"MAX_BODY_BYTES": fmt.Sprint(limit)}))
	ctx, client := testContext(t), newClient(t)

	atLimit := jsonOfSize("obj_at_limit", limit)
	expect(t, "JSON body of exactly MAX_BODY_BYTES", mustSend(t, ctx, client, px, jsonPath, atLimit), 200, "forwarded")

	before := app.Total()
	expect(t, "JSON body one byte over", mustSend(t, ctx, client, px, jsonPath, jsonOfSize("obj_over", limit+1)), 413, "too-large")
	bigStripe := stripe.Event(5)
	bigStripe.Body = []byte(fmt.Sprintf(`{"id":%q,"pad":%q}`, bigStripe.ID, strings.Repeat("x", 4*limit)))
	expect(t, "Stripe body over the limit", mustSend(t, ctx, client, px, stripe, bigStripe), 413, "too-large")
	if n := app.Total() - before; n != 0 {
		t.Errorf("%d oversized requests reached the app, want none", n)
	}

	// 4 MiB on the header route, sent in two parts: the second part is only
	// written once the app has the request, which it can only have if the
	// proxy streams the body rather than reading it first.
	ev := acme.Event(9)
	ev.Body = bytes.Repeat([]byte("0123456789abcdef"), 4<<20/16)
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, px.URL(acme.Path+query), pr)
	if err != nil {
		t.Fatal(err)
	}
	acme.Sign(ev, time.Now(), req.Header)
	markSent(req)
	done := make(chan struct{})
	var a answer
	var sendErr error
	go func() {
		defer close(done)
		a, sendErr = do(client, req)
	}()
	half := len(ev.Body) / 2
	if _, err := pw.Write(ev.Body[:half]); err != nil {
		t.Fatalf("write the first half: %v", err)
	}
	// The headers reach the app once the event is claimed.
	arrival := px.bounds().claimed()
	select {
	case <-app.arrived:
	case <-time.After(arrival):
		pw.CloseWithError(fmt.Errorf("gave up"))
		<-done
		t.Fatalf("the app got nothing of a half-sent 4 MiB body on a header route within %s: the proxy does not stream it (answer %s, %v)", arrival, a, sendErr)
	}
	if _, err := pw.Write(ev.Body[half:]); err != nil {
		t.Fatalf("write the second half: %v", err)
	}
	pw.Close()
	<-done
	if sendErr != nil {
		t.Fatalf("4 MiB body on a header route: %v", sendErr)
	}
	expect(t, "4 MiB body on a header route", a, 200, "forwarded")
	if n := app.Effects(key(acme, ev.ID)); n != 1 {
		t.Errorf("the 4 MiB body took effect %d times at the app, want 1 (its signature covers every byte)", n)
	}
}

// TestAppAnswersBeforeReadingBody: an app may answer a webhook from its
// headers before it has read the body; the proxy completes the event once,
// while the body is still streaming to the app. (Under -race this
// also checks that fingerprinting the streaming body does not race with
// settling the claim.)
func TestAppAnswersBeforeReadingBody(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, nil))
	ctx, client := testContext(t), newClient(t)

	for n := range 40 {
		ev := acme.Event(n)
		ev.Body = bytes.Repeat([]byte{byte('a' + n%26)}, 200<<10)
		send := func() answer {
			req, err := acme.request(ctx, px.Addr, ev)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Test-Answer-Early", ev.ID)
			a, err := do(client, req)
			if err != nil {
				t.Fatalf("%s: %v", ev.ID, err)
			}
			return a
		}
		expect(t, ev.ID+" answered early", send(), 200, "forwarded")
		expect(t, ev.ID+" redelivery", send(), 200, "duplicate")
		if n := app.Effects(key(acme, ev.ID)); n != 1 {
			t.Errorf("%s took effect %d times, want 1", ev.ID, n)
		}
	}
}

// jsonOfSize is a JSON-route event whose body is exactly size bytes.
func jsonOfSize(id string, size int) event {
	head, tail := `{"data":{"object":{"id":"`+id+`"}},"pad":"`, `"}`
	return event{ID: id, Body: []byte(head + strings.Repeat("p", size-len(head)-len(tail)) + tail)}
}

// TestPassThrough: requests that are not POSTs on a dedup route reach the
// app untouched, every time, and get no X-Webhook-Dedup header.
func TestPassThrough(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, nil))
	ctx, client := testContext(t), newClient(t)

	ev := stripe.Event(1)
	for _, tc := range []struct {
		name, method, path string
	}{
		{"GET on a webhook route", http.MethodGet, stripe.Path + "?page=2"},
		{"PUT on a webhook route", http.MethodPut, acme.Path},
		{"POST on an unmatched path", http.MethodPost, "/api/orders?x=1"},
		{"POST on a path that only shares a prefix", http.MethodPost, stripe.Path + "-legacy"},
	} {
		for range 2 {
			req, err := http.NewRequestWithContext(ctx, tc.method, px.URL(tc.path), bytes.NewReader(ev.Body))
			if err != nil {
				t.Fatal(err)
			}
			// Webhook headers, to show they do not turn these into webhooks.
			stripe.Sign(ev, time.Now(), req.Header)
			acme.Sign(acme.Event(1), time.Now(), req.Header)
			markSent(req)
			a, err := do(client, req)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			want := "passed " + tc.method + " " + tc.path + "\n"
			if a.Status != 200 || string(a.Body) != want || a.Header.Get("X-App") != "passed" {
				t.Errorf("%s: answered %s; want the app's 200 %q", tc.name, a, want)
			}
			if _, ok := a.Header["X-Webhook-Dedup"]; ok {
				t.Errorf("%s: has X-Webhook-Dedup %q; requests off dedup routes get none", tc.name, a.Dedup())
			}
		}
	}
	if got := len(app.Passed()); got != 8 {
		t.Errorf("the app saw %d pass-through requests, want 8: %q", got, app.Passed())
	}
}

// TestUpstreamUnreachable: with the app down the proxy answers 502 and
// releases the claim, so the retry is forwarded once the app is up.
func TestUpstreamUnreachable(t *testing.T) {
	t.Parallel()
	addr := redistest.FreeAddr(t)
	px := startProxy(t, map[string]string{"UPSTREAM_URL": "http://" + addr, "ROUTES": routes(allProviders...)})
	ctx, client := testContext(t), newClient(t)

	ev := acme.Event(1)
	down := mustSend(t, ctx, client, px, acme, ev)
	if down.Status != http.StatusBadGateway {
		t.Fatalf("app down: answered %s; want 502", down)
	}

	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on the app's address %s: %v", addr, err)
	}
	app := newUpstreamOn(t, l)
	expect(t, "retry with the app up", settledSend(t, ctx, client, px, acme, ev), 200, "forwarded")
	if n := app.Effects(key(acme, ev.ID)); n != 1 {
		t.Errorf("took effect %d times, want 1", n)
	}
}

// TestUpstreamTimeout: an app slower than UPSTREAM_TIMEOUT gets the proxy's
// 504 and the claim is released, so the retry is forwarded.
func TestUpstreamTimeout(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{"UPSTREAM_TIMEOUT": "1s"}))
	ctx, client := testContext(t), newClient(t)

	ev := stripe.Event(1)
	k := key(stripe, ev.ID)
	release := app.Hold()
	t.Cleanup(release)
	slow := mustSend(t, ctx, client, px, stripe, ev)
	// The app sees the proxy drop the request and rolls back; only then is it let go.
	app.awaitAbandoned(t, k, px.bounds().answered())
	release()
	if slow.Status != http.StatusGatewayTimeout {
		t.Errorf("app slower than UPSTREAM_TIMEOUT: answered %s; want 504", slow)
	}
	// Well within the lease (UPSTREAM_TIMEOUT + 15s): only a release lets it through.
	expect(t, "retry after the timeout", settledSend(t, ctx, client, px, stripe, ev), 200, "forwarded")
	if a, e := app.Attempts(k), app.Effects(k); a != 2 || e != 1 {
		t.Errorf("%d attempts reached the app with %d effects; want 2 and 1", a, e)
	}
}
