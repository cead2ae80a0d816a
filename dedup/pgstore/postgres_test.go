package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/pgstore/pgname"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/pgtest"
)

// openPostgres opens a store on a fresh database of srv (nil: the shared
// server) with its tables created. Unless cfg says, each operation may
// take 10s: on a loaded CI machine, 1s is not always enough, and the
// conformance suite is about answers, not speed.
func openPostgres(t testing.TB, srv *pgtest.Server, cfg Config) *Store {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if srv == nil {
		srv = postgres.Get(t)
	}
	if cfg.URL == "" {
		cfg.URL = srv.NewDatabase(t)
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) (dedup.Backend, func() dedup.Backend) {
		url := postgres.Get(t).NewDatabase(t)
		s := openPostgres(t, nil, Config{URL: url})
		return s.Backend(), func() dedup.Backend { return openPostgres(t, nil, Config{URL: url}).Backend() }
	})
}

// TestPostgresCached runs the conformance suite through the cache of
// completed records (CACHE_SIZE), over PostgreSQL.
func TestPostgresCached(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) (dedup.Backend, func() dedup.Backend) {
		url := postgres.Get(t).NewDatabase(t)
		cached := func() dedup.Backend {
			return dedup.WithCache(openPostgres(t, nil, Config{URL: url}).Backend(), dedup.CacheConfig{Size: 100})
		}
		return cached(), cached
	})
}

// BenchmarkPostgres runs on the test server, which runs without fsync: a
// commit on a real disk adds its flush to claim-complete.
func BenchmarkPostgres(b *testing.B) {
	b.Run("store", func(b *testing.B) { storetest.Bench(b, openPostgres(b, nil, Config{}).Backend()) })
	// The cache answers duplicates of completed events from memory.
	b.Run("cached", func(b *testing.B) {
		storetest.Bench(b, dedup.WithCache(openPostgres(b, nil, Config{}).Backend(), dedup.CacheConfig{Size: 10000}))
	})
}

// TestPostgresTablePrefix checks two prefixes in one database are two
// stores that share nothing.
func TestPostgresTablePrefix(t *testing.T) {
	t.Parallel()
	url := postgres.Get(t).NewDatabase(t)
	a := openPostgres(t, nil, Config{URL: url})
	b := openPostgres(t, nil, Config{URL: url, TablePrefix: "other_"})
	ctx := context.Background()
	storetest.MustClaim(t, a, "k", storetest.Lease)
	storetest.MustClaim(t, b, "k", storetest.Lease)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM other_records").Scan(&n); err != nil || n != 1 {
		t.Errorf("other_records holds %d rows (%v), want 1", n, err)
	}
}

func TestPostgresBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no URL", Config{}, "no PostgreSQL URL"},
		{"unparseable", Config{URL: "postgres://u:s3cret@%zz/db"}, "does not parse"},
		{"bad option", Config{URL: "postgres://u:s3cret@localhost/db?pool_max_conns=many"}, "does not parse"},
		{"prefix with a quote", Config{URL: "postgres://localhost/db", TablePrefix: `x"; DROP TABLE y; --`}, "table prefix"},
		{"prefix upper case", Config{URL: "postgres://localhost/db", TablePrefix: "Dedup_"}, "table prefix"},
		{"prefix starting with a digit", Config{URL: "postgres://localhost/db", TablePrefix: "1_"}, "table prefix"},
		{"prefix too long", Config{URL: "postgres://localhost/db", TablePrefix: strings.Repeat("a", 41)}, "table prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(tc.cfg)
			if err == nil {
				_ = s.Close()
				t.Fatal("OpenPostgres succeeded")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "dedup: ") || !strings.Contains(msg, tc.want) {
				t.Errorf("error %q, want it to start with \"dedup: \" and mention %q", msg, tc.want)
			}
			if strings.Contains(msg, "s3cret") {
				t.Errorf("error %q shows the password", msg)
			}
		})
	}
}

