package test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/dynamotest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/pgtest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// storeHang is one shape of a store that stops answering while the proxy
// serves: start starts the store for t and returns the proxy's
// configuration for it, hang makes it stop answering, and resume (also
// run when the test ends) lets it answer again.
type storeHang struct {
	name string
	// queue: the store keeps the async queue, so the shape runs async too.
	queue bool
	start func(t *testing.T) (env map[string]string, hang, resume func())
	// exitsAtResume: a thread blocked in a write on a frozen volume holds
	// the process in the kernel until it thaws, so the process stops
	// within the bound (logs "stopped") and exits once the store resumes.
	exitsAtResume bool
}

// storeHangs are the shapes of a store that stops answering: its process
// frozen (SIGSTOP: connections stay open, nothing is answered, as with a
// server stuck on a stalled disk or a host paused), PostgreSQL alive but
// every statement on the proxy's tables waiting behind a lock another
// session holds in an open transaction, and DATA_DIR's volume frozen
// (fsfreeze; needs root, skipped otherwise).
var storeHangs = []storeHang{
	{"Redis frozen", true, func(t *testing.T) (map[string]string, func(), func()) {
		srv := redistest.New(t)
		return map[string]string{"REDIS_URL": srv.URL()}, srv.Pause, srv.Resume
	}, false},
	{"PostgreSQL frozen", true, func(t *testing.T) (map[string]string, func(), func()) {
		srv := pgtest.New(t) // its own server: a frozen one would hold up the other tests
		env := map[string]string{"DATABASE_URL": srv.NewDatabase(t), "PRUNE_INTERVAL": "1s"}
		return env, func() { srv.Pause(t) }, func() { srv.Resume(t) }
	}, false},
	{"PostgreSQL hung mid-transaction", true, func(t *testing.T) (map[string]string, func(), func()) {
		db := postgres.Get(t).NewDatabase(t)
		locker := &tableLock{t: t, db: db}
		return map[string]string{"DATABASE_URL": db, "PRUNE_INTERVAL": "1s"}, locker.lock, locker.unlock
	}, false},
	{"DynamoDB frozen", false, func(t *testing.T) (map[string]string, func(), func()) {
		srv := dynamotest.New(t)
		env := dynamoDBEnv(srv, "webhook-dedup")
		migrateTable(t, env)
		return env, func() { srv.Pause(t) }, func() { srv.Resume(t) }
	}, false},
	{"DATA_DIR frozen", true, func(t *testing.T) (map[string]string, func(), func()) {
		dir, freeze, thaw := freezableVolume(t)
		return map[string]string{"DATA_DIR": dir}, freeze, thaw
	}, true},
}

// tableLock holds every table of the proxy's in ACCESS EXCLUSIVE mode in
// an open transaction of its own, as a migration or a VACUUM FULL stuck
// mid-way would: the proxy's statements wait for it, on a server that
// answers everything else.
type tableLock struct {
	t    *testing.T
	db   string
	conn *pgx.Conn
}

func (l *tableLock) lock() {
	l.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, l.db)
	if err != nil {
		l.t.Fatal(err)
	}
	l.conn = conn
	if _, err := conn.Exec(ctx, "BEGIN; LOCK TABLE webhook_dedup_records, webhook_dedup_queue, webhook_dedup_owners IN ACCESS EXCLUSIVE MODE"); err != nil {
		l.t.Fatalf("lock the proxy's tables: %v", err)
	}
}

func (l *tableLock) unlock() {
	if l.conn != nil {
		_ = l.conn.Close(context.Background()) // the transaction ends with its session
		l.conn = nil
	}
}

// Shutdown's timings in TestShutdownStoreStopsAnswering: the exit is due
// within shutdownDelay + shutdownTimeout + 2 s of SIGTERM.
const (
	shutdownDelay   = time.Second
	shutdownTimeout = 2 * time.Second
	// hangStoreTimeout is STORE_TIMEOUT: longer than the 2 s the process
	// may take past the drain, so that a store call started at the drain
	// deadline cannot simply be waited for.
	hangStoreTimeout = 5 * time.Second
)

