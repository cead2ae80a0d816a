package pgstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// A hold is every transaction that updates a store's queue made to wait
// (holdTakes).
type hold struct {
	// release lets the held transactions go on.
	release func()
	// cancels counts the cancel requests the held transactions got and
	// went on waiting through.
	cancels func() int64
}

// holdTakes makes every transaction that updates s's queue wait until
// the hold's release, at its statement's end or at its COMMIT
// (atCommit): until then it waits on an advisory lock that a connection
// of the test holds, and a cancel request (a caller that gave up) does
// not end the wait. That is a database that finishes, later, what its
// caller stopped waiting for: a statement the cancel reached too late,
// or a COMMIT held up writing its WAL. Only while it waits: a cancel
// request that lands after the release may still end the transaction
// (between the trigger's calls), which a COMMIT writing its WAL ignores;
// so a test of a COMMIT waits for the caller's cancel (pgx sends one as
// it closes the connection, asynchronously) to be counted before it
// releases.
func holdTakes(t *testing.T, s *Store, url string, atCommit bool) hold {
	t.Helper()
	ctx := context.Background()
	const holdSQL = `CREATE SEQUENCE %[1]shold_cancels;
CREATE FUNCTION %[1]shold_take() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	LOOP
		BEGIN
			PERFORM pg_advisory_xact_lock_shared(4242);
			RETURN NULL;
		EXCEPTION WHEN query_canceled THEN
			-- The caller gave up: go on waiting, as if told too late.
			-- A sequence's count is kept whatever becomes of the
			-- transaction.
			PERFORM nextval('%[1]shold_cancels');
		END;
	END LOOP;
END $$`
	trigger := `CREATE TRIGGER hold_take AFTER UPDATE ON %[1]squeue FOR EACH STATEMENT EXECUTE FUNCTION %[1]shold_take()`
	if atCommit {
		trigger = `CREATE CONSTRAINT TRIGGER hold_take AFTER UPDATE ON %[1]squeue DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW EXECUTE FUNCTION %[1]shold_take()`
	}
	if _, err := s.pool.Exec(ctx, fmt.Sprintf(holdSQL+";\n"+trigger, s.prefix)); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(4242)`); err != nil {
		t.Fatal(err)
	}
	release := sync.OnceFunc(func() {
		_ = conn.Close(ctx)
		// DROP TRIGGER waits for the held statement's transaction to
		// end, committed or rolled back: what it leased is then as the
		// store left it.
		if _, err := s.pool.Exec(ctx, fmt.Sprintf(`DROP TRIGGER hold_take ON %[1]squeue`, s.prefix)); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(release)
	cancels := func() int64 {
		var n int64
		var called bool
		if err := s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT last_value, is_called FROM %[1]shold_cancels`, s.prefix)).Scan(&n, &called); err != nil {
			t.Fatal(err)
		}
		if !called {
			return 0
		}
		return n
	}
	return hold{release: release, cancels: cancels}
}

