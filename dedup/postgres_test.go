package dedup

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhook-dedup/webhook-dedup/internal/pgtest"
)

var _ store = (*Postgres)(nil)

// openPostgres opens a store on a fresh database of srv (nil: the shared
// server) with its tables created. Unless cfg says, each operation may
// take 10s: on a loaded CI machine, 1s is not always enough, and the
// conformance suite is about answers, not speed.
func openPostgres(t testing.TB, srv *pgtest.Server, cfg PostgresConfig) *Postgres {
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
	s, err := OpenPostgres(cfg)
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
	testStore(t, openPostgres(t, nil, PostgresConfig{}))
}

// TestPostgresTablePrefix checks two prefixes in one database are two
// stores that share nothing.
func TestPostgresTablePrefix(t *testing.T) {
	url := postgres.Get(t).NewDatabase(t)
	a := openPostgres(t, nil, PostgresConfig{URL: url})
	b := openPostgres(t, nil, PostgresConfig{URL: url, TablePrefix: "other_"})
	ctx := context.Background()
	mustClaim(t, a, "k", lease)
	mustClaim(t, b, "k", lease)
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
	for _, tc := range []struct {
		name string
		cfg  PostgresConfig
		want string
	}{
		{"no URL", PostgresConfig{}, "no PostgreSQL URL"},
		{"unparseable", PostgresConfig{URL: "postgres://u:s3cret@%zz/db"}, "does not parse"},
		{"bad option", PostgresConfig{URL: "postgres://u:s3cret@localhost/db?pool_max_conns=many"}, "does not parse"},
		{"prefix with a quote", PostgresConfig{URL: "postgres://localhost/db", TablePrefix: `x"; DROP TABLE y; --`}, "table prefix"},
		{"prefix upper case", PostgresConfig{URL: "postgres://localhost/db", TablePrefix: "Dedup_"}, "table prefix"},
		{"prefix starting with a digit", PostgresConfig{URL: "postgres://localhost/db", TablePrefix: "1_"}, "table prefix"},
		{"prefix too long", PostgresConfig{URL: "postgres://localhost/db", TablePrefix: strings.Repeat("a", 41)}, "table prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := OpenPostgres(tc.cfg)
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
	s, err := OpenPostgres(PostgresConfig{URL: postgres.Get(t).NewDatabase(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.Ping(ctx); err == nil || !strings.Contains(err.Error(), "webhook_dedup_records") {
		t.Errorf("Ping without tables = %v, want an error naming the table", err)
	}
	if _, _, err := s.Claim(ctx, "k", lease); err == nil {
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
	mustClaim(t, s, "k", lease)
}

// TestPostgresSchemaMatchesMigrate checks PostgresSchema, what migrate
// --print shows, is what Migrate runs.
func TestPostgresSchema(t *testing.T) {
	sql, err := PostgresSchema("acme_")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CREATE TABLE IF NOT EXISTS acme_records", "CREATE TABLE IF NOT EXISTS acme_queue", "acme_records_expires_at", "WHERE failed_at IS NULL"} {
		if !strings.Contains(sql, want) {
			t.Errorf("schema lacks %q:\n%s", want, sql)
		}
	}
	if _, err := PostgresSchema("bad-prefix"); !errors.Is(err, ErrBadTablePrefix) {
		t.Errorf("PostgresSchema(bad-prefix) = %v, want ErrBadTablePrefix", err)
	}
}

func TestPostgresAcrossOutage(t *testing.T) {
	srv := pgtest.New(t)
	s := openPostgres(t, srv, PostgresConfig{})
	ctx := context.Background()
	c, _ := mustClaim(t, s, "before", lease)
	if err := s.Complete(ctx, c, replayed, keep); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping with PostgreSQL stopped succeeded")
	}
	if _, _, err := s.Claim(ctx, "outage", lease); err == nil {
		t.Fatal("Claim with PostgreSQL stopped succeeded")
	}
	srv.Start(t)
	eventually(t, "Ping to succeed after PostgreSQL restarts", func() bool { return s.Ping(ctx) == nil })
	if _, rec, err := s.Claim(ctx, "outage", lease); err != nil || rec.State != Absent {
		t.Errorf("Claim after restart = %v, %v; want a fresh claim", rec.State, err)
	}
	if rec := mustLookup(t, s, "before"); rec.State != Completed {
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
	openPostgres(t, srv, PostgresConfig{URL: url})
	s, err := OpenPostgres(PostgresConfig{URL: url, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	// A pooled connection, now stuck; retried, as its dial can take
	// longer than 200ms too (a claim that timed out may have taken the
	// key: the next one then finds it taken, and gets through).
	eventually(t, "a first claim to get through", func() bool {
		_, _, err := s.Claim(ctx, "warm", lease)
		return err == nil
	})
	srv.Pause(t)
	defer srv.Resume(t)
	done := make(chan error, 1)
	go func() { _, _, err := s.Claim(ctx, "stuck", lease); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Claim against a paused database = %v, want a deadline error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Claim against a paused database did not return within 10s")
	}
}

// TestPostgresPrune checks expired rows, and only those, are deleted, in
// batches smaller than what is expired.
func TestPostgresPrune(t *testing.T) {
	s := openPostgres(t, nil, PostgresConfig{PruneBatch: 3})
	ctx := context.Background()
	for i := range 10 {
		c, _ := mustClaim(t, s, "old/"+string(rune('a'+i)), lease)
		if err := s.Complete(ctx, c, replayed, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	mustClaim(t, s, "live", lease)
	eventually(t, "the records to expire", func() bool {
		_, err := s.Lookup(ctx, "old/j")
		return errors.Is(err, ErrNotFound)
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
	url := postgres.Get(t).NewDatabase(t)
	s := openPostgres(t, nil, PostgresConfig{URL: url})
	ctx := context.Background()
	c, _ := mustClaim(t, s, "old", lease)
	if err := s.Complete(ctx, c, replayed, time.Millisecond); err != nil {
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
	eventually(t, "the record to expire", func() bool {
		_, err := s.Lookup(ctx, "old")
		return errors.Is(err, ErrNotFound)
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
	pruned := make(chan int, 100)
	s := openPostgres(t, nil, PostgresConfig{PruneInterval: 20 * time.Millisecond, Pruned: func(n int) { pruned <- n }})
	c, _ := mustClaim(t, s, "old", lease)
	if err := s.Complete(context.Background(), c, replayed, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-pruned:
		if n != 1 {
			t.Errorf("pruned %d rows, want 1", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing pruned within 10s")
	}
}

// TestPostgresAutoMigrateLater checks tables are created once a database
// that was down at start answers, without reopening the store.
func TestPostgresAutoMigrateLater(t *testing.T) {
	srv := pgtest.New(t)
	url := srv.NewDatabase(t)
	srv.Stop()
	failed := make(chan string, 100)
	s, err := OpenPostgres(PostgresConfig{URL: url, AutoMigrate: true, Failed: func(task string, err error) {
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
	case <-time.After(30 * time.Second):
		t.Fatal("no failed migration reported within 30s while the database was down")
	}
	srv.Start(t)
	ctx := context.Background()
	eventually(t, "the tables to be created once the database answers", func() bool { return s.Ping(ctx) == nil })
	mustClaim(t, s, "k", lease)
}

func TestPostgresQueue(t *testing.T) {
	testQueue(t, func(t *testing.T) (queueStore, func() queueStore) {
		url := postgres.Get(t).NewDatabase(t)
		s := openPostgres(t, nil, PostgresConfig{URL: url})
		return s, func() queueStore { return openPostgres(t, nil, PostgresConfig{URL: url}) }
	})
}

// TestPostgresNotify checks an event queued through another store on the
// same tables (another replica) is heard at once through LISTEN/NOTIFY.
func TestPostgresNotify(t *testing.T) {
	url := postgres.Get(t).NewDatabase(t)
	listener := openPostgres(t, nil, PostgresConfig{URL: url})
	other := openPostgres(t, nil, PostgresConfig{URL: url})
	ch := listener.Notify()
	wait := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("no signal within 10s: %s", what)
		}
	}
	wait("listening") // the first signal says it listens
	if won, _, err := other.Enqueue(context.Background(), "k", queueReq); err != nil || !won {
		t.Fatalf("Enqueue = %v, %v", won, err)
	}
	wait("after an Enqueue on another store")
}

// TestPostgresOwner checks a key prefix another APP_NAME owns is refused,
// and that another prefix in the same tables is not.
func TestPostgresOwner(t *testing.T) {
	url := postgres.Get(t).NewDatabase(t)
	ctx := context.Background()
	a := openPostgres(t, nil, PostgresConfig{URL: url, AppName: "payments", KeyPrefix: "webhook-dedup:"})
	if err := a.CheckOwner(ctx); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, a, "webhook-dedup:stripe:evt_1", lease)
	b := openPostgres(t, nil, PostgresConfig{URL: url, AppName: "shipping", KeyPrefix: "webhook-dedup:"})
	if err := b.CheckOwner(ctx); !errors.Is(err, ErrPrefixOwned) || !strings.Contains(err.Error(), "payments") {
		t.Errorf("CheckOwner of a prefix another app owns = %v, want ErrPrefixOwned naming payments", err)
	}
	if _, _, err := b.Claim(ctx, "webhook-dedup:stripe:evt_2", lease); !errors.Is(err, ErrPrefixOwned) {
		t.Errorf("Claim under a prefix another app owns = %v, want ErrPrefixOwned", err)
	}
	if _, err := b.Lookup(ctx, "webhook-dedup:stripe:evt_1"); !errors.Is(err, ErrPrefixOwned) {
		t.Errorf("Lookup under a prefix another app owns = %v, want ErrPrefixOwned", err)
	}
	if err := b.Ping(ctx); !errors.Is(err, ErrPrefixOwned) {
		t.Errorf("Ping under a prefix another app owns = %v, want ErrPrefixOwned", err)
	}
	c := openPostgres(t, nil, PostgresConfig{URL: url, AppName: "shipping", KeyPrefix: "webhook-dedup:shipping:"})
	mustClaim(t, c, "webhook-dedup:shipping:stripe:evt_2", lease)
}

// FuzzCheckTablePrefix: a prefix CheckTablePrefix accepts is written into
// SQL unquoted, so it must be a plain lower-case identifier start that
// leaves every table and index name within PostgreSQL's 63 bytes.
func FuzzCheckTablePrefix(f *testing.F) {
	for _, seed := range []string{"webhook_dedup_", "_", "a1_", "", "1a", "A_", `x"; DROP TABLE y; --`, "é_", strings.Repeat("a", 41)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, prefix string) {
		if CheckTablePrefix(prefix) != nil {
			if _, err := PostgresSchema(prefix); !errors.Is(err, ErrBadTablePrefix) {
				t.Errorf("PostgresSchema(%q) = %v, want ErrBadTablePrefix", prefix, err)
			}
			return
		}
		if prefix == "" || len(prefix)+len("records_expires_at") > 63 || (prefix[0] >= '0' && prefix[0] <= '9') {
			t.Fatalf("accepted %q", prefix)
		}
		for _, c := range []byte(prefix) {
			if !(c == '_' || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
				t.Fatalf("accepted %q, with %q", prefix, c)
			}
		}
		if notifyChannel(prefix) == "" {
			t.Fatalf("no notification channel for %q", prefix)
		}
	})
}
