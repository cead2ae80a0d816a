package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// TestStopStart checks a server keeps its data across an outage.
func TestStopStart(t *testing.T) {
	s := New(t)
	url := s.NewDatabase(t)
	ctx := context.Background()
	exec := func(sql string) error {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec("CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := exec("SELECT 1"); err == nil {
		t.Fatal("a stopped server answered")
	}
	s.Start(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT n FROM kept").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after a restart: %d, %v; want the row kept", n, err)
	}
}

// TestDurable checks what each server flushes: the tests' server skips
// fsync, and a durable one runs as deployed.
func TestDurable(t *testing.T) {
	durable, err := StartWith(redistest.FreePort(t), Options{Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(durable.Close)
	want := map[*Server]string{New(t): "off", durable: "on"}
	ctx := context.Background()
	for s, value := range want {
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		for _, setting := range []string{"fsync", "full_page_writes", "synchronous_commit"} {
			want := value
			if setting == "synchronous_commit" {
				want = "on" // on in both: off, a Stop would lose commits
			}
			var got string
			if err := conn.QueryRow(ctx, "SHOW "+setting).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("durable=%v: %s = %s, want %s", s.opts.Durable, setting, got, want)
			}
		}
		conn.Close(ctx)
	}
}