// TestPostgresTakeAnswerLost: a Take whose caller stops waiting for its
// answer (the store's Timeout passes, or the caller's context ends: a
// loaded database, a shutdown) while the database is still at its
// statement, which then ends, leases nothing: its deliveries are due at
// once for the next Take. One whose COMMIT's answer does not come hands
// its deliveries out all the same (the COMMIT then lands). Neither leaves
// them held by a lease no one will renew or settle until it runs out
// (LEASE_TTL, 45s by default: in the bench, the backlog of an ordered key
// waited behind its head that long). Whichever lane is taken from, and for
// an ordered head as for an unordered event; the head, once delivered,
// makes the next of its key due.
func TestPostgresTakeAnswerLost(t *testing.T) {
	t.Parallel()
	// The lost Take's lease: a Take that finds its deliveries after it
	// did not wait for that lease to run out.
	const lost = time.Hour
	for _, tc := range []struct {
		name string
		lane dedup.Lane
		// atCommit holds the COMMIT rather than the statement.
		atCommit bool
		// cancel ends the Take's wait by the caller's context; false:
		// by the store's Timeout.
		cancel bool
	}{
		{"statement, timeout, every route", dedup.AllRoutes, false, false},
		{"statement, timeout, a route's lane", dedup.RouteLane(storetest.Request.Route), false, false},
		{"statement, cancelled, the rest lane", dedup.RestLane("other"), false, true},
		{"commit, timeout, a route's lane", dedup.RouteLane(storetest.Request.Route), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := postgres.Get(t).NewDatabase(t)
			s := openPostgres(t, nil, Config{URL: url})
			// The Timeout that ends the wait. Held at its COMMIT, the
			// Take's statement must end within it first: on a loaded
			// machine, the margin the stores' tests allow for load.
			timeout := time.Second
			if tc.atCommit {
				timeout = storetest.LoadMargin
			}
			short, err := Open(Config{URL: url, Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = short.Close() })
			// A pooled connection first: its dial on a loaded machine
			// is not the wait this is about.
			storetest.Eventually(t, "a first statement of the short store", func() bool {
				_, err := short.Stats(context.Background())
				return err == nil
			})
			enqueueKeyed(t, s, "customer", "head", "next")
			enqueueKeyed(t, s, "", "unordered")
			held := holdTakes(t, s, url, tc.atCommit)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type answer struct {
				ds  []dedup.Delivery
				err error
			}
			took := make(chan answer, 1)
			go func() {
				ds, err := short.Take(ctx, tc.lane, 10, lost)
				took <- answer{ds, err}
			}()
			// At the hold's own lock: a statement waiting on a row the
			// held transaction locked waits on a lock too.
			storetest.Eventually(t, "the Take held", func() bool { return waitingFor(t, url, "advisory") != 0 })
			if tc.cancel {
				cancel()
			}
			var a answer
			select {
			case a = <-took:
			case <-time.After(10 * timeout):
				t.Fatalf("the Take still waits %s after it began (Timeout %s)", 10*timeout, timeout)
			}
			if tc.atCommit {
				if got := deliveryKeys(a.ds); a.err != nil || got != "head unordered" {
					t.Fatalf("the Take whose COMMIT was not answered = %s, %v; want head unordered", got, a.err)
				}
				storetest.Eventually(t, "the lost COMMIT's cancel request, waited through", func() bool { return held.cancels() > 0 })
			}
			held.release()
			ds, err := s.Take(context.Background(), dedup.AllRoutes, 10, storetest.Lease)
			if tc.atCommit {
				if got := deliveryKeys(ds); err != nil || got != "" {
					t.Fatalf("Take after it = %s, %v; want nothing: the first one's lease committed", got, err)
				}
				ds = a.ds
			} else {
				if a.err == nil {
					t.Fatalf("the Take = %s, nil; want its wait's end", deliveryKeys(a.ds))
				}
				if got := deliveryKeys(ds); err != nil || got != "head unordered" {
					t.Fatalf("Take after the lost one (%v) = %s, %v; want head unordered at once, not after its lease (%s)", a.err, got, err, lost)
				}
			}
			for _, d := range ds {
				if err := s.Succeed(context.Background(), d, dedup.Result{Status: 200}, storetest.Keep); err != nil {
					t.Fatal(err)
				}
			}
			ds, err = s.Take(context.Background(), dedup.AllRoutes, 10, storetest.Lease)
			if got := deliveryKeys(ds); err != nil || got != "next" {
				t.Fatalf("Take after the head's completion = %s, %v; want next", got, err)
			}
		})
	}
}

// deliveryKeys are ds' keys, sorted, separated by spaces.
func deliveryKeys(ds []dedup.Delivery) string {
	keys := make([]string, 0, len(ds))
	for _, d := range ds {
		keys = append(keys, d.Claim.Key)
	}
	slices.Sort(keys)
	out := ""
	for i, k := range keys {
		if i > 0 {
			out += " "
		}
		out += k
	}
	return out
}
