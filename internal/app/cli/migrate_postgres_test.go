package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/pgtest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

func TestMigratePrint(t *testing.T) {
	// --print contacts no database: nothing listens at this URL.
	out, err := runCommand(map[string]string{"DATABASE_URL": "postgres://" + redistest.FreeAddr(t) + "/x", "DATABASE_TABLE_PREFIX": "acme_"}, "migrate", "--print")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CREATE TABLE IF NOT EXISTS acme_records", "CREATE TABLE IF NOT EXISTS acme_queue", "CREATE INDEX IF NOT EXISTS acme_records_expires_at"} {
		if !strings.Contains(out, want) {
			t.Errorf("migrate --print lacks %q:\n%s", want, out)
		}
	}
}

// TestMigratePostgres checks migrate creates the tables a store started with
// DATABASE_AUTO_MIGRATE=false expects, and that running it again is fine.
func TestMigratePostgres(t *testing.T) {
	url := pgtest.New(t).NewDatabase(t)
	env := map[string]string{"DATABASE_URL": url, "DATABASE_TABLE_PREFIX": "mig_"}
	for range 2 {
		out, err := runCommand(env, "migrate")
		if err != nil || !strings.Contains(out, "mig_records, mig_queue and mig_owners") {
			t.Fatalf("migrate: %q, %v", out, err)
		}
	}
	// inspect and forget reach the same tables.
	if _, err := runCommand(env, "inspect", "stripe", "evt_1"); err == nil || !strings.Contains(err.Error(), "no record") {
		t.Errorf("inspect of an unknown event on PostgreSQL: %v, want no record", err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename IN ('mig_records', 'mig_queue', 'mig_owners')").Scan(&n); err != nil || n != 3 {
		t.Errorf("%d of the three tables exist (%v)", n, err)
	}
}

func TestMigratePostgresUsage(t *testing.T) {
	pg := map[string]string{"DATABASE_URL": "postgres://" + redistest.FreeAddr(t) + "/x"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no store", nil, []string{"migrate"}, "DATABASE_URL"},
		{"Redis", map[string]string{"REDIS_URL": "redis://" + redistest.FreeAddr(t)}, []string{"migrate"}, "DATABASE_URL"},
		{"unknown flag", pg, []string{"migrate", "--dry-run"}, "unknown flag: --dry-run"},
		{"bad prefix", map[string]string{"DATABASE_URL": pg["DATABASE_URL"], "DATABASE_TABLE_PREFIX": "a-b"}, []string{"migrate", "--print"}, "DATABASE_TABLE_PREFIX"},
	} {
		_, err := runCommand(tc.env, tc.args...)
		if exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want exit status 2 with %q", tc.name, err, tc.want)
		}
	}
}
