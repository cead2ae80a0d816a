package pgstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// commitTogether runs Succeed of each of ds with res in one shared
// statement, and returns which of them it completed.
func commitTogether(t *testing.T, s *Store, res dedup.Result, ds ...dedup.Delivery) []bool {
	t.Helper()
	calls := make([]*succeedCall, len(ds))
	for i, d := range ds {
		tok, ok := codec.ParseToken(d.Claim.Token)
		if !ok {
			t.Fatalf("token %q does not parse", d.Claim.Token)
		}
		calls[i] = newSucceedCall(context.Background(), d, tok, res, storetest.Keep)
	}
	s.commitSucceeds(calls)
	done := make([]bool, len(calls))
	for i, c := range calls {
		done[i] = <-c.done
	}
	return done
}

// enqueueKeyed enqueues keys, ordered by orderKey unless it is empty.
func enqueueKeyed(t *testing.T, s *Store, orderKey string, keys ...string) {
	t.Helper()
	req := storetest.Request
	req.OrderKey = orderKey
	for _, k := range keys {
		if won, _, err := s.Enqueue(context.Background(), k, req, 0); err != nil || !won {
			t.Fatalf("Enqueue %s = %v, %v", k, won, err)
		}
	}
}

// TestPostgresSucceedGroup: in one shared statement, each delivery its
// holder still owns is completed, an ordered head too (the next of its key
// then due), and one that is no longer its holder's is left alone, for
// Succeed to report ErrNotOwner.
func TestPostgresSucceedGroup(t *testing.T) {
	t.Parallel()
	s := openPostgres(t, nil, Config{})
	ctx := context.Background()
	enqueueKeyed(t, s, "", "plain", "lost")
	enqueueKeyed(t, s, "customer", "head", "next")
	held := map[string]dedup.Delivery{}
	for _, d := range storetest.Take(t, s, 10, storetest.Lease) {
		held[d.Claim.Key] = d
	}
	if len(held) != 3 {
		t.Fatalf("Take handed out %d deliveries, want plain, lost and head", len(held))
	}
	other := codec.NewToken()
	lost := held["lost"]
	lost.Claim.Token = hex.EncodeToString(other[:]) // as if taken over
	done := commitTogether(t, s, storetest.Replayed, held["plain"], held["head"], lost)
	if want := []bool{true, true, false}; done[0] != want[0] || done[1] != want[1] || done[2] != want[2] {
		t.Fatalf("completed by the shared statement (plain, head, lost) = %v, want %v", done, want)
	}
	for _, k := range []string{"plain", "head"} {
		if rec, err := s.Lookup(ctx, k); err != nil || rec.State != dedup.Completed || rec.Result.Status != storetest.Replayed.Status {
			t.Errorf("Lookup %s = %+v, %v; want completed with the result", k, rec, err)
		}
	}
	if ds := storetest.Take(t, s, 10, storetest.Lease); len(ds) != 1 || ds[0].Claim.Key != "next" {
		t.Errorf("Take after the head completed = %v, want next (its key's new head)", ds)
	}
	if err := s.Succeed(ctx, lost, storetest.Replayed, storetest.Keep); !errors.Is(err, dedup.ErrNotOwner) {
		t.Errorf("Succeed of a delivery taken over = %v, want dedup.ErrNotOwner", err)
	}
	if err := s.Succeed(ctx, held["lost"], storetest.Replayed, storetest.Keep); err != nil {
		t.Errorf("Succeed by the holder = %v", err)
	}
}

