package test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// The bound the memory test holds the process to: MAX_BUFFERED_BYTES, and
// the most resident memory (VmHWM) the process may reach with it and no
// GOMEMLIMIT, whatever the bodies: the budget, the process itself and the
// garbage collector's headroom over both.
const (
	burstBudget = 64 << 20
	rssGoal     = 160 << 20
)

// bodyBurst is one shape of "many bodies at once": senders connections,
// each sending a JSON body of size bytes on a route that reads the body.
type bodyBurst struct {
	name    string
	senders int
	size    int // a multiple of bodyPiece
	// over is how long each sender takes to send its body, in even
	// pieces. Zero: as fast as it can.
	over time.Duration
	// chunked sends the body with Transfer-Encoding: chunked, so that
	// the proxy cannot know its length before its end.
	chunked bool
	// unfinished withholds the body's last byte: the sender never
	// finishes, and the proxy cuts it off at READ_TIMEOUT.
	unfinished bool
	// readTimeout is READ_TIMEOUT. Empty: the default.
	readTimeout string
}

// bodyOutcome is what became of one sender's request.
type bodyOutcome struct {
	a       answer
	err     error // no answer: the connection ended without one
	elapsed time.Duration
}

// TestMemoryBoundedWithoutGOMEMLIMIT: with MAX_BUFFERED_BYTES=64MiB and no
// GOMEMLIMIT in the environment (a plain docker run, without a memory
// limit), bursts of request bodies keep the process's peak resident memory
// within rssGoal, and every request gets a defined answer: forwarded, or
// 503 with Retry-After when the bodies held would exceed the budget, or,
// for a body that never ends, cut off at READ_TIMEOUT. Before the process
// set a soft memory limit of its own, the first shape peaked at 181–231
// MiB.
func TestMemoryBoundedWithoutGOMEMLIMIT(t *testing.T) {
	t.Parallel()
	for _, tc := range []bodyBurst{
		// The shape: more slow bodies near MAX_BODY_BYTES than the
		// budget holds, each buffer grown as its bytes arrive.
		{name: "60 slow 9 MiB bodies", senders: 60, size: 9 << 20, over: 2 * time.Second},
		{name: "60 slow 9 MiB bodies, chunked (no Content-Length)", senders: 60, size: 9 << 20, over: 2 * time.Second, chunked: true},
		{name: "20 bodies of exactly MAX_BODY_BYTES, at full speed", senders: 20, size: 10 << 20},
		{name: "400 small bodies at once", senders: 400, size: 64 << 10},
		// Slow loris over the budget: bodies that hold their buffers
		// until READ_TIMEOUT.
		{name: "20 unfinished 9 MiB bodies", senders: 20, size: 9 << 20, unfinished: true, readTimeout: "4s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{
				"REDIS_URL":          redistest.New(t).URL(),
				"KEY_PREFIX":         "e2e-memlimit:",
				"MAX_BUFFERED_BYTES": strconv.Itoa(burstBudget),
			}
			readTimeout := 30 * time.Second // the default
			if tc.readTimeout != "" {
				env["READ_TIMEOUT"] = tc.readTimeout
				readTimeout, _ = time.ParseDuration(tc.readTimeout)
			}
			bin, err := memoryBinary()
			if err != nil {
				t.Fatal(err)
			}
			app := newUpstream(t)
			px := startProxyBinary(t, bin, proxyEnv(app, env))
			expectNoGOMEMLIMIT(t, px)
			// The process says what limit it chose, and from what.
			px.awaitLog(t, `"from":"MAX_BUFFERED_BYTES (`+strconv.Itoa(burstBudget)+` bytes)`, 1)
			before := px.procBytes(t, "VmRSS")
			outcomes := tc.run(t, px)
			hwm := px.procBytes(t, "VmHWM")

			forwarded, refused, cut := 0, 0, 0
			for i, o := range outcomes {
				switch {
				case o.err == nil && o.a.Status == 200 && o.a.Dedup() == "forwarded" && !tc.unfinished:
					forwarded++
				case o.err == nil && o.a.Status == 503 && o.a.Dedup() == "too-large":
					if secs, err := o.a.retryAfter(); err != nil || secs < 1 {
						t.Errorf("sender %d: 503 with Retry-After %d, %v; want whole seconds", i, secs, err)
					}
					refused++
				case tc.unfinished && (o.err != nil || o.a.Status == 400) && o.elapsed >= readTimeout-time.Second:
					cut++
				default:
					t.Errorf("sender %d: after %s: %v, %v; want 200 forwarded, 503 too-large or, unfinished, cut off at READ_TIMEOUT",
						i, o.elapsed.Round(time.Millisecond), o.a, o.err)
				}
			}
			t.Logf("%s: %d forwarded, %d refused (503), %d cut off; VmRSS %d MiB before, VmHWM %d MiB; CPU %s",
				tc.name, forwarded, refused, cut, before>>20, hwm>>20, px.cpuTime(t))
			if hwm > rssGoal {
				t.Errorf("peak resident memory (VmHWM) %d MiB; want at most %d MiB", hwm>>20, rssGoal>>20)
			}
			if !tc.unfinished && forwarded == 0 {
				t.Errorf("no body was forwarded, though the budget holds %d at once", burstBudget/tc.size)
			}
			expectNoPanic(t, px)
		})
	}
}

