package pgstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A connection keeps the parameters of the last statement it sent. pgx
// encodes a statement's parameters into one buffer of its connection's
// and, once the statement is sent, empties the list of their values
// (ExtendedQueryBuilder.reset) but leaves the values in the list's array,
// each a slice of that buffer. They are overwritten only by a later
// statement on the same connection with at least as many parameters, so
// an idle pool connection holds the bodies it last sent, outside
// MAX_BUFFERED_BYTES: on each connection one event's, and a shared
// enqueue's all of its events'. With 9 MiB bodies and an app that held
// its deliveries, that was 45 MiB of the 167 in use.
//
// So a statement whose parameters are large runs on a connection of its
// own, which then sends a statement of as many NULL parameters (nullParamsSQL)
// before it goes back to the pool. Below largeParams the round trip would
// cost more than the bytes it lets go of.
const largeParams = 1 << 20

// querier is what a statement runs on: the pool (any connection), or
// one connection of it.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

var (
	_ querier = (*pgxpool.Pool)(nil)
	_ querier = (*pgxpool.Conn)(nil)
)

// sending runs f, which sends a statement of parameters args (and at
// most as many in any other statement it sends), on the pool; or, when
// the bytes among args come to largeParams or more, on a connection of
// its own that drops them before it goes back (dropParams).
func (s *Store) sending(ctx context.Context, args []any, f func(querier) error) error {
	if paramBytes(args) < largeParams {
		return f(s.pool)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	err = f(conn)
	s.dropParams(conn, len(args))
	return err
}

// paramBytes is the bytes among args: the bodies and headers, alone or in
// arrays.
func paramBytes(args []any) int {
	n := 0
	for _, a := range args {
		switch a := a.(type) {
		case []byte:
			n += len(a)
		case [][]byte:
			for _, b := range a {
				n += len(b)
			}
		}
	}
	return n
}

// dropParams overwrites what conn keeps of its last statement's parameters,
// up to n of them, with a statement of n NULLs. If that fails, conn is
// closed, and the pool drops it and what it kept.
func (s *Store) dropParams(conn *pgxpool.Conn, n int) {
	ctx, cancel := s.bound(s.background)
	defer cancel()
	if _, err := conn.Exec(ctx, nullParamsSQL(n), make([]any, n)...); err != nil {
		_ = conn.Conn().Close(ctx)
	}
}

// nullParamsSQL is a statement of n parameters that reads nothing.
func nullParamsSQL(n int) string {
	var b strings.Builder
	b.WriteString("SELECT")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " $%d::int", i+1)
	}
	return b.String()
}
