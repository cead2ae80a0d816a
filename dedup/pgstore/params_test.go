package pgstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// TestPostgresConnectionsKeepNoBodies: once an enqueue has returned, no
// connection of the pool still holds its body (params.go). The shapes are
// the statements that send bodies: one large event (a statement of its
// own), an ordered one (the order key's lock, then its statement, in one
// batch), a shared statement of events each under largeParams whose
// bodies together are over it; and the same for the responses kept for
// replay, of a sync event and of deliveries. Not parallel: it reads the heap of the
// whole test process, which the other tests' work would blur.
func TestPostgresConnectionsKeepNoBodies(t *testing.T) {
	const size = 8 << 20
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		enqueue func(t *testing.T, s *Store, key string)
	}{
		{"one large event", func(t *testing.T, s *Store, key string) {
			req := storetest.Request
			req.Body = filled(size)
			if won, _, err := s.Enqueue(ctx, key, req, 0); err != nil || !won {
				t.Fatalf("Enqueue = %v, %v; want won", won, err)
			}
		}},
		{"one large ordered event", func(t *testing.T, s *Store, key string) {
			req := storetest.Request
			req.Body, req.OrderKey = filled(size), "customer-1"
			if won, _, err := s.Enqueue(ctx, key, req, 0); err != nil || !won {
				t.Fatalf("Enqueue = %v, %v; want won", won, err)
			}
		}},
		{"a shared statement of smaller events", func(t *testing.T, s *Store, key string) {
			var calls []*enqueueCall
			for i := range size / (largeParams / 2) {
				req := storetest.Request
				req.Body = filled(largeParams / 2)
				calls = append(calls, newCall(ctx, fmt.Sprintf("%s-%d", key, i), req))
			}
			s.commitEnqueues(calls)
			for _, c := range calls {
				if a := <-c.done; a.err != nil || !a.won {
					t.Fatalf("%s in a shared statement: won %v, error %v; want won", c.key, a.won, a.err)
				}
			}
		}},
		{"a completion of a large response (REPLAY_MAX_BYTES raised)", func(t *testing.T, s *Store, key string) {
			c, _, err := s.Claim(ctx, key, time.Minute)
			if err != nil || c.Token == "" {
				t.Fatalf("Claim = %v, %v", c, err)
			}
			if err := s.Complete(ctx, c, dedup.Result{Status: 200, Body: filled(size)}, time.Hour); err != nil {
				t.Fatalf("Complete: %v", err)
			}
		}},
		{"a shared completion of deliveries", func(t *testing.T, s *Store, key string) {
			n := size / (largeParams / 2)
			for i := range n {
				if won, _, err := s.Enqueue(ctx, fmt.Sprintf("%s-%d", key, i), storetest.Request, 0); err != nil || !won {
					t.Fatalf("Enqueue = %v, %v; want won", won, err)
				}
			}
			ds, err := s.Take(ctx, dedup.Lane{Rest: true}, n, time.Minute)
			if err != nil || len(ds) != n {
				t.Fatalf("Take = %d deliveries, %v; want %d", len(ds), err, n)
			}
			var calls []*succeedCall
			for _, d := range ds {
				tok, _ := codec.ParseToken(d.Claim.Token)
				calls = append(calls, newSucceedCall(ctx, d, tok, dedup.Result{Status: 200, Body: filled(largeParams / 2)}, time.Hour))
			}
			s.commitSucceeds(calls)
			for _, c := range calls {
				if !<-c.done {
					t.Fatalf("%s: not completed by the shared statement", c.key)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A store of its own: a connection that kept the body of an
			// earlier case would let go of it here, and hide this one's.
			s := openPostgres(t, nil, Config{})
			before := liveHeap()
			tc.enqueue(t, s, tc.name)
			if grown := int64(liveHeap()) - int64(before); grown > size/4 {
				t.Errorf("the heap holds %d KiB more than before the enqueue of %d KiB of bodies, which returned; want at most %d KiB", grown>>10, size>>10, size/4>>10)
			}
		})
	}
}

// filled is a body of n bytes.
func filled(n int) []byte { return bytes.Repeat([]byte{'a'}, n) }

// liveHeap is the bytes of the heap in use after a full collection. Two
// collections: pgx pools its read buffers in a sync.Pool, whose contents
// outlive the first.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestPostgresTakesLargeBodies: a Take hands out each body whole and as
// it was queued, at the edges of the size read in pieces and of the
// pieces, compressible (PostgreSQL keeps it compressed) or not.
func TestPostgresTakesLargeBodies(t *testing.T) {
	t.Parallel()
	s := openPostgres(t, nil, Config{})
	ctx := context.Background()
	random := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)
		return b
	}
	want := map[string][]byte{
		"small":              filled(1000),
		"just under":         random(largeParams - 1),
		"at the bound":       random(largeParams),
		"a piece more":       random(largeParams + bodyPiece),
		"a byte past pieces": random(largeParams + bodyPiece + 1),
		"compressible":       filled(5 << 20),
	}
	for key, body := range want {
		req := storetest.Request
		req.Body = body
		if won, _, err := s.Enqueue(ctx, key, req, 0); err != nil || !won {
			t.Fatalf("Enqueue %s = %v, %v; want won", key, won, err)
		}
	}
	ds, err := s.Take(ctx, dedup.Lane{Rest: true}, len(want), time.Minute)
	if err != nil || len(ds) != len(want) {
		t.Fatalf("Take = %d deliveries, %v; want %d", len(ds), err, len(want))
	}
	for _, d := range ds {
		if got := d.Request.Body; !bytes.Equal(got, want[d.Claim.Key]) {
			t.Errorf("%s: a body of %d bytes taken; want the %d queued", d.Claim.Key, len(got), len(want[d.Claim.Key]))
		}
	}
}

