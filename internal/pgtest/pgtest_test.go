package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
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
