package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// TestPostgresLaneTakesByIndex checks what the conformance suite's lanes
// case cannot see: that a Take of one lane finds its events by an index,
// reading a handful of rows, not through the thousands of another route's
// due events queued ahead of them (a route whose app hangs), whether the
// lane is a route's own or the rest lane. It runs the take statements
// under EXPLAIN ANALYZE on a table whose statistics are up to date, and
// counts the queue rows each plan read. Route b is a busy one, a quarter
// of the rows: the planner, which takes b's rows to be spread through the
// due index, then expects ten of them among its first forty; they all
// come after a's.
func TestPostgresLaneTakesByIndex(t *testing.T) {
	t.Parallel()
	s := openPostgres(t, nil, Config{})
	ctx := context.Background()
	const backlog = 3000
	enqueueOn(t, s, "a", backlog)
	enqueueOn(t, s, "b", 1000)
	for _, route := range []string{"c", ""} {
		enqueueOn(t, s, route, 5)
	}
	if _, err := s.pool.Exec(ctx, "ANALYZE webhook_dedup_queue"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		sql  string
		arg  any
		want int // deliveries taken
	}{
		{"route b", s.sql.takeRoute, "b", 10},
		{"the rest but a and b", s.sql.takeRest, []string{"a", "b"}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read, took, plan := explainTake(t, s, tc.sql, 10, tc.arg)
			t.Logf("read %d queue rows to take %d:\n%s", read, took, plan)
			if took != tc.want {
				t.Errorf("took %d deliveries, want %d; plan:\n%s", took, tc.want, plan)
			}
			// Each row taken is read a few times (found in the lane,
			// then updated by key); the backlog is not read at all.
			if read > 10*tc.want {
				t.Errorf("read %d queue rows to take %d behind %d of another route's; plan:\n%s", read, took, backlog, plan)
			}
		})
	}
}