// expectNoGOMEMLIMIT fails t unless px runs without GOMEMLIMIT: the memory
// tests are about the process that sets its own soft limit.
func expectNoGOMEMLIMIT(t *testing.T, px *proxy) {
	t.Helper()
	for _, kv := range px.cmd.Env {
		if strings.HasPrefix(kv, "GOMEMLIMIT=") {
			t.Fatalf("the process runs with %s: this test is about the process without it", kv)
		}
	}
}

// cpuTime is the CPU time the process has used (user and system).
func (p *proxy) cpuTime(t testing.TB) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields from the third on follow the command's name, in
	// parentheses; utime and stime are the 14th and 15th, in clock ticks
	// (100 a second).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// bodyPiece is how much of a body a sender writes at a time.
const bodyPiece = 64 << 10

// burstBody is the body every sender of a burst sends: the same bytes but
// for the last piece, which holds the sender's ID.
type burstBody struct {
	first, middle []byte // the first piece; every other but the last
	pieces        int    // how many in all
}

func newBurstBody(size int) *burstBody {
	b := &burstBody{middle: []byte(strings.Repeat("p", bodyPiece)), pieces: size / bodyPiece}
	b.first = append([]byte(`{"pad":"`), b.middle[len(`{"pad":"`):]...)
	return b
}

// piece is the i-th piece of the body with ID id.
func (b *burstBody) piece(i int, id string) []byte {
	p := b.middle
	if i == 0 {
		p = b.first
	}
	if i < b.pieces-1 {
		return p
	}
	suffix := `","data":{"object":{"id":"` + id + `"}}}`
	return append(p[:len(p)-len(suffix):len(p)-len(suffix)], suffix...)
}

// run starts every sender at once and returns what each got.
func (tc bodyBurst) run(t *testing.T, px *proxy) []bodyOutcome {
	if tc.size%bodyPiece != 0 || tc.size == 0 {
		t.Fatalf("a body of %d bytes: the size must be a multiple of %d", tc.size, bodyPiece)
	}
	ctx := testContext(t)
	body := newBurstBody(tc.size)
	outcomes := make([]bodyOutcome, tc.senders)
	var wg sync.WaitGroup
	for i := range outcomes {
		id := fmt.Sprintf("obj_mem_%03d", i)
		req := answeredEarly(t, ctx, jsonPath, px.Addr, id)
		head := rawHead(req, tc.size)
		if tc.chunked {
			req.Header.Set("Transfer-Encoding", "chunked")
			head = rawHead(req, -1)
		}
		wg.Go(func() { outcomes[i] = tc.send(ctx, px.Addr, head, body, id) })
	}
	wg.Wait()
	return outcomes
}