// TestPostgresTakeReadsNoLargeRow: no row a Take reads holds a large
// body, whose row pgx would read whole into a buffer of its own (see
// takeLease): the rows of the Take's statements, as pgx traces the
// messages it reads on the store's one connection, are all smaller than
// largeParams.
func TestPostgresTakeReadsNoLargeRow(t *testing.T) {
	t.Parallel()
	const size, events = 9 << 20, 2
	s := openPostgres(t, nil, Config{URL: postgres.Get(t).NewDatabase(t) + "&pool_max_conns=1"})
	ctx := context.Background()
	for i := range events {
		req := storetest.Request
		req.Body = filled(size)
		if won, _, err := s.Enqueue(ctx, fmt.Sprint("large-", i), req, 0); err != nil || !won {
			t.Fatalf("Enqueue = %v, %v; want won", won, err)
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rows largestRow
	frontend := conn.Conn().PgConn().Frontend()
	frontend.Trace(&rows, pgproto3.TracerOptions{SuppressTimestamps: true})
	conn.Release()
	ds, err := s.Take(ctx, dedup.Lane{Rest: true}, events, time.Minute)
	frontend.Untrace()
	if err != nil || len(ds) != events {
		t.Fatalf("Take = %d deliveries, %v; want %d", len(ds), err, events)
	}
	if rows.count == 0 || rows.largest >= largeParams {
		t.Errorf("the Take read %d rows, the largest %d bytes; want some, each under %d", rows.count, rows.largest, largeParams)
	}
}

// largestRow reads pgx's trace of the messages it reads and writes
// (pgproto3.Frontend.Trace, one message a Write) for the largest row.
type largestRow struct {
	count, largest int
}

func (r *largestRow) Write(p []byte) (int, error) {
	// sender, type, length, details: "B\tDataRow\t1048604\t ..."
	if f := bytes.SplitN(p, []byte{'\t'}, 4); len(f) == 4 && string(f[0]) == "B" && string(f[1]) == "DataRow" {
		n, err := strconv.Atoi(string(f[2]))
		if err != nil {
			return 0, err
		}
		r.count++
		r.largest = max(r.largest, n)
	}
	return len(p), nil
}