// TestPostgresOrderedTakeByIndex: a Take behind hot keys' backlogs (each
// a head that holds its key, thousands of its events behind it, all
// queued before any other key's) reads a handful of rows to find the
// other keys' heads, not the events that wait behind a head, whatever
// holds the head back (a delivery under way, a retry's backoff, a dead
// letter that blocks its key) and whichever lane is taken from. And the
// head's leaving, which makes the next due, reads a handful too, for an
// ordered event and for an unordered one.
func TestPostgresOrderedTakeByIndex(t *testing.T) {
	s := openPostgres(t, nil, Config{})
	ctx := context.Background()
	const backlog = 1000
	// Statistics of an empty queue, as a queue filled since its last
	// ANALYZE has: the planner takes no event for waiting.
	if _, err := s.pool.Exec(ctx, "ANALYZE webhook_dedup_queue"); err != nil {
		t.Fatal(err)
	}
	req := storetest.Request
	hot := []string{"leased", "retrying", "blocked"}
	for _, key := range hot {
		req.OrderKey, req.OrderBlock = key, key == "blocked"
		for i := range backlog {
			if won, _, err := s.Enqueue(ctx, fmt.Sprintf("%s/%d", key, i), req, 0); err != nil || !won {
				t.Fatalf("Enqueue = %v, %v", won, err)
			}
		}
	}
	storetest.MustEnqueue(t, s, "unordered")
	heads := storetest.TakeFrom(t, s, dedup.AllRoutes, 10, time.Hour)
	if len(heads) != len(hot)+1 {
		t.Fatalf("Take = %d deliveries, want the %d hot heads and the unordered event", len(heads), len(hot))
	}
	leaving := map[string]dedup.Delivery{}
	for _, d := range heads {
		var err error
		switch {
		case d.Claim.Key == "unordered" || strings.HasPrefix(d.Claim.Key, "leased/"):
			leaving[d.Claim.Key] = d
		case strings.HasPrefix(d.Claim.Key, "retrying/"):
			err = s.Retry(ctx, d, time.Now().Add(time.Hour), 500, "")
		case strings.HasPrefix(d.Claim.Key, "blocked/"):
			err = s.Fail(ctx, d, 500, "", time.Hour)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		req.OrderKey, req.OrderBlock = fmt.Sprintf("k%d", i), false
		if won, _, err := s.Enqueue(ctx, fmt.Sprintf("k/%d", i), req, 0); err != nil || !won {
			t.Fatalf("Enqueue = %v, %v", won, err)
		}
	}
	for _, key := range []string{"leased/0", "unordered"} {
		d := leaving[key]
		tok, _ := codec.ParseToken(d.Claim.Token)
		for _, tc := range []struct {
			name string
			sql  string
			args []any
		}{
			{"completed", s.sql.succeed, []any{d.Claim.Key, tok[:], micros(time.Hour), int32(200), nil, nil, nil, attemptJSON(d, 200, ""), dedup.HistoryLen}},
			{"dead-lettered", s.sql.fail, []any{d.Claim.Key, tok[:], int32(500), "", micros(time.Hour), attemptJSON(d, 500, ""), dedup.HistoryLen}},
			{"forgotten", s.sql.forget, []any{d.Claim.Key}},
		} {
			t.Run(key+" "+tc.name, func(t *testing.T) {
				read, _, plan := explainQueue(t, s, tc.sql, tc.args...)
				t.Logf("read %d queue rows:\n%s", read, plan)
				if read > 10 {
					t.Errorf("read %d queue rows for %s to leave; plan:\n%s", read, key, plan)
				}
			})
		}
	}
	if _, err := s.pool.Exec(ctx, "ANALYZE webhook_dedup_queue"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		sql  string
		arg  []any
	}{
		{"every route", s.sql.takeRest, []any{[]string{}}},
		{"the route's lane", s.sql.takeRoute, []any{req.Route}},
		{"the rest lane", s.sql.takeRest, []any{[]string{"other"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read, took, plan := explainTake(t, s, tc.sql, 10, tc.arg...)
			t.Logf("read %d queue rows to take %d:\n%s", read, took, plan)
			if took != 10 {
				t.Errorf("took %d deliveries, want 10; plan:\n%s", took, plan)
			}
			if read > 10*took {
				t.Errorf("read %d queue rows to take %d behind %d events of each of %d keys; plan:\n%s", read, took, backlog, len(hot), plan)
			}
		})
	}
}

// TestPostgresOrderedRace: an event that waits behind the head of its
// key is made due by whatever takes the head away, even when it is queued
// at the moment the head leaves, so that no event waits without a head
// (for ever: no Take would reach it). A worker takes the heads as soon as
// they are due and settles each in one of the ways a head leaves its key.
// On some keys, enqueuers (two to a key) queue their events at once; on
// the others, the worker queues the next event of the key (a follow-up)
// as the head leaves, at the same moment: the race, on every head of
// those keys, the next event queued as the key holds no other (each key a
// chance to catch it, as one event waiting without a head stops its key).
// Then, with nothing under way, no event may wait without an earlier
// place, the events are delivered to the last, each key's one at a time,
// and each enqueuer's (and each key's follow-ups) were first delivered in
// the order they were queued.
func TestPostgresOrderedRace(t *testing.T) {
	const keys, enqueuers, each, followUps = 8, 16, 10, 30
	for _, tc := range []struct {
		name string
		// leave takes the head d away from its key; again asks for
		// it to be given a new place at once, if leave can.
		leave func(ctx context.Context, s *Store, d dedup.Delivery, again bool) error
		// requeues: the follow-up of a head on the follow-up keys is
		// the requeue of the dead letter of the key's head before (a
		// new place at its end, given as the head leaves), when there
		// is one, rather than a new event.
		requeues bool
	}{
		{name: "completed", leave: func(ctx context.Context, s *Store, d dedup.Delivery, again bool) error {
			return s.Succeed(ctx, d, dedup.Result{Status: 200}, time.Hour)
		}},
		{name: "dead-lettered", leave: func(ctx context.Context, s *Store, d dedup.Delivery, again bool) error {
			return s.Fail(ctx, d, 500, "", time.Hour)
		}},
		{name: "forgotten", leave: func(ctx context.Context, s *Store, d dedup.Delivery, again bool) error {
			_, err := s.Forget(ctx, d.Claim.Key)
			return err
		}},
		// A requeued dead letter takes a new place at the end of the
		// key, as an enqueue does, while the others leave theirs: each
		// goes round once.
		{name: "dead-lettered and requeued", requeues: true, leave: func(ctx context.Context, s *Store, d dedup.Delivery, again bool) error {
			if err := s.Fail(ctx, d, 500, "", time.Hour); err != nil || !again {
				return err
			}
			return s.Requeue(ctx, d.Claim.Key)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openPostgres(t, nil, Config{})
			ctx := context.Background()
			// An event's ID is its order key, its source (an enqueuer,
			// or f for the key's follow-ups) and its number there.
			enqueue := func(key int, source string, i int) error {
				req := storetest.Request
				req.OrderKey = fmt.Sprint(key)
				id := fmt.Sprintf("%d/%s/%03d", key, source, i)
				if won, _, err := s.Enqueue(ctx, id, req, 0); err != nil || !won {
					return fmt.Errorf("Enqueue %s = %v, %v", id, won, err)
				}
				return nil
			}
			errs := make(chan error, enqueuers)
			var enqueued sync.WaitGroup
			for g := range enqueuers {
				enqueued.Go(func() {
					for i := range each {
						if err := enqueue(g%keys, fmt.Sprint(g), i); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			enqueuersDone := make(chan struct{})
			go func() { enqueued.Wait(); close(errs); close(enqueuersDone) }()
			var delivered []string // each delivery's event, in the order taken
			seen := map[string]bool{}
			// take takes the due heads, at most one of each key.
			take := func() []dedup.Delivery {
				ds := storetest.TakeFrom(t, s, dedup.AllRoutes, keys, time.Minute)
				taken := map[string]bool{}
				for _, d := range ds {
					key, _, _ := strings.Cut(d.Claim.Key, "/")
					if taken[key] {
						t.Fatalf("Take: two events of key %s at once (%s)", key, d.Claim.Key)
					}
					taken[key] = true
					delivered = append(delivered, d.Claim.Key)
				}
				return ds
			}
			// The worker: each head taken leaves as its key's next
			// follow-up is queued, every head of a Take at once, until
			// the enqueuers are done and nothing is due.
			followed := make([]int, keys)
			requeue := make([]string, keys) // the dead letter to requeue, of each follow-up key
			for key := range keys {
				if err := enqueue(keys+key, "f", 0); err != nil {
					t.Fatal(err)
				}
				followed[key]++
			}
			for {
				done := false
				select {
				case <-enqueuersDone:
					done = true
				default:
				}
				ds := take()
				if len(ds) == 0 && done {
					break
				}
				failed := make(chan error, 2*len(ds))
				var wg sync.WaitGroup
				for _, d := range ds {
					first := !seen[d.Claim.Key]
					seen[d.Claim.Key] = true
					var key int
					if _, err := fmt.Sscanf(d.Claim.Key, "%d/", &key); err != nil {
						t.Fatal(err)
					}
					key -= keys // a follow-up key's index, if not negative
					wg.Go(func() { failed <- tc.leave(ctx, s, d, first && key < 0) })
					switch {
					case key < 0:
					case requeue[key] != "":
						id := requeue[key]
						requeue[key] = ""
						wg.Go(func() { failed <- s.Requeue(ctx, id) })
					case followed[key] < followUps:
						i := followed[key]
						followed[key]++
						wg.Go(func() { failed <- enqueue(keys+key, "f", i) })
					}
					if tc.requeues && first && key >= 0 {
						requeue[key] = d.Claim.Key
					}
				}
				wg.Wait()
				close(failed)
				for err := range failed {
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			for err := range errs {
				t.Fatal(err)
			}
			// Nothing under way: every waiting event has an earlier place.
			rows, err := s.pool.Query(ctx, `SELECT key FROM webhook_dedup_queue q WHERE failed_at IS NULL AND due_at = 'infinity'
	AND NOT EXISTS (SELECT FROM webhook_dedup_queue h WHERE h.order_key = q.order_key AND h.order_seq < q.order_seq)`)
			if err != nil {
				t.Fatal(err)
			}
			orphans, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			if len(orphans) > 0 {
				t.Fatalf("%d events wait without a head, never to be taken: %v", len(orphans), orphans)
			}
			if st := storetest.Stats(t, s); st.Depth != 0 {
				t.Fatalf("Depth = %d once nothing is due, want 0", st.Depth)
			}
			// Each source's events, first delivered in its order.
			next := map[string]int{}
			for _, id := range delivered {
				cut := strings.LastIndex(id, "/")
				from := id[:cut]
				var i int
				if _, err := fmt.Sscanf(id[cut+1:], "%d", &i); err != nil {
					t.Fatal(err)
				}
				switch {
				case i < next[from]: // a requeued one, again
				case i > next[from]:
					t.Fatalf("%s delivered before %s/%03d: %v", id, from, next[from], delivered)
				default:
					next[from]++
				}
			}
			if got, want := len(next), enqueuers+keys; got != want {
				t.Errorf("events of %d sources delivered, want %d", got, want)
			}
			for from, n := range next {
				if want := map[bool]int{true: followUps, false: each}[strings.HasSuffix(from, "/f")]; n != want {
					t.Errorf("%s: %d events delivered, want %d", from, n, want)
				}
			}
		})
	}
}

// TestPostgresOrderedQueuedBefore: the events the release before queued
// behind the head of their key were due at once, not waiting; Take still
// holds each back until the events before it in its key have left, and
// takes it then, in order, whichever way the head left.
func TestPostgresOrderedQueuedBefore(t *testing.T) {
	s := openPostgres(t, nil, Config{})
	ctx := context.Background()
	req := storetest.Request
	req.OrderKey = "a"
	ids := []string{"a1", "a2", "a3", "a4"}
	for _, id := range ids {
		if won, _, err := s.Enqueue(ctx, id, req, 0); err != nil || !won {
			t.Fatalf("Enqueue %s = %v, %v", id, won, err)
		}
	}
	// As the release before left them: due when accepted.
	tag, err := s.pool.Exec(ctx, `UPDATE webhook_dedup_queue SET due_at = accepted_at WHERE due_at = 'infinity'`)
	if err != nil || tag.RowsAffected() != int64(len(ids)-1) {
		t.Fatalf("making the events behind the head due: %v, %v", tag, err)
	}
	leave := []func(d dedup.Delivery) error{
		func(d dedup.Delivery) error { return s.Succeed(ctx, d, dedup.Result{Status: 200}, time.Hour) },
		func(d dedup.Delivery) error { return s.Fail(ctx, d, 500, "", time.Hour) },
		func(d dedup.Delivery) error { _, err := s.Forget(ctx, d.Claim.Key); return err },
		func(d dedup.Delivery) error { return s.Succeed(ctx, d, dedup.Result{Status: 200}, time.Hour) },
	}
	for i, id := range ids {
		ds := storetest.Take(t, s, 10, time.Minute)
		if len(ds) != 1 || ds[0].Claim.Key != id {
			var got []string
			for _, d := range ds {
				got = append(got, d.Claim.Key)
			}
			t.Fatalf("Take = %v, want %s alone", got, id)
		}
		if err := leave[i](ds[0]); err != nil {
			t.Fatal(err)
		}
	}
}

// enqueueOn enqueues n events accepted on route, eight at a time.
func enqueueOn(t *testing.T, s *Store, route string, n int) {
	t.Helper()
	req := storetest.Request
	req.Route = route
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				key := fmt.Sprintf("%s/%d", route, i)
				if won, _, err := s.Enqueue(context.Background(), key, req, 0); err != nil || !won {
					errs <- fmt.Errorf("Enqueue %s = %v, %v", key, won, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// explainTake runs a take statement (n deliveries, then arg, its lane if
// it names one) under explainQueue.
func explainTake(t *testing.T, s *Store, sql string, n int, arg ...any) (read, took int, plan string) {
	t.Helper()
	tok := codec.NewToken()
	return explainQueue(t, s, sql, append([]any{n, tok[:], micros(storetest.Lease)}, arg...)...)
}

// explainQueue runs a statement under EXPLAIN ANALYZE in a transaction it
// rolls back, and returns the queue rows its plan read (returned by a scan
// or removed by its filter, over every loop), the rows its last change
// returned (a take's: the rows it took), and the plan's scans, for
// messages.
func explainQueue(t *testing.T, s *Store, sql string, args ...any) (read, took int, plan string) {
	t.Helper()
	return explainRead(t, s, "webhook_dedup_queue", sql, args...)
}

// explainRead is explainQueue for the rows of relation.
func explainRead(t *testing.T, s *Store, relation, sql string, args ...any) (read, took int, plan string) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var out []struct{ Plan planNode }
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&out); err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	if len(out) != 1 {
		t.Fatalf("EXPLAIN answered %d plans", len(out))
	}
	return readPlan(out[0].Plan, relation)
}

// readPlan returns the rows of relation plan read (returned by a scan or
// removed by its filter, over every loop), the rows its first change
// returned (its own, or its first step's), and its scans of relation, for
// messages.
func readPlan(plan planNode, relation string) (read, took int, scans string) {
	var lines []string
	changed := false
	var walk func(p planNode, depth int)
	walk = func(p planNode, depth int) {
		if p.NodeType == "ModifyTable" && !changed {
			took, changed = int(p.ActualRows), true
		} else if p.Relation == relation {
			rows := int((p.ActualRows + p.RemovedByFilter) * p.ActualLoops)
			read += rows
			lines = append(lines, fmt.Sprintf("%s%s %s: %d rows read (%v×%v, %v removed by filter)",
				strings.Repeat("  ", depth), p.NodeType, p.Index, rows, p.ActualRows, p.ActualLoops, p.RemovedByFilter))
		}
		for _, c := range p.Plans {
			walk(c, depth+1)
		}
	}
	walk(plan, 0)
	return read, took, strings.Join(lines, "\n")
}

// planNode is the part of EXPLAIN's JSON plan node explainTake reads.
type planNode struct {
	NodeType        string     `json:"Node Type"`
	Relation        string     `json:"Relation Name"`
	Index           string     `json:"Index Name"`
	ActualRows      float64    `json:"Actual Rows"`
	ActualLoops     float64    `json:"Actual Loops"`
	RemovedByFilter float64    `json:"Rows Removed by Filter"`
	Plans           []planNode `json:"Plans"`
}

// TestPostgresExtendRidesOutALostConnection checks Extend is retried as
// the settling calls are: the lease keeping of a delivery whose pooled
// connection the server has dropped (a restart, a failover, an idle
// timeout) renews the lease on a new connection rather than failing, and
// the worker's attempt is not taken over.
func TestPostgresExtendRidesOutALostConnection(t *testing.T) {
	t.Parallel()
	url := postgres.Get(t).NewDatabase(t)
	s := openPostgres(t, nil, Config{URL: url})
	ctx := context.Background()
	storetest.MustEnqueue(t, s, "k")
	d := storetest.TakeOne(t, s, storetest.Short)
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	const others = `FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`
	if _, err := other.Exec(ctx, `SELECT pg_terminate_backend(pid) `+others); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, "the store's connections to be dropped", func() bool {
		var n int
		return other.QueryRow(ctx, `SELECT count(*) `+others).Scan(&n) == nil && n == 0
	})
	if err := s.Extend(ctx, d, storetest.Lease); err != nil {
		t.Fatalf("Extend over a dropped connection: %v", err)
	}
	var extended bool
	if err := other.QueryRow(ctx, `SELECT due_at > now() + $1::bigint * interval '1 microsecond' FROM webhook_dedup_queue WHERE key = 'k'`,
		micros(storetest.Lease/2)).Scan(&extended); err != nil || !extended {
		t.Errorf("the lease after Extend runs out within %s (%v), want %s from the Extend", storetest.Lease/2, err, storetest.Lease)
	}
}

// TestPostgresLanesTakenConcurrently checks that workers taking from every
// lane at once, several to a lane as replicas do, and one taking from
// every route (a replica whose configuration gives no route a lane of its
// own), hand out each delivery once, and each from a lane that holds it:
// the rest lane locks its rows route by route, in a statement of its own
// shape.
func TestPostgresLanesTakenConcurrently(t *testing.T) {
	t.Parallel()
	s := openPostgres(t, nil, Config{})
	const each = 100
	routes := []string{"a", "b", "c", ""}
	for _, route := range routes {
		enqueueOn(t, s, route, each)
	}
	lanes := []dedup.Lane{dedup.RouteLane("a"), dedup.RouteLane("b"), dedup.RestLane("a", "b"), dedup.AllRoutes}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	taken := map[string][]dedup.Lane{}
	var errs []error
	var wg sync.WaitGroup
	for _, lane := range lanes {
		for range 2 {
			wg.Go(func() {
				for {
					mu.Lock()
					done := len(taken) == each*len(routes)
					mu.Unlock()
					if done || ctx.Err() != nil {
						return
					}
					// A Take may come back empty while others hold what is
					// left locked: the loop asks again.
					ds, err := s.Take(ctx, lane, 5, storetest.Lease)
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
						mu.Unlock()
						return
					}
					for _, d := range ds {
						taken[d.Claim.Key] = append(taken[d.Claim.Key], lane)
						if !lane.Holds(d.Request.Route) {
							errs = append(errs, fmt.Errorf("lane %+v handed out %s of route %q", lane, d.Claim.Key, d.Request.Route))
						}
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(taken) != each*len(routes) {
		t.Errorf("%d deliveries handed out within 30s, want %d", len(taken), each*len(routes))
	}
	for key, by := range taken {
		if len(by) != 1 {
			t.Errorf("%s handed out %d times, by lanes %+v", key, len(by), by)
		}
	}
}

// TestPostgresDepthAcrossReplicas: each process sharing the tables checks
// maxDepth against its own reckoning of the depth (depthView), in which
// its own enqueues count at once and another's from its next read of the
// depth. The queue then passes the bound by what the others accepted
// since that read, the slack docs/delivery.md states, and no further once
// each has read it; and a process that finds the queue full reads it
// again (at most once a second), so it sees the room another made.
func TestPostgresDepthAcrossReplicas(t *testing.T) {
	t.Parallel()
	url := postgres.Get(t).NewDatabase(t)
	a := openPostgres(t, nil, Config{URL: url})
	b := openPostgres(t, nil, Config{URL: url})
	ctx := context.Background()
	const bound = 5
	enqueue := func(s *Store, key string) error {
		won, rec, err := s.Enqueue(ctx, key, storetest.Request, bound)
		if err == nil && !won {
			return fmt.Errorf("Enqueue %s: a loss to %v", key, rec.State)
		}
		return err
	}
	storetest.Stats(t, a)
	storetest.Stats(t, b) // both read the depth: none
	for i := range bound {
		if err := enqueue(a, fmt.Sprint("a/", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := enqueue(a, "a/over"); !errors.Is(err, dedup.ErrQueueFull) {
		t.Errorf("a's enqueue past the bound of its own = %v, want dedup.ErrQueueFull", err)
	}
	// b has not read the depth since: a's five are its slack.
	for i := range bound {
		if err := enqueue(b, fmt.Sprint("b/", i)); err != nil {
			t.Fatalf("b's enqueue %d, within the slack: %v", i, err)
		}
	}
	if err := enqueue(b, "b/over"); !errors.Is(err, dedup.ErrQueueFull) {
		t.Errorf("b's enqueue past the bound of its own = %v, want dedup.ErrQueueFull", err)
	}
	if st := storetest.Stats(t, b); st.Depth != 2*bound {
		t.Errorf("Stats = %+v, want the bound and the slack: %d", st, 2*bound)
	}
	// b took the others' work in with that read; a reads the depth again
	// once it finds the queue full a second after its read.
	if err := enqueue(b, "b/over"); !errors.Is(err, dedup.ErrQueueFull) {
		t.Errorf("b's enqueue once it read the depth = %v, want dedup.ErrQueueFull", err)
	}
	if ds := storetest.Take(t, b, 2*bound, storetest.Lease); len(ds) != 2*bound {
		t.Fatalf("b took %d deliveries, want %d", len(ds), 2*bound)
	}
	storetest.Eventually(t, "a to see the room b made", func() bool {
		err := enqueue(a, "a/later")
		if err != nil && !errors.Is(err, dedup.ErrQueueFull) {
			t.Fatal(err)
		}
		return err == nil
	})
}

// TestPostgresStatsReadsOnlyDeadLetters: a read of the queue's stats reads
// the record of each dead letter (whether it is live), and no other: the
// completed records the table keeps for their TTL, however many, are not
// read on every read of the depth (a join of the queue to the records
// read all of them, along their primary key or into a hash).
func TestPostgresStatsReadsOnlyDeadLetters(t *testing.T) {
	t.Parallel()
	s := openPostgres(t, nil, Config{})
	ctx := context.Background()
	const completed = 3000
	// Completed records whose keys sort before and among the queued ones.
	if _, err := s.pool.Exec(ctx, `INSERT INTO webhook_dedup_records (key, state, since, expires_at)
		SELECT prefix || i, 2, now(), now() + interval '1 day' FROM generate_series(1, $1::int / 2) i, unnest(ARRAY['0/', 'a/0']) prefix`,
		completed); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE webhook_dedup_records`); err != nil {
		t.Fatal(err)
	}
	enqueueOn(t, s, "a", 10)
	d := storetest.TakeOne(t, s, storetest.Lease)
	if err := s.Fail(ctx, d, 500, "gone", storetest.Keep); err != nil {
		t.Fatal(err)
	}
	read, _, plan := explainRead(t, s, "webhook_dedup_records", s.sql.stats)
	t.Logf("read %d records:\n%s", read, plan)
	if read > 1 {
		t.Errorf("a read of the stats read %d records, want the dead letter's alone; plan:\n%s", read, plan)
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Depth != 9 || st.DeadLetters != 1 {
		t.Errorf("Stats = depth %d, dead letters %d; want 9 and 1", st.Depth, st.DeadLetters)
	}
}

// TestPostgresStatsReadsQueueByIndex: a read of the queue's stats reads
// the queue by its indexes, not the table whole. The pages of the rows
// delivered events left behind (emptied here by a vacuum, kept as the
// table's until it is rewritten) are not read on every read of the depth:
// a scan of the table read all of them, once a second, 40 ms after 12 s
// of intake in the bench.
func TestPostgresStatsReadsQueueByIndex(t *testing.T) {
	t.Parallel()
	s := openPostgres(t, nil, Config{})
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `ALTER TABLE webhook_dedup_queue SET (autovacuum_enabled = off)`); err != nil {
		t.Fatal(err)
	}
	enqueueOn(t, s, "a", 3000)
	if _, err := s.pool.Exec(ctx, `DELETE FROM webhook_dedup_queue`); err != nil {
		t.Fatal(err)
	}
	enqueueOn(t, s, "b", 10)
	if _, err := s.pool.Exec(ctx, `VACUUM webhook_dedup_queue`); err != nil {
		t.Fatal(err)
	}
	var pages int
	if err := s.pool.QueryRow(ctx, `SELECT pg_relation_size('webhook_dedup_queue') / current_setting('block_size')::int`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if pages < 100 {
		t.Fatalf("the queue's table has %d pages; the test wants 100 or more", pages)
	}
	var out []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		}
	}
	if err := s.pool.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+s.sql.stats).Scan(&out); err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 {
		t.Fatalf("EXPLAIN answered %d plans", len(out))
	}
	if blocks := out[0].Plan.Hit + out[0].Plan.Read; blocks > pages/4 {
		t.Errorf("a read of the stats read %d blocks of a queue of 10 events in a table of %d pages", blocks, pages)
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Depth != 10 || st.Routes["b"] != 10 || len(st.Routes) != 1 {
		t.Errorf("Stats = depth %d, routes %v; want 10, all on b", st.Depth, st.Routes)
	}
}

// TestPostgresStatementsNotCompiled: the store's statements are not JIT
// compiled. A statement that scans a table (the stats' count of the
// queue did, until it read the queue by its indexes) is estimated past
// every JIT threshold by the scan's penalty (probeSettings), and
// compiling it on each run, inlined and optimized, took longer than its
// bound on a core shared with the proxy: the stats read timed out. Here a
// count of the queue's table, on a connection of the store's pool, is
// such a statement. (Where the server is built without JIT, this passes
// whatever the settings.)
func TestPostgresStatementsNotCompiled(t *testing.T) {
	t.Parallel()
	s := openPostgres(t, nil, Config{})
	enqueueOn(t, s, "a", 10)
	ctx := context.Background()
	var out []map[string]any
	if err := s.pool.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(*) FROM webhook_dedup_queue").Scan(&out); err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 {
		t.Fatalf("EXPLAIN answered %d plans", len(out))
	}
	if jit, ok := out[0]["JIT"]; ok {
		t.Errorf("a scan of the queue's table was JIT compiled: %v", jit)
	}
}