// What is in flight when SIGTERM comes, in TestShutdownStoreStopsAnswering.
const (
	// inFlightSync: webhooks at the app on sync routes; their completion
	// or release meets the hung store.
	inFlightSync = "sync"
	// inFlightAsync: deliveries at the app; their outcome, or their return
	// to the queue, meets the hung store.
	inFlightAsync = "async"
	// inFlightNone: nothing, but a call to the hung store timed out before
	// SIGTERM (a webhook answered 503): what the store's close may wait
	// on (pgx gives such a connection 15 s to close).
	inFlightNone = "idle"
)

// TestShutdownStoreStopsAnswering: SIGTERM while the store has stopped
// answering (each shape of storeHangs), with webhooks (sync) or
// deliveries (async) in flight at every stage: answered by the app once
// SIGTERM is in, so that their completion meets the hung store; still at
// the app at the drain deadline, so that their release or requeue does;
// and new webhooks arriving during SHUTDOWN_DELAY, whose claims do; and
// with nothing in flight (idle), where only the store's close can wait.
// The process exits 0 within SHUTDOWN_DELAY + SHUTDOWN_TIMEOUT + 2 s, and
// its log says what it left for the next process. On a frozen volume it
// stops within that bound, and exits 0 once the volume thaws.
func TestShutdownStoreStopsAnswering(t *testing.T) {
	t.Parallel()
	for _, sh := range storeHangs {
		inFlight := []string{inFlightSync, inFlightNone}
		if sh.queue {
			inFlight = append(inFlight, inFlightAsync)
		}
		for _, what := range inFlight {
			t.Run(sh.name+"/"+what, func(t *testing.T) {
				t.Parallel()
				storeHangRun(t, sh, what)
			})
		}
	}
}