// TestPostgresSucceedGroupLocksOrderKey: once this process has handed out
// an ordered event, the shared completion takes its order key's lock
// before its statement (it waits while another transaction holds it, as
// an ordered enqueue of that key does), so that the next of the key is
// made due by a statement that sees every event of the key committed
// before it. (A process that has handed out none leaves the locks out.)
func TestPostgresSucceedGroupLocksOrderKey(t *testing.T) {
	t.Parallel()
	url := postgres.Get(t).NewDatabase(t)
	s := openPostgres(t, nil, Config{URL: url})
	ctx := context.Background()
	enqueueKeyed(t, s, "customer", "head")
	ds := storetest.Take(t, s, 10, storetest.Lease)
	if len(ds) != 1 {
		t.Fatalf("Take handed out %d deliveries, want the head", len(ds))
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, lockOrderKeySQL, "customer"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Succeed(ctx, ds[0], storetest.Replayed, storetest.Keep) }()
	storetest.Eventually(t, "the completion waiting for the order key's lock", func() bool { return waitingFor(t, url, "advisory") != 0 })
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Succeed = %v", err)
	}
	if rec, err := s.Lookup(ctx, "head"); err != nil || rec.State != dedup.Completed {
		t.Errorf("Lookup = %v, %v; want completed", rec.State, err)
	}
}

// TestPostgresSucceedGroupSameOrderKey: two held deliveries of one order
// key (heads queued by an earlier release, due at once: see
// TestPostgresOrderedQueuedBefore) are not completed by one shared
// statement, which would take both away and make neither's next due:
// each is completed alone, and the key goes on.
func TestPostgresSucceedGroupSameOrderKey(t *testing.T) {
	t.Parallel()
	s := openPostgres(t, nil, Config{})
	ctx := context.Background()
	enqueueKeyed(t, s, "customer", "o1", "o2", "o3")
	tok := codec.NewToken()
	if _, err := s.pool.Exec(ctx, `UPDATE webhook_dedup_queue SET lease_token = $1, due_at = now() + interval '1 hour' WHERE key IN ('o1', 'o2')`, tok[:]); err != nil {
		t.Fatal(err)
	}
	held := func(key string) dedup.Delivery {
		return dedup.Delivery{Claim: dedup.Claim{Key: key, Token: hex.EncodeToString(tok[:])}}
	}
	if done := commitTogether(t, s, storetest.Replayed, held("o1"), held("o2")); done[0] || done[1] {
		t.Fatalf("a shared statement completed two heads of one order key: %v", done)
	}
	for _, k := range []string{"o1", "o2"} {
		if err := s.Succeed(ctx, held(k), storetest.Replayed, storetest.Keep); err != nil {
			t.Fatalf("Succeed %s alone = %v", k, err)
		}
	}
	if ds := storetest.Take(t, s, 10, storetest.Lease); len(ds) != 1 || ds[0].Claim.Key != "o3" {
		t.Errorf("Take after o1 and o2 completed = %v, want o3", ds)
	}
}

// TestPostgresSucceedGroupCancel: a Succeed whose caller gives up while it
// waits for a shared statement returns at once with its context's error,
// and the delivery stays its holder's.
func TestPostgresSucceedGroupCancel(t *testing.T) {
	t.Parallel()
	const timeout = 20 * time.Second
	url := postgres.Get(t).NewDatabase(t)
	s := openPostgres(t, nil, Config{URL: url, Timeout: timeout})
	enqueueKeyed(t, s, "", "first", "second")
	held := map[string]dedup.Delivery{}
	for _, d := range storetest.Take(t, s, 10, storetest.Lease) {
		held[d.Claim.Key] = d
	}
	release := blockWrites(t, s, url)
	succeed := func(ctx context.Context, key string) <-chan error {
		out := make(chan error, 1)
		go func() { out <- s.Succeed(ctx, held[key], storetest.Replayed, storetest.Keep) }()
		return out
	}
	first := succeed(context.Background(), "first")
	storetest.Eventually(t, "the first statement waiting for the lock", func() bool { return waitingStatement(t, url) != 0 })
	ctx, cancel := context.WithCancel(context.Background())
	second := succeed(ctx, "second")
	storetest.Eventually(t, "the second Succeed waiting for a statement", func() bool { return s.succeeds.waiting() == 1 })
	cancel()
	select {
	case err := <-second:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the cancelled Succeed = %v; want context.Canceled", err)
		}
	case <-time.After(timeout / 2):
		t.Fatalf("the cancelled Succeed still waits %v later, behind the statement before it", timeout/2)
	}
	release()
	if err := <-first; err != nil {
		t.Errorf("the first Succeed = %v", err)
	}
	storetest.Eventually(t, "the committer idle", s.succeeds.idle)
	if rec, err := s.Lookup(context.Background(), "second"); err != nil || rec.State != dedup.Delivering {
		t.Errorf("Lookup of the cancelled Succeed's key = %v, %v; want still delivering", rec.State, err)
	}
}

