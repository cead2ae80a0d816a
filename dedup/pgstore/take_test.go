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
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/pgtest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// holdTakes makes every statement that updates s's queue wait, at its
// end, until the release it returns: until then it waits on an advisory
// lock that a connection of the test holds, and a cancel request (a
// caller that gave up) does not end the wait. That is a database that
// finishes, later, what its caller stopped waiting for: a statement the
// cancel reached too late.
func holdTakes(t *testing.T, s *Store, url string) (release func()) {
	t.Helper()
	ctx := context.Background()
	const holdSQL = `CREATE FUNCTION %[1]shold_take() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	LOOP
		BEGIN
			PERFORM pg_advisory_xact_lock_shared(4242);
			RETURN NULL;
		EXCEPTION WHEN query_canceled THEN
			-- The caller gave up: go on waiting, as if told too late.
		END;
	END LOOP;
END $$;
CREATE TRIGGER hold_take AFTER UPDATE ON %[1]squeue FOR EACH STATEMENT EXECUTE FUNCTION %[1]shold_take()`
	if _, err := s.pool.Exec(ctx, fmt.Sprintf(holdSQL, s.prefix)); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(4242)`); err != nil {
		t.Fatal(err)
	}
	release = sync.OnceFunc(func() {
		_ = conn.Close(ctx)
		// DROP TRIGGER waits for the held statement's transaction to
		// end: what it leased is then as the store left it.
		if _, err := s.pool.Exec(ctx, fmt.Sprintf(`DROP TRIGGER hold_take ON %[1]squeue`, s.prefix)); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(release)
	return release
}

// heldCommits starts a server of its own, with a database at url, where
// the COMMIT of a session connected by heldURL waits, once committed, for
// a standby that never answers (synchronous_standby_names names one that
// never connects; heldURL asks for synchronous_commit): a COMMIT whose
// answer does not come, as from a database held up writing its WAL or
// waiting for its standby. Whatever ends the wait ends only the wait: a
// cancel request (pgx sends one, from a goroutine, as it closes a
// connection whose answer did not come in time) is told the transaction
// committed locally. Every other session's COMMIT is answered at once
// (synchronous_commit=local).
//
// A COMMIT held by a trigger waiting on a lock, as holdTakes holds a
// statement, was not: a cancel request that landed after the lock's
// release, between the trigger's calls, rolled the transaction back.
func heldCommits(t *testing.T) (url, heldURL string) {
	t.Helper()
	srv, err := pgtest.StartWith(redistest.FreePort(t), pgtest.Options{Settings: []string{
		"synchronous_standby_names=never", "synchronous_commit=local"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	url = srv.NewDatabase(t)
	heldURL = url + "&synchronous_commit=remote_write"
	// The standby's name is in force once the checkpointer has read it,
	// which may come after the server accepts connections: until then, a
	// COMMIT is answered at once.
	ctx := context.Background()
	probe, err := pgx.Connect(ctx, heldURL)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(ctx)
	storetest.Eventually(t, "a COMMIT held for the standby", func() bool {
		done := make(chan error, 1)
		go func() {
			_, err := probe.Exec(ctx, `DROP TABLE IF EXISTS held_probe; CREATE TABLE held_probe ()`)
			done <- err
		}()
		for deadline := time.Now().Add(storetest.LoadMargin); time.Now().Before(deadline); {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				return false
			case <-time.After(10 * time.Millisecond):
			}
			if pid := waitingFor(t, url, "SyncRep"); pid != 0 {
				endCommitWait(t, url, pid)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				return true
			}
		}
		t.Fatalf("a probe's COMMIT was neither answered nor held within %s", storetest.LoadMargin)
		return false
	})
	return url, heldURL
}

// endCommitWait ends the wait of pid's COMMIT held by heldCommits (a
// cancel request, which the COMMIT of a caller that gave up may have had
// already) and returns once its transaction has ended, committed.
func endCommitWait(t *testing.T, url string, pid int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_cancel_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, "the held COMMIT's end", func() bool {
		var busy bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND state <> 'idle')`, pid).Scan(&busy); err != nil {
			t.Fatal(err)
		}
		return !busy
	})
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
			// The Timeout that ends the wait. Held at its COMMIT, the
			// Take's statement must end within it first: on a loaded
			// machine, the margin the stores' tests allow for load.
			url, takeURL, timeout, heldAt := "", "", time.Second, "advisory"
			if tc.atCommit {
				url, takeURL = heldCommits(t)
				timeout, heldAt = storetest.LoadMargin, "SyncRep"
			} else {
				url = postgres.Get(t).NewDatabase(t)
				takeURL = url
			}
			s := openPostgres(t, nil, Config{URL: url})
			short, err := Open(Config{URL: takeURL, Timeout: timeout})
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
			release := func() {}
			if !tc.atCommit {
				release = holdTakes(t, s, url)
			}
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
			var pid int
			storetest.Eventually(t, "the Take held", func() bool {
				pid = waitingFor(t, url, heldAt)
				return pid != 0
			})
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
				endCommitWait(t, url, pid)
			}
			release()
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
