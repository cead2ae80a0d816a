package test

import (
	"testing"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/pgtest"
)

// pgStore is PostgreSQL for the async runs: a database of its own on the
// shared server.
var pgStore = asyncStore{"PostgreSQL", func(t *testing.T) map[string]string {
	return map[string]string{"DATABASE_URL": postgres.Get(t).NewDatabase(t)}
}}

// TestAsyncExactlyOncePostgres is the async exactly-once run (copies at
// once, a failing app) on PostgreSQL.
func TestAsyncExactlyOncePostgres(t *testing.T) {
	t.Parallel()
	asyncExactlyOnceRun(t, pgStore)
}

// TestAsyncKillRestartPostgres: a proxy killed mid-delivery on
// PostgreSQL, then restarted: none lost.
func TestAsyncKillRestartPostgres(t *testing.T) {
	t.Parallel()
	asyncKillRun(t, pgStore)
}

// TestAsyncSIGTERMPostgres: SIGTERM with a queue on PostgreSQL: the next
// process delivers the rest, each event once.
func TestAsyncSIGTERMPostgres(t *testing.T) {
	t.Parallel()
	asyncSIGTERMRun(t, pgStore)
}

// TestAsyncStoreDownPostgres: while PostgreSQL is down an async route
// answers 503 and queues nothing; once it is back the retry is queued and
// delivered, without a restart.
func TestAsyncStoreDownPostgres(t *testing.T) {
	t.Parallel()
	srv := pgtest.New(t)
	asyncStoreDownRun(t, "PostgreSQL", map[string]string{"DATABASE_URL": srv.NewDatabase(t)}, srv.Stop, func() { srv.Start(t) })
}
