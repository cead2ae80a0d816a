package test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// hostileEnv is the proxy of the hostile tests: every provider's route on a
// real Redis, a small MAX_BODY_BYTES, and the default server timeouts.
func hostileEnv(app *upstream, redisURL string, more map[string]string) map[string]string {
	env := proxyEnv(app, map[string]string{
		"REDIS_URL":      redisURL,
		"KEY_PREFIX":     "e2e-hostile:",
		"MAX_BODY_BYTES": "4096",
	})
	for k, v := range more {
		env[k] = v
	}
	return env
}

// slowClientTimeouts are server timeouts short enough that a test sees
// slow clients cut off. Only the slow-client tests' proxy has them: every
// request to it must have its head read within READ_HEADER_TIMEOUT, and a
// loaded machine can hold a process that long (a request's head sent whole
// at once, then the connection closed, was cut off unread, uncounted).
var slowClientTimeouts = map[string]string{"READ_HEADER_TIMEOUT": "500ms", "READ_TIMEOUT": "1500ms"}

// TestHostileInputs: each malformed or hostile request gets its defined
// answer from the built binary, reaches the app only when the answer says
// it was forwarded, and leaves no claim held; afterwards the proxy still
// serves valid events and has written no panic.
func TestHostileInputs(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, hostileEnv(app, srv.URL(), nil))
	ctx, client := testContext(t), newClient(t)

	long := strings.Repeat("i", 513)
	withID := func(p provider, n int, id string) event {
		ev := p.Event(n)
		ev.ID = id
		if p.Name == jsonPath.Name {
			ev.Body = []byte(`{"data":{"object":{"id":"` + id + `","note":"` + bodyCanary + `"}}}`)
		}
		return ev
	}
	for _, tc := range []struct {
		input string
		p     provider
		ev    event
		// edit changes the signed request before it is sent.
		edit    func(req *http.Request)
		status  int
		outcome string
	}{
		{"malformed JSON on a JSON route", jsonPath, event{Body: []byte(`{"data":{"object":{"id":"obj_trunc"}`)}, nil, 200, "forwarded-unchecked"},
		{"JSON route with a non-JSON body", jsonPath, event{Body: []byte("\x00\xffnot json")}, nil, 200, "forwarded-unchecked"},
		{"empty ID header", acme, event{Body: []byte("empty id")}, func(r *http.Request) { r.Header.Set("X-Acme-Event-Id", "") }, 200, "forwarded-unchecked"},
		{"blank ID header", acme, event{Body: []byte("blank id")}, func(r *http.Request) { r.Header.Set("X-Acme-Event-Id", "   ") }, 200, "forwarded-unchecked"},
		{"empty JSON ID", jsonPath, withID(jsonPath, 1, ""), nil, 200, "forwarded-unchecked"},
		{"513-byte ID header", acme, withID(acme, 1, long), nil, 400, "invalid-id"},
		{"513-byte JSON ID", jsonPath, withID(jsonPath, 2, long), nil, 400, "invalid-id"},
		{"tab in an ID header", acme, withID(acme, 2, "acme\tx"), nil, 400, "invalid-id"},
		{"C1 control U+0085 in an ID header", acme, withID(acme, 3, "acme\u0085x"), nil, 400, "invalid-id"},
		{`U+0001 in a JSON ID ("\u0001")`, jsonPath, event{Body: []byte(`{"data":{"object":{"id":"obj\u0001x"}}}`)}, nil, 400, "invalid-id"},
		{`DEL in a JSON ID ("\u007f")`, jsonPath, event{Body: []byte(`{"data":{"object":{"id":"obj\u007fx"}}}`)}, nil, 400, "invalid-id"},
		{"two ID headers with different values", acme, acme.Event(4), func(r *http.Request) { r.Header.Add("X-Acme-Event-Id", "acme-other") }, 400, "invalid-id"},
		{"two ID headers with the same value", acme, acme.Event(5), func(r *http.Request) { r.Header.Add("X-Acme-Event-Id", acme.Event(5).ID) }, 200, "forwarded"},
		{"body over MAX_BODY_BYTES on a JSON route (Content-Length)", jsonPath, jsonOfSize("obj_big1", 5000), nil, 413, "too-large"},
		{"body over MAX_BODY_BYTES on a JSON route (chunked)", jsonPath, jsonOfSize("obj_big2", 5000), func(r *http.Request) {
			r.Body, r.ContentLength = io.NopCloser(r.Body), -1
		}, 413, "too-large"},
		{"body over MAX_BODY_BYTES on a signed route (chunked)", stripe, func() event {
			ev := stripe.Event(90)
			ev.Body = []byte(fmt.Sprintf(`{"id":%q,"pad":%q}`, ev.ID, strings.Repeat("x", 5000)))
			return ev
		}(), func(r *http.Request) { r.Body, r.ContentLength = io.NopCloser(r.Body), -1 }, 413, "too-large"},
	} {
		req, err := tc.p.request(ctx, px.Addr, tc.ev)
		if err != nil {
			t.Fatal(err)
		}
		if tc.edit != nil {
			tc.edit(req)
		}
		before := app.Total()
		a, err := do(client, req)
		if err != nil {
			t.Fatalf("%s: %v", tc.input, err)
		}
		hostileLine(t, tc.input, a.short())
		expect(t, tc.input, a, tc.status, tc.outcome)
		if reached := app.Total() - before; (tc.status == 200) != (reached == 1) {
			t.Errorf("%s: answered %d, and %d requests reached the app", tc.input, tc.status, reached)
		}
		if tc.outcome == "forwarded" {
			expect(t, tc.input+", redelivered", settledSend(t, ctx, client, px, tc.p, tc.ev), 200, "duplicate")
		}
	}

	// net/http refuses a raw control character in a header before the
	// proxy sees it (Go's own client will not even send one).
	raw := strings.Replace(signedHead(t, ctx, px, acme, acme.Event(6), 2), acme.Event(6).ID, "acme\x01x", 1) + "{}"
	a, err := rawExchange(px.Addr, raw)
	if err != nil || a.Status != http.StatusBadRequest {
		t.Errorf("raw control character in the ID header: %s %v; want 400 from net/http", a, err)
	}
	hostileLine(t, "raw control character U+0001 in an ID header", a.short())

	// Request smuggling shapes: net/http refuses ambiguous framing, and
	// when Transfer-Encoding: chunked comes with a Content-Length it uses
	// the chunked body and drops the Content-Length, so the app gets the
	// signed body whole.
	ev := acme.Event(7)
	head := strings.TrimSuffix(signedHead(t, ctx, px, acme, ev, len(ev.Body)), "\r\n")
	for _, tc := range []struct {
		input, data string
		status      int
		outcome     string
	}{
		{"two different Content-Length headers", head + "Content-Length: 3\r\n\r\n" + string(ev.Body), 400, ""},
		{"Transfer-Encoding: gzip", head + "Transfer-Encoding: gzip\r\n\r\n" + string(ev.Body), 501, ""},
		{"Transfer-Encoding: chunked and a wrong Content-Length", strings.Replace(head, fmt.Sprintf("Content-Length: %d", len(ev.Body)), "Content-Length: 5", 1) +
			"Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(ev.Body), ev.Body), 200, "forwarded"},
	} {
		a, err := rawExchange(px.Addr, tc.data)
		if err != nil {
			t.Fatalf("%s: %v", tc.input, err)
		}
		hostileLine(t, tc.input, a.short())
		expect(t, tc.input, a, tc.status, tc.outcome)
	}
	if n := app.Effects(key(acme, ev.ID)); n != 1 {
		t.Errorf("the chunked delivery took effect %d times, want once", n)
	}

	t.Run("thousands of headers", func(t *testing.T) {
		flood := func(n int, ev event) *http.Request {
			req, err := acme.request(ctx, px.Addr, ev)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				req.Header.Set(fmt.Sprintf("X-Pad-%05d", i), "padding")
			}
			return req
		}
		// 5000 headers of 22 bytes: 110 KB, over MAX_HEADER_BYTES (64 KiB).
		ev := acme.Event(20)
		req := flood(5000, ev)
		a, err := rawExchange(px.Addr, rawHead(req, len(ev.Body))+string(ev.Body))
		if err != nil || a.Status != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("5000 headers: %s %v; want 431 from net/http", a, err)
		}
		hostileLine(t, "5000 headers (110 KB, over MAX_HEADER_BYTES=64KiB)", a.short())
		if n := app.Attempts(key(acme, ev.ID)); n != 0 {
			t.Errorf("the flooded request reached the app %d times", n)
		}

		// 2000 headers, 44 KB: under the limit, an ordinary delivery.
		ev = acme.Event(21)
		a, err = do(client, flood(2000, ev))
		if err != nil {
			t.Fatal(err)
		}
		expect(t, "2000 headers", a, 200, "forwarded")
		hostileLine(t, "2000 headers (44 KB, under MAX_HEADER_BYTES)", a.short())
	})

	// The slow clients' proxy, beside the other, on the same Redis and app.
	slowPx := startProxy(t, hostileEnv(app, srv.URL(), slowClientTimeouts))
	t.Run("slow headers", func(t *testing.T) {
		px := slowPx
		// Slowloris: 20 connections sending a real request's head one byte
		// every 100ms, which would take ~40s; READ_HEADER_TIMEOUT is 500ms.
		head := signedHead(t, ctx, px, acme, acme.Event(30), len(acme.Event(30).Body))
		slow := make([]*trickler, 20)
		for i := range slow {
			slow[i] = trickle(t, px.Addr, "", head, 1, 100*time.Millisecond)
		}
		expect(t, "a valid event while 20 slowloris connections are open", mustSend(t, ctx, client, px, stripe, stripe.Event(30)), 200, "forwarded")
		for i, s := range slow {
			got, after := s.awaitCutOff(t)
			if i == 0 {
				hostileLine(t, "slowloris: headers 1 byte/100ms (READ_HEADER_TIMEOUT=500ms)", fmt.Sprintf("%s after %s", got, after.Round(100*time.Millisecond)))
			}
		}
		if n := app.Attempts(key(acme, acme.Event(30).ID)); n != 0 {
			t.Errorf("a slowloris request reached the app %d times", n)
		}
		expect(t, "a valid event after the slowloris connections", mustSend(t, ctx, client, px, stripe, stripe.Event(31)), 200, "forwarded")
	})

	t.Run("slow body", func(t *testing.T) {
		px := slowPx
		// Complete headers, then the body one byte every 300ms; READ_TIMEOUT
		// (1.5s) bounds reading the whole request.
		for _, tc := range []struct {
			input   string
			p       provider
			outcome string // counted by the proxy for the cut-off request
		}{
			{"body trickled 1 byte/300ms on a header route (READ_TIMEOUT=1.5s)", acme, "bad-request"},
			{"body trickled 1 byte/300ms on a JSON route (READ_TIMEOUT=1.5s)", jsonPath, "bad-request"},
		} {
			ev := tc.p.Event(40)
			k := key(tc.p, ev.ID)
			before, _ := outcomeCount(px, tc.p.Path, tc.outcome)
			tr := trickle(t, px.Addr, signedHead(t, ctx, px, tc.p, ev, len(ev.Body)), string(ev.Body), 1, 300*time.Millisecond)
			got, after := tr.awaitCutOff(t)
			hostileLine(t, tc.input, fmt.Sprintf("%s after %s", got, after.Round(100*time.Millisecond)))
			awaitOutcome(t, px, tc.p.Path, tc.outcome, before+1)
			px.awaitNoKey(t, srv.Addr, "e2e-hostile:"+namespace(tc.p)+":"+ev.ID)
			if n := app.Attempts(k); n != 0 {
				t.Errorf("%s: the cut-off request reached the app complete %d times", tc.input, n)
			}
			expect(t, tc.input+": then the complete delivery", mustSend(t, ctx, client, px, tc.p, ev), 200, "forwarded")
		}
	})

	t.Run("disconnect mid-body", func(t *testing.T) {
		// Content-Length: 1000, then 10 bytes, then the sender hangs up.
		for _, tc := range []struct {
			input   string
			p       provider
			outcome string
		}{
			{"disconnect after 10 of 1000 bytes on a header route (streamed)", acme, "bad-request"},
			{"disconnect after 10 of 1000 bytes on a JSON route (buffered)", jsonPath, "bad-request"},
		} {
			ev := tc.p.Event(50)
			k := key(tc.p, ev.ID)
			before, _ := outcomeCount(px, tc.p.Path, tc.outcome)
			tr := trickle(t, px.Addr, signedHead(t, ctx, px, tc.p, ev, 1000)+string(ev.Body[:10]), "", 1, time.Millisecond)
			<-tr.stopped
			tr.conn.Close()
			awaitOutcome(t, px, tc.p.Path, tc.outcome, before+1)
			hostileLine(t, tc.input, "sender gone; counted "+tc.outcome+", claim released or never taken")
			px.awaitNoKey(t, srv.Addr, "e2e-hostile:"+namespace(tc.p)+":"+ev.ID)
			if n := app.Attempts(k); n != 0 {
				t.Errorf("%s: the broken request reached the app complete %d times", tc.input, n)
			}
			expect(t, tc.input+": then the complete delivery", mustSend(t, ctx, client, px, tc.p, ev), 200, "forwarded")
			if n := app.Effects(k); n != 1 {
				t.Errorf("%s: took effect %d times, want 1 (the complete delivery)", tc.input, n)
			}
		}
	})

	// After all of it the proxy still serves valid events, and has written
	// no panic, no secret and no body.
	for _, p := range []provider{stripe, github, acme, jsonPath} {
		ev := p.Event(99)
		expect(t, "sanity: "+p.Name, mustSend(t, ctx, client, px, p, ev), 200, "forwarded")
		expect(t, "sanity: "+p.Name+" redelivered", settledSend(t, ctx, client, px, p, ev), 200, "duplicate")
	}
	for _, px := range []*proxy{px, slowPx} {
		expectNoPanic(t, px)
		checkLogs(t, px.Logs())
	}
}

