package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// TestPostgresPlansFollowTheQueue: PostgreSQL may run a prepared statement
// by a generic plan, made once for no parameter values and the statistics
// of that moment, and the store's connections have it do so for every
// statement (probeSettings). Made on a queue analyzed empty (a healthy
// queue's usual state, between bursts), a generic plan left to choose
// reads a table it believes empty by whatever scan costs least, and goes
// on doing so as a burst fills it: a Take read every due row once for each
// (9,006,000 rows to take 10 behind 3,000), 455 ms a Take behind 98,000
// events, and delivery fell to a fifth of intake (docs/performance.md, "A
// generic plan"). Each statement a webhook or a delivery meets runs here
// as the store runs it, on a connection of the store's pool: prepared, run
// past the plan cache's five on a queue analyzed empty, then once more,
// under EXPLAIN ANALYZE, on the queue a burst has filled since: it must
// read a handful of rows, not the burst.
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
	array := func(elems []string) string { return "ARRAY[" + strings.Join(elems, ", ") + "]" }
	list := func(v string) string { return array(slices.Repeat([]string{v}, n)) }
	keyList := array(keys)
	// A group of enqueues: half of its keys queued by the burst (their
	// live records answered), half new (queued).
	enqueueKeys := make([]string, n)
	for i := range enqueueKeys {
		enqueueKeys[i] = fmt.Sprintf("'%c/%d'", "an"[i%2], i)
	}
	enqueueArgs := strings.Join([]string{array(enqueueKeys),
		list("'POST'"), list("'/a'"), list("'h'"), list(`'\x'::bytea`), list("'127.0.0.1:1'"), list("false"),
		list(`'\x7b7d'::bytea`), "NULL", list("'a'"), list("''"), list("0::bigint"), list("''"), "''"}, ", ")
	// A group of completions of deliveries leased to tok (setup).
	succeedArgs := strings.Join([]string{keyList, list(tok), list("1000000::bigint"), list("200"), list("NULL::bytea"),
		list("''"), list("NULL::bytea"), list(`'{"status":200}'`), "10"}, ", ")
	cases := []struct {
		name, sql string
		// args are the statement's parameters as SQL literals.
		args string
		// took is how many rows its change returns.
		took int
		// setup runs before it, in its transaction, after the burst.
		setup string
	}{
		{"take of a route's lane", s.sql.takeRoute, fmt.Sprintf("%d, %s, %d, 'a'", n, tok, lease), n, ""},
		{"take of every route", s.sql.takeRest, fmt.Sprintf("%d, %s, %d, '{}'::text[]", n, tok, lease), n, ""},
		{"take of the rest lane", s.sql.takeRest, fmt.Sprintf("%d, %s, %d, ARRAY['b']", n, tok, lease), n, ""},
		{"take of the rest lane, the burst's route excepted", s.sql.takeRest, fmt.Sprintf("%d, %s, %d, ARRAY['a']", n, tok, lease), 0, ""},
		{"order locks of a group of completions", s.sql.lockOrdersOf, keyList, 0, ""},
		{"a group of completions", s.sql.succeedMany, succeedArgs, n,
			fmt.Sprintf("UPDATE webhook_dedup_queue SET lease_token = %s WHERE key = ANY(%s)", tok, keyList)},
		{"a group of enqueues", s.sql.enqueueMany, enqueueArgs, n / 2, ""},
		{"an ordered enqueue", s.sql.enqueue, `'o/1', 'POST', '/a', 'h', '\x'::bytea, '127.0.0.1:1', false, '\x7b7d'::bytea,
			NULL, 'a', '', 0, '', 'cus_1', false, ''`, 1, ""},
		{"a claim of a queued key", s.sql.claim, fmt.Sprintf("'a/1', %s, %d", tok, lease), 0, ""},
		{"a claim of a new key", s.sql.claim, fmt.Sprintf("'c/1', %s, %d", tok, lease), 1, ""},
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
			if tc.setup != "" {
				if _, err := tx.Exec(ctx, tc.setup); err != nil {
					t.Fatal(err)
				}
			}
			var out []struct{ Plan planNode }
			if err := tx.QueryRow(ctx, fmt.Sprintf("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE p%d(%s)", i, tc.args)).Scan(&out); err != nil {
				t.Fatalf("EXPLAIN: %v", err)
			}
			read, took, plan := readPlan(out[0].Plan, "webhook_dedup_queue")
			readRecords, _, planRecords := readPlan(out[0].Plan, "webhook_dedup_records")
			read, plan = read+readRecords, plan+"\n"+planRecords
			t.Logf("read %d queue and record rows:\n%s", read, plan)
			if took != tc.took {
				t.Errorf("took %d rows, want %d; plan:\n%s", took, tc.took, plan)
			}
			if read > 10*n {
				t.Errorf("read %d queue and record rows of the %d a burst queued since the plan was made, want at most %d; plan:\n%s", read, burst, 10*n, plan)
			}
		})
	}
}
