package pgstore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// TestPostgresPlansFollowTheQueue: PostgreSQL plans a prepared statement
// for its parameters' values five times, then may keep one generic plan,
// made for no values and the statistics of that moment, for every later
// run on that connection. Made on a queue analyzed empty (a healthy
// queue's usual state, between bursts), a Take's generic plan finds the
// due rows by a bitmap scan and sorts them, which the statistics say
// costs nothing for the one row they promise, and goes on doing so as a
// burst fills the queue: 455 ms a Take behind 98,000 events, and delivery
// fell to a fifth of intake (docs/performance.md, "A generic plan").
// Each statement that finds queue rows by what its parameters say runs
// here as the store runs it, on a connection of the store's pool:
// prepared, run past the plan cache's five on a queue analyzed empty,
// then once more, under EXPLAIN ANALYZE, on the queue a burst has filled
// since: it must read a handful of rows, not the burst.
func TestPostgresPlansFollowTheQueue(t *testing.T) {
	t.Parallel()
	s := openPostgres(t, nil, Config{})
	ctx := context.Background()
	// No autovacuum: its ANALYZE would make the cached plans anew, for
	// the statistics of the burst, which a burst may not wait for.
	if _, err := s.pool.Exec(ctx, `ALTER TABLE webhook_dedup_queue SET (autovacuum_enabled = off); ANALYZE webhook_dedup_queue`); err != nil {
		t.Fatal(err)
	}
	const burst, n = 3000, 10
	tok := fmt.Sprintf(`'\x%x'::bytea`, make([]byte, 16))
	lease := micros(storetest.Lease)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("'a/%d'", i)
	}
	cases := []struct {
		name, sql string
		// args are the statement's parameters as SQL literals.
		args string
		// took is how many rows its change returns.
		took int
	}{
		{"take of a route's lane", s.sql.takeRoute, fmt.Sprintf("%d, %s, %d, 'a'", n, tok, lease), n},
		{"take of every route", s.sql.takeRest, fmt.Sprintf("%d, %s, %d, '{}'::text[]", n, tok, lease), n},
		{"take of the rest lane", s.sql.takeRest, fmt.Sprintf("%d, %s, %d, ARRAY['b']", n, tok, lease), n},
		{"order locks of a group of completions", s.sql.lockOrdersOf, "ARRAY[" + strings.Join(keys, ", ") + "]", 0},
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for i, tc := range cases {
		if _, err := conn.Exec(ctx, fmt.Sprintf("PREPARE p%d AS %s", i, tc.sql)); err != nil {
			t.Fatalf("%s: PREPARE: %v", tc.name, err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			if _, err := tx.Exec(ctx, fmt.Sprintf("EXECUTE p%d(%s)", i, tc.args)); err != nil {
				t.Fatalf("%s on the empty queue: %v", tc.name, err)
			}
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
	enqueueOn(t, s, "a", burst)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			var out []struct{ Plan planNode }
			if err := tx.QueryRow(ctx, fmt.Sprintf("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE p%d(%s)", i, tc.args)).Scan(&out); err != nil {
				t.Fatalf("EXPLAIN: %v", err)
			}
			read, took, plan := readPlan(out[0].Plan, "webhook_dedup_queue")
			t.Logf("read %d queue rows:\n%s", read, plan)
			if took != tc.took {
				t.Errorf("took %d rows, want %d; plan:\n%s", took, tc.took, plan)
			}
			if read > 10*n {
				t.Errorf("read %d queue rows of the %d a burst queued since the plan was made, want at most %d; plan:\n%s", read, burst, 10*n, plan)
			}
		})
	}
}