// TestPostgresMissingTables checks a store without its tables fails its
// operations and its Ping (so /readyz says so) until Migrate creates them.
func TestPostgresMissingTables(t *testing.T) {
	t.Parallel()
	s, err := Open(Config{URL: postgres.Get(t).NewDatabase(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.Ping(ctx); err == nil || !strings.Contains(err.Error(), "webhook_dedup_records") {
		t.Errorf("Ping without tables = %v, want an error naming the table", err)
	}
	if _, _, err := s.Claim(ctx, "k", storetest.Lease); err == nil {
		t.Error("Claim without tables succeeded")
	}
	for range 2 { // a second Migrate finds everything there
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping after Migrate: %v", err)
	}
	storetest.MustClaim(t, s, "k", storetest.Lease)
}

// TestPostgresUpgrade: tables made by an earlier release (a queue without
// the columns added since) are not taken for ready, and Migrate brings
// them up to date without losing what they hold; the event queued before
// is delivered with what its release did not keep empty, from its route's
// lane (the rest lane for the first release's, which kept no route).
// Every earlier release lacked the lane index; a queue that lacks only
// that is ready, as every statement works without it (Take reads more
// rows), and Migrate adds it.
func TestPostgresUpgrade(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// drop are the columns the release's queue lacks; the first is
		// the one readiness names.
		drop []string
		// forget empties what the release did not keep.
		forget func(*dedup.Request)
	}{
		{"the first release", []string{"route", "namespace", "ttl_micros", "trace_parent", "header_raw"}, func(r *dedup.Request) {
			r.Route, r.Namespace, r.TTL, r.TraceParent = "", "", 0, ""
		}},
		{"the release before tracing", []string{"trace_parent", "header_raw"}, func(r *dedup.Request) { r.TraceParent = "" }},
		{"the release that kept the header as JSON", []string{"header_raw"}, func(*dedup.Request) {}},
		{"the release before lanes", nil, func(*dedup.Request) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := postgres.Get(t).NewDatabase(t)
			s := openPostgres(t, nil, Config{URL: url})
			ctx := context.Background()
			old := storetest.Request
			tc.forget(&old)
			storetest.MustEnqueue(t, s, "before")
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, `DROP INDEX webhook_dedup_queue_lane`); err != nil {
				t.Fatal(err)
			}
			if len(tc.drop) > 0 {
				// The header as those releases kept it: JSON only.
				header, err := json.Marshal(storetest.Request.Header)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := conn.Exec(ctx, `UPDATE webhook_dedup_queue SET header = $1`, header); err != nil {
					t.Fatal(err)
				}
				drops := []string{"ALTER COLUMN header SET NOT NULL"}
				for _, c := range tc.drop {
					drops = append(drops, "DROP COLUMN "+c)
				}
				if _, err := conn.Exec(ctx, `ALTER TABLE webhook_dedup_queue `+strings.Join(drops, ", ")); err != nil {
					t.Fatal(err)
				}
				if err := s.Ping(ctx); err == nil || !strings.Contains(err.Error(), tc.drop[0]) {
					t.Errorf("Ping on the release's tables = %v, want an error naming the missing column %s", err, tc.drop[0])
				}
			} else if err := s.Ping(ctx); err != nil {
				t.Errorf("Ping on the release's tables, which lack only the lane index: %v", err)
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.Ping(ctx); err != nil {
				t.Errorf("Ping after Migrate: %v", err)
			}
			var indexed bool
			if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_indexes WHERE indexname = 'webhook_dedup_queue_lane')`).Scan(&indexed); err != nil || !indexed {
				t.Errorf("the lane index after Migrate: exists %v (%v), want it created", indexed, err)
			}
			lane := dedup.RouteLane(old.Route)
			if old.Route == "" {
				lane = dedup.RestLane(storetest.Request.Route)
			}
			if ds := storetest.TakeFrom(t, s, lane, 10, storetest.Lease); len(ds) != 1 || ds[0].Claim.Key != "before" || !reflect.DeepEqual(ds[0].Request, old) {
				t.Errorf("the event queued before the upgrade, from lane %+v: %+v, want before %+v", lane, ds, old)
			}
		})
	}
}

// TestPostgresSchemaMatchesMigrate checks PostgresSchema, what migrate
// --print shows, is what Migrate runs.
func TestPostgresSchema(t *testing.T) {
	t.Parallel()
	sql, err := Schema("acme_")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CREATE TABLE IF NOT EXISTS acme_records", "CREATE TABLE IF NOT EXISTS acme_queue", "acme_records_expires_at", "WHERE failed_at IS NULL", "acme_queue_lane ON acme_queue (route, due_at)"} {
		if !strings.Contains(sql, want) {
			t.Errorf("schema lacks %q:\n%s", want, sql)
		}
	}
	if _, err := Schema("bad-prefix"); !errors.Is(err, pgname.ErrBadPrefix) {
		t.Errorf("PostgresSchema(bad-prefix) = %v, want pgname.ErrBadPrefix", err)
	}
}

func TestPostgresAcrossOutage(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t)
	s := openPostgres(t, srv, Config{})
	ctx := context.Background()
	c, _ := storetest.MustClaim(t, s, "before", storetest.Lease)
	if err := s.Complete(ctx, c, storetest.Replayed, storetest.Keep); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping with PostgreSQL stopped succeeded")
	}
	if _, _, err := s.Claim(ctx, "outage", storetest.Lease); err == nil {
		t.Fatal("Claim with PostgreSQL stopped succeeded")
	}
	srv.Start(t)
	storetest.Eventually(t, "Ping to succeed after PostgreSQL restarts", func() bool { return s.Ping(ctx) == nil })
	if _, rec, err := s.Claim(ctx, "outage", storetest.Lease); err != nil || rec.State != dedup.Absent {
		t.Errorf("Claim after restart = %v, %v; want a fresh claim", rec.State, err)
	}
	if rec := storetest.MustLookup(t, s, "before"); rec.State != dedup.Completed {
		t.Errorf("a record completed before the outage: %v, want completed", rec.State)
	}
}

// TestPostgresTimeout checks a database that stops answering (paused)
// fails each operation within the store's timeout instead of holding the
// webhook.
func TestPostgresTimeout(t *testing.T) {
	srv := pgtest.New(t)
	url := srv.NewDatabase(t)
	// The tables are created by a store with the ordinary timeout: on a
	// loaded machine a first connection and the DDL can take longer than
	// the 200ms this test is about.
	openPostgres(t, srv, Config{URL: url})
	s, err := Open(Config{URL: url, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	// A pooled connection, now stuck; retried, as its dial can take
	// longer than 200ms too (a claim that timed out may have taken the
	// key: the next one then finds it taken, and gets through).
	storetest.Eventually(t, "a first claim to get through", func() bool {
		_, _, err := s.Claim(ctx, "warm", storetest.Lease)
		return err == nil
	})
	srv.Pause(t)
	defer srv.Resume(t)
	done := make(chan error, 1)
	go func() { _, _, err := s.Claim(ctx, "stuck", storetest.Lease); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Claim against a paused database = %v, want a deadline error", err)
		}
	case <-time.After(s.timeout + storetest.LoadMargin):
		t.Fatalf("Claim against a paused database did not return within its Timeout (%s) and %s", s.timeout, storetest.LoadMargin)
	}
}

// TestPostgresPrune checks expired rows, and only those, are deleted, in
// batches smaller than what is expired.
func TestPostgresPrune(t *testing.T) {
	t.Parallel()
	s := openPostgres(t, nil, Config{PruneBatch: 3})
	ctx := context.Background()
	for i := range 10 {
		c, _ := storetest.MustClaim(t, s, "old/"+string(rune('a'+i)), storetest.Lease)
		if err := s.Complete(ctx, c, storetest.Replayed, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	storetest.MustClaim(t, s, "live", storetest.Lease)
	storetest.Eventually(t, "the records to expire", func() bool {
		_, err := s.Lookup(ctx, "old/j")
		return errors.Is(err, dedup.ErrNotFound)
	})
	n, err := s.Prune(ctx)
	if err != nil || n != 10 {
		t.Fatalf("Prune = %d, %v; want 10 rows", n, err)
	}
	var rows int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM webhook_dedup_records").Scan(&rows); err != nil || rows != 1 {
		t.Errorf("%d rows left (%v), want the live one", rows, err)
	}
	if n, err := s.Prune(ctx); err != nil || n != 0 {
		t.Errorf("second Prune = %d, %v; want 0", n, err)
	}
}

// TestPostgresPruneOneAtATime checks a replica finding another pruning
// (holding the lock) leaves the work to it.
func TestPostgresPruneOneAtATime(t *testing.T) {
	t.Parallel()
	url := postgres.Get(t).NewDatabase(t)
	s := openPostgres(t, nil, Config{URL: url})
	ctx := context.Background()
	c, _ := storetest.MustClaim(t, s, "old", storetest.Lease)
	if err := s.Complete(ctx, c, storetest.Replayed, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := other.Exec(ctx, "SELECT pg_advisory_lock($1)", s.lockKey("prune")); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, "the record to expire", func() bool {
		_, err := s.Lookup(ctx, "old")
		return errors.Is(err, dedup.ErrNotFound)
	})
	if n, err := s.Prune(ctx); err != nil || n != 0 {
		t.Errorf("Prune while another holds the lock = %d, %v; want 0", n, err)
	}
	if _, err := other.Exec(ctx, "SELECT pg_advisory_unlock($1)", s.lockKey("prune")); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(ctx); err != nil || n != 1 {
		t.Errorf("Prune once the lock is free = %d, %v; want 1", n, err)
	}
}

// TestPostgresPruneEvery checks the store prunes by itself every
// PruneInterval and reports what it deleted.
func TestPostgresPruneEvery(t *testing.T) {
	t.Parallel()
	pruned := make(chan int, 100)
	const every = 20 * time.Millisecond
	s := openPostgres(t, nil, Config{PruneInterval: every, Pruned: func(n int) { pruned <- n }})
	c, _ := storetest.MustClaim(t, s, "old", storetest.Lease)
	if err := s.Complete(context.Background(), c, storetest.Replayed, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-pruned:
		if n != 1 {
			t.Errorf("pruned %d rows, want 1", n)
		}
	case <-time.After(every + s.timeout + storetest.LoadMargin): // the next prune, one operation
		t.Fatal("nothing pruned at the next PruneInterval")
	}
}

// TestPostgresAutoMigrateLater checks tables are created once a database
// that was down at start answers, without reopening the store.
func TestPostgresAutoMigrateLater(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t)
	url := srv.NewDatabase(t)
	srv.Stop()
	failed := make(chan string, 100)
	s, err := Open(Config{URL: url, AutoMigrate: true, Failed: func(task string, err error) {
		select {
		case failed <- task:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case task := <-failed:
		if task != "migrate" {
			t.Errorf("failed task %q, want migrate", task)
		}
	case <-time.After(migrateEvery + s.timeout + storetest.LoadMargin): // the first try, or the next
		t.Fatal("no failed migration reported while the database was down")
	}
	srv.Start(t)
	ctx := context.Background()
	storetest.Eventually(t, "the tables to be created once the database answers", func() bool { return s.Ping(ctx) == nil })
	storetest.MustClaim(t, s, "k", storetest.Lease)
}

// TestPostgresNotify checks an event queued through another store on the
// same tables (another replica) is heard at once through LISTEN/NOTIFY.
func TestPostgresNotify(t *testing.T) {
	t.Parallel()
	url := postgres.Get(t).NewDatabase(t)
	listener := openPostgres(t, nil, Config{URL: url})
	other := openPostgres(t, nil, Config{URL: url})
	ch := listener.Notify()
	wait := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(listener.timeout + storetest.LoadMargin): // at once, or once the listener has connected
			t.Fatalf("no signal within %s: %s", listener.timeout+storetest.LoadMargin, what)
		}
	}
	wait("listening") // the first signal says it listens
	// What each store's listener makes of the notifications, read on a
	// connection of the test's own: its own enqueues' are not signalled
	// (they wake their lanes themselves), anyone else's are.
	ctx, cancel := context.WithTimeout(context.Background(), listener.timeout+storetest.LoadMargin)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{listener.sql.notify}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	payloads := map[*Store]string{}
	for key, s := range map[string]*Store{"own": listener, "k": other} {
		if won, _, err := s.Enqueue(ctx, key, storetest.Request, 0); err != nil || !won {
			t.Fatalf("Enqueue = %v, %v", won, err)
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("the enqueue of %s was not heard: %v", key, err)
		}
		payloads[s] = n.Payload
	}
	for _, tc := range []struct {
		store, sender *Store
		want          bool
	}{{listener, listener, false}, {listener, other, true}, {other, listener, true}} {
		if got := tc.store.heardFromElsewhere(payloads[tc.sender]); got != tc.want {
			t.Errorf("heardFromElsewhere(%q) of the store announcing %q = %v, want %v", payloads[tc.sender], tc.store.announcer, got, tc.want)
		}
	}
	wait("after an Enqueue on another store")
}

// TestPostgresNotifyBurst: a burst of enqueues notifies the listeners at
// most once per announceEvery, not once per event (each notification
// costs every enqueue that sends one), and an enqueue after a quiet
// window is heard at once. Counted on a LISTEN connection of the test's
// own, up to the notification of an event queued after the burst:
// notifications arrive in commit order.
func TestPostgresNotifyBurst(t *testing.T) {
	t.Parallel()
	url := postgres.Get(t).NewDatabase(t)
	s := openPostgres(t, nil, Config{URL: url})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.sql.notify}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	const burst = 200
	start := time.Now()
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() {
			if won, _, err := s.Enqueue(ctx, fmt.Sprint("burst-", i), storetest.Request, 0); err != nil || !won {
				t.Errorf("Enqueue = %v, %v", won, err)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	// After a quiet window, the next enqueue is heard.
	time.Sleep(announceEvery) // the window's length, not a wait for an event
	if won, _, err := s.Enqueue(ctx, "after", storetest.Request, 0); err != nil || !won {
		t.Fatalf("Enqueue = %v, %v", won, err)
	}
	heard := 0
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("the enqueue after the burst was not heard: %v (%d notifications before)", err, heard)
		}
		if strings.HasSuffix(n.Payload, "/after") {
			break
		}
		heard++
	}
	most := int(took/announceEvery) + 1
	t.Logf("%d enqueues at once in %s: %d notifications", burst, took.Round(time.Millisecond), heard)
	if heard == 0 || heard > most {
		t.Errorf("%d enqueues in %s sent %d notifications, want 1 to %d: the first, then at most one per %s", burst, took, heard, most, announceEvery)
	}
}

// TestPostgresOwner checks a key prefix another APP_NAME owns is refused,
// and that another prefix in the same tables is not.
func TestPostgresOwner(t *testing.T) {
	t.Parallel()
	url := postgres.Get(t).NewDatabase(t)
	ctx := context.Background()
	a := openPostgres(t, nil, Config{URL: url, AppName: "payments", KeyPrefix: "webhook-dedup:"})
	if err := a.CheckOwner(ctx); err != nil {
		t.Fatal(err)
	}
	storetest.MustClaim(t, a, "webhook-dedup:stripe:evt_1", storetest.Lease)
	b := openPostgres(t, nil, Config{URL: url, AppName: "shipping", KeyPrefix: "webhook-dedup:"})
	if err := b.CheckOwner(ctx); !errors.Is(err, dedup.ErrPrefixOwned) || !strings.Contains(err.Error(), "payments") {
		t.Errorf("CheckOwner of a prefix another app owns = %v, want ErrPrefixOwned naming payments", err)
	}
	if _, _, err := b.Claim(ctx, "webhook-dedup:stripe:evt_2", storetest.Lease); !errors.Is(err, dedup.ErrPrefixOwned) {
		t.Errorf("Claim under a prefix another app owns = %v, want ErrPrefixOwned", err)
	}
	if _, err := b.Lookup(ctx, "webhook-dedup:stripe:evt_1"); !errors.Is(err, dedup.ErrPrefixOwned) {
		t.Errorf("Lookup under a prefix another app owns = %v, want ErrPrefixOwned", err)
	}
	if err := b.Ping(ctx); !errors.Is(err, dedup.ErrPrefixOwned) {
		t.Errorf("Ping under a prefix another app owns = %v, want ErrPrefixOwned", err)
	}
	c := openPostgres(t, nil, Config{URL: url, AppName: "shipping", KeyPrefix: "webhook-dedup:shipping:"})
	storetest.MustClaim(t, c, "webhook-dedup:shipping:stripe:evt_2", storetest.Lease)
}

// TestPostgresPingReadOnly: a database that refuses writes (here, read-only
// transactions by default, as a standby or a database set read-only for
// maintenance) is not ready, though it answers every read; once it takes
// writes again, it is.
func TestPostgresPingReadOnly(t *testing.T) {
	t.Parallel()
	url := postgres.Get(t).NewDatabase(t)
	s := openPostgres(t, nil, Config{URL: url})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	setReadOnly := func(on string) {
		t.Helper()
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+conn.Config().Database+" SET default_transaction_read_only = "+on); err != nil {
			t.Fatal(err)
		}
		s.pool.Reset() // the setting applies to new sessions
	}
	setReadOnly("on")
	if err := s.Ping(ctx); !errors.Is(err, dedup.ErrReadOnly) {
		t.Errorf("Ping of a read-only database = %v, want ErrReadOnly", err)
	}
	if _, _, err := s.Claim(ctx, "k", storetest.Lease); err == nil {
		t.Error("a claim on the read-only database succeeded: the test's database is not read-only")
	}
	setReadOnly("off")
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping once writable again: %v", err)
	}
}