// namespace is the store namespace of p's route: the preset's name, or
// the route's path for a generic source.
func namespace(p provider) string {
	if strings.Contains(p.Source, ":") {
		return p.Path
	}
	return p.Source
}

// TestFingerprintReplayEndToEnd: GitHub's X-GitHub-Delivery is
// not covered by the signature, so a captured genuine delivery replayed
// under a fresh ID passes verification. DEDUP_BODY_FINGERPRINT=true
// answers it as a duplicate; without it, it is forwarded (which is what the
// docs/security.md says).
func TestFingerprintReplayEndToEnd(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	for _, tc := range []struct {
		fingerprint string
		outcome     string
	}{
		{"true", "duplicate"},
		{"false", "forwarded"},
	} {
		app := newUpstream(t)
		px := startProxy(t, hostileEnv(app, srv.URL(), map[string]string{
			"DEDUP_BODY_FINGERPRINT": tc.fingerprint,
			"KEY_PREFIX":             "e2e-fp-" + tc.fingerprint + ":",
		}))
		ctx, client := testContext(t), newClient(t)

		captured := github.Event(1)
		expect(t, "genuine GitHub delivery", mustSend(t, ctx, client, px, github, captured), 200, "forwarded")
		replay := captured
		replay.ID = "11111111-e2e0-11ee-8000-replayed0001"
		if !bytes.Equal(replay.Body, captured.Body) {
			t.Fatal("the replay must carry the captured body")
		}
		a := settledSend(t, ctx, client, px, github, replay)
		hostileLine(t, "captured GitHub body replayed under a fresh X-GitHub-Delivery, DEDUP_BODY_FINGERPRINT="+tc.fingerprint, a.short())
		expect(t, "replay under a fresh ID with DEDUP_BODY_FINGERPRINT="+tc.fingerprint, a, 200, tc.outcome)
		wantAttempts := map[string]int{"duplicate": 0, "forwarded": 1}[tc.outcome]
		if n := app.Attempts(key(github, replay.ID)); n != wantAttempts {
			t.Errorf("DEDUP_BODY_FINGERPRINT=%s: the replay reached the app %d times, want %d", tc.fingerprint, n, wantAttempts)
		}
		expect(t, "another genuine delivery", mustSend(t, ctx, client, px, github, github.Event(2)), 200, "forwarded")
		expectNoPanic(t, px)
	}
}