func storeHangRun(t *testing.T, sh storeHang, inFlight string) {
	app := newUpstream(t)
	storeEnv, hang, resume := sh.start(t)
	env := proxyEnv(app, storeEnv)
	if inFlight == inFlightAsync {
		env = asyncEnv(app.URL, storeEnv)
		env["DELIVERY_CONCURRENCY"] = "4"
	}
	env["SHUTDOWN_DELAY"], env["SHUTDOWN_TIMEOUT"] = shutdownDelay.String(), shutdownTimeout.String()
	env["UPSTREAM_TIMEOUT"], env["STORE_TIMEOUT"] = "30s", hangStoreTimeout.String()
	px := launch(t, env)
	px.waitHealthy()
	px.awaitReady(t)
	ctx, client := testContext(t), newClient(t)

	// Four webhooks at the app, held there: the first two answered once
	// SIGTERM is in, the last two kept past the drain deadline.
	release := app.Hold()
	t.Cleanup(release)
	kept := map[string]bool{}
	for i := 2; i < 4; i++ {
		kept[key(github, github.Event(i).ID)] = true
	}
	app.WorkFor(func(k string, _ int) time.Duration {
		if kept[k] {
			return time.Hour
		}
		return 0
	})
	// How long the four take to reach the app once sent: a sync
	// webhook's claim; an async one, answered queued already, its take.
	var reach time.Duration
	switch inFlight {
	case inFlightAsync:
		queueEvents(t, px, github, 8) // four at the app, four waiting in the queue
		reach = px.bounds().taken()
	case inFlightSync:
		for i := range 4 {
			sendAsync(ctx, client, px, github, github.Event(i))
		}
		reach = px.bounds().claimed()
	}
	if inFlight != inFlightNone {
		await(t, reach, func() error {
			if n := app.Total(); n < 4 {
				return fmt.Errorf("%d webhooks reached the app, want 4", n)
			}
			return nil
		})
	}

	t.Cleanup(resume) // before the proxy's and the store's own cleanups
	hang()
	if inFlight == inFlightNone {
		expect(t, "a webhook while the store hangs", mustSend(t, ctx, client, px, github, github.Event(0)), 503, "store-unavailable")
	}
	bound := shutdownDelay + shutdownTimeout + 2*time.Second
	stopBound := bound // bound becomes the exit's once a frozen volume resumes
	start := time.Now()
	px.Terminate()
	if inFlight != inFlightNone {
		// SHUTDOWN_DELAY: the listener still serves, and the claims of
		// what arrives meet the hung store.
		for i := 100; i < 102; i++ {
			sendAsync(ctx, client, px, github, github.Event(i))
		}
	}
	release()
	since := "SIGTERM"
	if sh.exitsAtResume {
		// The process stops within the bound on its own clock (its log's
		// span, below): the process takes nearly all of it, closing
		// a store that cannot answer, and what the test sees adds a loaded
		// machine's scheduling, as for the exit.
		px.awaitLogWithin(t, `"msg":"stopped"`, 1, bound+loadMargin)
		t.Logf("stopped %s after SIGTERM (bound %s); exiting once the store resumes", time.Since(start).Round(10*time.Millisecond), bound)
		resume()
		start, since, bound = time.Now(), "the store resumed", exitDeadline
	}
	// Well past the bound, to measure how late a process that overruns it
	// is; then it is killed.
	code := px.waitExit(bound + 20*time.Second)
	took := time.Since(start)
	summary := fmt.Sprintf("e2e shutdown, %s, %s: exit status %d %s after %s (bound %s)", sh.name, inFlight, code, took.Round(10*time.Millisecond), since, bound)
	t.Log(summary)
	fmt.Println(summary)
	if code != 0 {
		t.Errorf("exit status %d (-1: still running %s after %s, killed), want 0", code, bound+20*time.Second, since)
	}
	// The bound holds for the process: from the signal's arrival
	// ("shutting down") to its last line ("stopped"), on its own clock.
	// What this test sees adds the scheduling of a loaded machine (the
	// signal's delivery, the exit, the test's own wait), which loadMargin
	// covers, as every deadline of the harness does.
	if span, ok := logSpan(px.Logs(), "shutting down", "stopped"); !ok {
		t.Errorf("the log has no \"shutting down\" then \"stopped\" line")
	} else if span > stopBound {
		t.Errorf("stopped %s after it began shutting down, want within %s", span.Round(10*time.Millisecond), stopBound)
	}
	if sh.exitsAtResume {
		if took > bound {
			t.Errorf("exited %s after %s, want within %s", took.Round(10*time.Millisecond), since, bound)
		}
	} else if took > bound+loadMargin {
		t.Errorf("exited %s after %s, want within %s (and %s for a loaded machine)", took.Round(10*time.Millisecond), since, bound, loadMargin)
	}
	// What was left: claims in sync mode, deliveries in async mode.
	want := map[string]string{
		inFlightSync:  "requests still waiting on the store at the shutdown deadline",
		inFlightAsync: "deliveries not settled with the store by the shutdown deadline",
	}[inFlight]
	if want != "" && !strings.Contains(px.Logs(), want) {
		t.Errorf("the log does not say what was left for the next process (%q)", want)
	}
	for _, line := range strings.Split(px.Logs(), "\n") {
		if strings.Contains(line, "shutdown deadline") {
			t.Logf("left: %s", line)
		}
	}
}

// logSpan is the time between the first log line whose message is from
// and the first after it whose message is to, by the lines' own
// timestamps.
func logSpan(logs, from, to string) (time.Duration, bool) {
	var begun time.Time
	for _, line := range strings.Split(logs, "\n") {
		var l struct {
			TS  time.Time `json:"ts"`
			Msg string    `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		switch {
		case begun.IsZero() && l.Msg == from:
			begun = l.TS
		case !begun.IsZero() && l.Msg == to:
			return l.TS.Sub(begun), true
		}
	}
	return 0, false
}
