package test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/pgtest"
)

// postgres is the PostgreSQL server the tests that do not stop it share,
// each in a database of its own; TestMain stops it.
var postgres pgtest.Shared

// TestExactlyOncePostgres is the exactly-once run on PostgreSQL.
func TestExactlyOncePostgres(t *testing.T) {
	t.Parallel()
	exactlyOnceRun(t, "postgres", map[string]string{"DATABASE_URL": postgres.Get(t).NewDatabase(t)}, runConcurrent)
}

// TestPostgresOutageAndRecovery: PostgreSQL stopped, 503 and nothing
// forwarded; started again, the proxy recovers without a restart.
func TestPostgresOutageAndRecovery(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t)
	outageAndRecovery(t, "PostgreSQL", map[string]string{"DATABASE_URL": srv.NewDatabase(t)}, srv.Stop, func() { srv.Start(t) })
}

// TestPostgresRestartedProxyRemembers: a proxy started after another
// stopped answers the events that one completed as duplicates.
func TestPostgresRestartedProxyRemembers(t *testing.T) {
	t.Parallel()
	app := newUpstream(t)
	env := proxyEnv(app, map[string]string{"DATABASE_URL": postgres.Get(t).NewDatabase(t)})
	ctx, client := testContext(t), newClient(t)
	first := startProxy(t, env)
	first.awaitReady(t) // the tables may be created a moment after the process serves
	for _, p := range []provider{acme, stripe, github} {
		expect(t, p.Name+" delivery", mustSend(t, ctx, client, first, p, p.Event(1)), 200, "forwarded")
	}
	first.Stop()
	second := startProxy(t, env)
	second.awaitReady(t)
	for _, p := range []provider{acme, stripe, github} {
		expect(t, p.Name+" redelivery to the restarted proxy", mustSend(t, ctx, client, second, p, p.Event(1)), 200, "duplicate")
		if n := app.Effects(key(p, p.Event(1).ID)); n != 1 {
			t.Errorf("%s took effect %d times, want 1", p.Name, n)
		}
	}
}

// TestPostgresPruning: completed records that expired are deleted within
// a few PRUNE_INTERVALs, and counted.
func TestPostgresPruning(t *testing.T) {
	t.Parallel()
	const ttl = 5 * time.Second
	db := postgres.Get(t).NewDatabase(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{"DATABASE_URL": db, "DEDUP_TTL": ttl.String(), "PRUNE_INTERVAL": "250ms"}))
	ctx, client := testContext(t), newClient(t)
	px.awaitReady(t) // the tables may be created a moment after the process serves
	const n = 20
	for i := range n {
		expect(t, "delivery", mustSend(t, ctx, client, px, acme, acme.Event(i)), 200, "forwarded")
	}
	// The last record expires ttl after its delivery; pruning follows
	// within an interval or two. The first may already be gone: on a
	// loaded machine twenty deliveries can take longer than ttl. Each row
	// pruned is counted, so all n were kept, and all are deleted.
	await(t, ttl+px.bounds().observed(), func() error {
		if rows := countRecords(t, db); rows > 0 {
			return fmt.Errorf("%d expired rows still there", rows)
		}
		return nil
	})
	px.awaitMetric(t, "webhook_dedup_store_pruned_total", nil, n)
}

func countRecords(t *testing.T, db string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM webhook_dedup_records").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPostgresCache: with CACHE_SIZE, a duplicate of a completed event is
// answered while the database is unreachable (an event not cached gets
// 503), and a forget through the admin API is honoured at once.
func TestPostgresCache(t *testing.T) {
	t.Parallel()
	const token = "cache-e2e-token"
	srv := pgtest.New(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{"DATABASE_URL": srv.NewDatabase(t), "CACHE_SIZE": "100", "ADMIN_TOKEN": token}))
	px.awaitReady(t) // the tables may be created a moment after the process serves
	ctx, client := testContext(t), newClient(t)
	ev := acme.Event(1)
	expect(t, "delivery", mustSend(t, ctx, client, px, acme, ev), 200, "forwarded")
	expect(t, "redelivery", mustSend(t, ctx, client, px, acme, ev), 200, "duplicate")

	srv.Stop()
	expect(t, "redelivery with the database down", mustSend(t, ctx, client, px, acme, ev), 200, "duplicate")
	expect(t, "a new event with the database down", mustSend(t, ctx, client, px, acme, acme.Event(2)), 503, "store-unavailable")
	px.awaitMetric(t, "webhook_dedup_cache_hits_total", nil, 2)

	srv.Start(t)
	if err := px.pollAdmin("/readyz", 200, storeStateDeadline); err != nil {
		t.Fatalf("readyz after the database is back: %v", err)
	}
	path := "/v1/events/" + url.PathEscape(acme.Path) + "/" + url.PathEscape(ev.ID)
	if a := px.adminDo(t, http.MethodDelete, path, token); a.Status != http.StatusNoContent {
		t.Fatalf("DELETE: %s, want 204", a)
	}
	expect(t, "redelivery after forget", mustSend(t, ctx, client, px, acme, ev), 200, "forwarded")
	if n := app.Attempts(key(acme, ev.ID)); n != 2 {
		t.Errorf("the app saw %d deliveries of the forgotten event, want 2", n)
	}
}

// TestPostgresAppNameOwnsPrefix: on PostgreSQL too, a sidecar whose
// KEY_PREFIX holds another APP_NAME's records refuses to start.
func TestPostgresAppNameOwnsPrefix(t *testing.T) {
	t.Parallel()
	appNameOwnsPrefix(t, map[string]string{"DATABASE_URL": postgres.Get(t).NewDatabase(t)})
}