// TestPostgresGroupStatementsProbeByKey: the shared statements read each
// of their keys' rows by its primary key, whatever the statistics say.
// The queue filled since its last ANALYZE (as a saturating intake fills
// it: autovacuum analyzes once a minute at most) made the planner of the
// shared completion believe a few rows were left, and read all of them
// (25,000, 216 ms for 8 completions) by a partial index whose predicate
// its conditions implied; the shared enqueue's probes of the records could
// go the same way by the expiry index.
//
// Three plans are checked: the store's own (probeSettings), and, for a
// URL that sets plan_cache_mode, a custom plan for each run and a plain
// generic one, which knows nothing of the arrays.
func TestPostgresGroupStatementsProbeByKey(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"", "force_custom_plan", "force_generic_plan"} {
		name, url := "the store's own", postgres.Get(t).NewDatabase(t)
		if mode != "" {
			name, url = mode, url+"&plan_cache_mode="+mode
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			probesByKey(t, openPostgres(t, nil, Config{URL: url}))
		})
	}
}

func probesByKey(t *testing.T, s *Store) {
	ctx := context.Background()
	for _, table := range []string{"webhook_dedup_records", "webhook_dedup_queue"} {
		if _, err := s.pool.Exec(ctx, "ALTER TABLE "+table+" SET (autovacuum_enabled = false)"); err != nil {
			t.Fatal(err)
		}
	}
	// Statistics of a queue of a few events, none of them taken.
	calls := make([]*enqueueCall, 0, maxGroup)
	for i := range 100 {
		calls = append(calls, newCall(ctx, fmt.Sprint("before", i), storetest.Request))
	}
	if _, err := s.runEnqueues(ctx, calls, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, "ANALYZE webhook_dedup_records, webhook_dedup_queue"); err != nil {
		t.Fatal(err)
	}
	const backlog, n = 5000, 8
	calls = calls[:0]
	for i := range backlog {
		calls = append(calls, newCall(ctx, fmt.Sprint("k", i), storetest.Request))
		if len(calls) == maxGroup || i == backlog-1 {
			if _, err := s.runEnqueues(ctx, calls, false); err != nil {
				t.Fatal(err)
			}
			calls = calls[:0]
		}
	}
	var succeeds []*succeedCall
	for _, d := range storetest.Take(t, s, n, storetest.Lease) {
		tok, _ := codec.ParseToken(d.Claim.Token)
		succeeds = append(succeeds, newSucceedCall(ctx, d, tok, storetest.Replayed, storetest.Keep))
	}
	// Half new keys, half held by the events just taken.
	var enqueues []*enqueueCall
	for i, c := range succeeds {
		key := c.key
		if i%2 == 0 {
			key = fmt.Sprint("new", i)
		}
		enqueues = append(enqueues, newCall(ctx, key, storetest.Request))
	}
	enqueueArgs, succeedArgs := enqueueManyArgs(enqueues, nil, s.announcer), succeedManyArgs(succeeds)
	for _, tc := range []struct {
		name, relation, sql string
		args                []any
	}{
		{"shared completion, queue", "webhook_dedup_queue", s.sql.succeedMany, succeedArgs},
		{"shared completion, records", "webhook_dedup_records", s.sql.succeedMany, succeedArgs},
		{"shared enqueue, records", "webhook_dedup_records", s.sql.enqueueMany, enqueueArgs},
		{"shared enqueue, queue", "webhook_dedup_queue", s.sql.enqueueMany, enqueueArgs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read, _, plan := explainRead(t, s, tc.relation, tc.sql, tc.args...)
			if read > 2*n {
				t.Errorf("read %d rows of %s for %d keys, behind %d events; plan:\n%s", read, tc.relation, n, backlog, plan)
			}
		})
	}
}