// answeredEarly is the request of the event id on p (a route of
// jsonPath's source), which the app answers on its headers alone (once let go, when held), draining the
// body: what is measured is the proxy, not the app's parsing 9 MiB of
// JSON (slow under -race). The proxy reads the body for its ID. The app
// counts the event as key(acme, id).
func answeredEarly(t *testing.T, ctx context.Context, p provider, addr, id string) *http.Request {
	t.Helper()
	req, err := p.request(ctx, addr, event{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Test-Answer-Early", id)
	return req
}

// send sends one request while reading its answer, and stops sending once
// the answer has come (a refused body is not read to its end).
func (tc bodyBurst) send(ctx context.Context, addr, head string, body *burstBody, id string) bodyOutcome {
	start := time.Now()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return bodyOutcome{err: err}
	}
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	answered := make(chan struct{})
	written := make(chan struct{})
	go func() {
		defer close(written)
		_ = tc.write(c, head, body, id, answered)
	}()
	a, err := readAnswer(bufio.NewReader(c))
	elapsed := time.Since(start)
	close(answered)
	c.Close()
	<-written
	return bodyOutcome{a: a, err: err, elapsed: elapsed}
}

// errAnswered stops a sender whose answer came before its body's end.
var errAnswered = errors.New("answered before the body's end")

// write writes head and the body, its pieces spread evenly over tc.over,
// until it is written or answered is closed.
func (tc bodyBurst) write(w io.Writer, head string, body *burstBody, id string, answered <-chan struct{}) error {
	if _, err := io.WriteString(w, head); err != nil {
		return err
	}
	var tick <-chan time.Time // nil: as fast as it can
	if tc.over > 0 {
		ticker := time.NewTicker(tc.over / time.Duration(body.pieces))
		defer ticker.Stop()
		tick = ticker.C
	}
	for i := 0; i < body.pieces; i++ {
		piece, last := body.piece(i, id), i == body.pieces-1
		if tc.unfinished && last {
			piece = piece[:len(piece)-1]
		}
		var err error
		if tc.chunked {
			_, err = fmt.Fprintf(w, "%x\r\n%s\r\n", len(piece), piece)
			if err == nil && last && !tc.unfinished {
				_, err = io.WriteString(w, "0\r\n\r\n")
			}
		} else {
			_, err = w.Write(piece)
		}
		if err != nil {
			return err
		}
		if tick == nil {
			select {
			case <-answered:
				return errAnswered
			default:
			}
			continue
		}
		select {
		case <-answered:
			return errAnswered
		case <-tick:
		}
	}
	<-answered
	return nil
}

// TestAsyncDeliveryMemoryBounded: the bodies of the async deliveries the
// workers hold count against MAX_BUFFERED_BYTES, as the bodies being
// read do, so that with large bodies and an app that does not answer the
// process stays within rssGoal, with no GOMEMLIMIT. Each async route holds
// up to 2 × DELIVERY_CONCURRENCY deliveries (those attempted and as many
// taken ahead): before they were charged, 30 events of 9 MiB sent one
// after another took the process past 300 MiB. Every event is answered
// 202 (queued) or 503 too-large with Retry-After (the budget held by the
// deliveries), and every event answered 202 reaches the app once it
// answers. The shapes: the events one after another and all at once, on
// one async route and across three (each route's lane takes one delivery
// when it holds none, whatever the budget: the bound's slack is a body a
// route, docs/security.md).
func TestAsyncDeliveryMemoryBounded(t *testing.T) {
	t.Parallel()
	// DATA_DIR is left out, and docs/security.md says why: the pages of
	// its file the process maps and reads count in its resident memory
	// too (page cache, not the heap the budget bounds), 300 MiB and more
	// with these bodies queued, with or without the deliveries charged.
	for _, store := range []asyncStore{redisStore, pgStore} {
		for _, shape := range []asyncBodies{
			{name: "one after another", routes: 1},
			{name: "all at once", routes: 1, atOnce: true},
			{name: "one after another across three routes", routes: 3},
			{name: "all at once across three routes", routes: 3, atOnce: true},
		} {
			t.Run(store.name+"/"+shape.name, func(t *testing.T) {
				t.Parallel()
				shape.run(t, store)
			})
		}
	}
}

// asyncBodies is one shape of TestAsyncDeliveryMemoryBounded's events: on
// routes async routes in turn, sent one after another or all at once.
type asyncBodies struct {
	name   string
	routes int
	atOnce bool
}

// run is TestAsyncDeliveryMemoryBounded on store in the shape.
func (shape asyncBodies) run(t *testing.T, store asyncStore) {
	const events, size = 30, 9 << 20
	app := newUpstream(t)
	release := app.Hold()
	defer release()
	bin, err := memoryBinary()
	if err != nil {
		t.Fatal(err)
	}
	// Routes of the JSON preset's source, each async with a lane of its
	// own; the app counts their events alike.
	var paths []provider
	var routes []string
	for i := range shape.routes {
		p := jsonPath
		p.Path = fmt.Sprintf("%s%d", jsonPath.Path, i)
		paths = append(paths, p)
		routes = append(routes, p.Path+"="+p.Source)
	}
	env := store.env(t)
	env["KEY_PREFIX"] = "e2e-asyncmem:"
	env["MAX_BUFFERED_BYTES"] = strconv.Itoa(burstBudget)
	env["ROUTES"] = strings.Join(routes, ",")
	// A 9 MiB body takes PostgreSQL a tenth of a second to write, and
	// past the default 1s with the eight runs of this test and the
	// suite's other work on two cores: such an event is answered 503
	// store-unavailable, which is not what this test is about.
	env["STORE_TIMEOUT"] = "5s"
	px := startProxyBinary(t, bin, asyncEnv(app.URL, env))
	expectNoGOMEMLIMIT(t, px)
	ctx := testContext(t)
	body := newBurstBody(size)
	tc := bodyBurst{size: size}
	outcomes := make([]bodyOutcome, events)
	ids := make([]string, events)
	var wg sync.WaitGroup
	for i := range events {
		ids[i] = fmt.Sprintf("obj_asyncmem_%03d", i)
		head := rawHead(answeredEarly(t, ctx, paths[i%len(paths)], px.Addr, ids[i]), size)
		send := func() { outcomes[i] = tc.send(ctx, px.Addr, head, body, ids[i]) }
		if shape.atOnce {
			wg.Go(send)
		} else {
			send()
		}
	}
	wg.Wait()
	var queued []string
	refused := 0
	for i, o := range outcomes {
		switch {
		case o.err == nil && o.a.Status == 202 && o.a.Dedup() == "queued":
			queued = append(queued, key(acme, ids[i]))
		case o.err == nil && o.a.Status == 503 && o.a.Dedup() == "too-large":
			if secs, err := o.a.retryAfter(); err != nil || secs < 1 {
				t.Errorf("event %d: 503 with Retry-After %d, %v; want whole seconds", i, secs, err)
			}
			refused++
		default:
			t.Fatalf("event %d: %v, %v; want 202 queued or 503 too-large", i, o.a, o.err)
		}
	}
	hwm := px.procBytes(t, "VmHWM")
	t.Logf("%d queued, %d refused (503); VmHWM %d MiB", len(queued), refused, hwm>>20)
	if hwm > rssGoal {
		t.Errorf("peak resident memory (VmHWM) %d MiB; want at most %d MiB", hwm>>20, rssGoal>>20)
	}
	if len(queued) == 0 {
		t.Fatal("no event was queued")
	}
	// The budget counts the bodies held: at most MAX_BUFFERED_BYTES, and
	// one body more for each route's lane (docs/security.md), once the
	// workers have taken what they can hold (a Take follows the 202).
	const heldBytes = "webhook_dedup_body_bytes_held"
	most := float64(burstBudget + shape.routes*size)
	await(t, px.bounds().observed(), func() error {
		if held := sample(px.metrics(t), heldBytes, nil); held == 0 || held > most {
			return fmt.Errorf("%s = %v with the app holding its deliveries; want more than 0, at most %v", heldBytes, held, most)
		}
		return nil
	})
	release()
	awaitEffects(t, app, queued, 60*time.Second)
	// Delivered, the bodies are given back.
	await(t, px.bounds().observed(), func() error {
		if held := sample(px.metrics(t), heldBytes, nil); held != 0 {
			return fmt.Errorf("%s = %v once every event was delivered; want 0", heldBytes, held)
		}
		return nil
	})
	expectNoPanic(t, px)
}
