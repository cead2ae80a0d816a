package pgstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// newCall is an enqueue of key with req, as Enqueue makes it.
func newCall(ctx context.Context, key string, req dedup.Request) *enqueueCall {
	return newEnqueueCall(ctx, key, req, codec.AppendHeader(nil, req.Header), req.Body)
}

// TestPostgresEnqueueGroupOneBadEvent: an event the server refuses, in a
// statement shared with others, fails alone, with the error it would
// have had in a statement of its own, and the others are queued. The
// shapes are what PostgreSQL's text refuses, in the key and in the
// request's text columns.
func TestPostgresEnqueueGroupOneBadEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		key  string
		edit func(*dedup.Request)
	}{
		{"NUL in the key", "bad\x00key", nil},
		{"key not UTF-8", "bad\xffkey", nil},
		{"NUL in the host", "bad", func(r *dedup.Request) { r.Host = "a\x00b" }},
		{"request URI not UTF-8", "bad", func(r *dedup.Request) { r.RequestURI = "/\xc3" }},
		{"route not UTF-8", "bad", func(r *dedup.Request) { r.Route = "\xfe" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := openPostgres(t, nil, Config{})
			ctx := context.Background()
			bad := storetest.Request
			if tc.edit != nil {
				tc.edit(&bad)
			}
			_, _, alone := s.Enqueue(ctx, tc.key, bad, 0)
			if alone == nil {
				t.Fatalf("Enqueue of %q alone succeeded; the case needs an event the server refuses", tc.key)
			}
			calls := []*enqueueCall{newCall(ctx, "good1", storetest.Request), newCall(ctx, tc.key, bad), newCall(ctx, "good2", storetest.Request)}
			go s.commitEnqueues(calls)
			for i, c := range calls {
				c := c
				won, _, err := func() (bool, dedup.Record, error) {
					a := <-c.done
					if a.alone {
						return s.enqueueAlone(c)
					}
					return a.won, a.rec, a.err
				}()
				if i == 1 {
					if won || err == nil || err.Error() != errors.Unwrap(alone).Error() {
						t.Errorf("the bad event in a group: won %v, error %v; want the error it has alone: %v", won, err, errors.Unwrap(alone))
					}
					continue
				}
				if err != nil || !won {
					t.Errorf("%s beside a bad event: won %v, error %v; want won", c.key, won, err)
				}
				if rec, err := s.Lookup(ctx, c.key); err != nil || rec.State != dedup.Queued {
					t.Errorf("Lookup %s = %v, %v; want queued", c.key, rec.State, err)
				}
			}
		})
	}
}

// blockWrites holds an exclusive lock on s's records table from a
// connection of its own until the returned func is called, and returns
// once an enqueue waits for it: each shared statement blocks, holding
// its callers, until then.
func blockWrites(t *testing.T, s *Store, url string) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+s.prefix+"records IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		_ = tx.Rollback(ctx)
		_ = conn.Close(ctx)
	}
	t.Cleanup(release)
	return release
}

// waitingStatement is the pid of the backend whose statement waits for a
// lock (0: none yet).
func waitingStatement(t *testing.T, url string) int {
	t.Helper()
	return waitingFor(t, url, "")
}

// waitingFor is the pid of a backend that waits for event
// (pg_stat_activity's wait_event: a lock's kind, "advisory", "tuple", …;
// or "SyncRep", a COMMIT waiting for its standby; "": a lock of any kind),
// 0 if none does yet.
func waitingFor(t *testing.T, url, event string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var pid int
	err = conn.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()
		AND (wait_event = $1 OR $1 = '' AND wait_event_type = 'Lock') LIMIT 1`, event).Scan(&pid)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return pid
}

type enqueueResult struct {
	won bool
	err error
}

// enqueueAsync runs Enqueue of key in the background.
func enqueueAsync(ctx context.Context, s *Store, key string) <-chan enqueueResult {
	out := make(chan enqueueResult, 1)
	go func() {
		won, _, err := s.Enqueue(ctx, key, storetest.Request, 0)
		out <- enqueueResult{won, err}
	}()
	return out
}

// TestPostgresEnqueueGroupCancel: an enqueue whose caller gives up while
// it waits for a shared statement (the one before it still running)
// returns at once with its context's error, and is left out of the next
// statement: it queues nothing.
func TestPostgresEnqueueGroupCancel(t *testing.T) {
	t.Parallel()
	const timeout = 20 * time.Second
	url := postgres.Get(t).NewDatabase(t)
	s := openPostgres(t, nil, Config{URL: url, Timeout: timeout})
	release := blockWrites(t, s, url)
	first := enqueueAsync(context.Background(), s, "first")
	storetest.Eventually(t, "the first statement waiting for the lock", func() bool { return waitingStatement(t, url) != 0 })
	ctx, cancel := context.WithCancel(context.Background())
	second := enqueueAsync(ctx, s, "second")
	storetest.Eventually(t, "the second enqueue waiting for a statement", func() bool { return s.enqueues.waiting() == 1 })
	cancel()
	select {
	case r := <-second:
		if r.won || !errors.Is(r.err, context.Canceled) {
			t.Errorf("the cancelled enqueue = %v, %v; want context.Canceled", r.won, r.err)
		}
	case <-time.After(timeout / 2):
		t.Fatalf("the cancelled enqueue still waits %v later, behind the statement before it", timeout/2)
	}
	release()
	if r := <-first; r.err != nil || !r.won {
		t.Errorf("the first enqueue = %v, %v; want won", r.won, r.err)
	}
	storetest.Eventually(t, "the committer idle", s.enqueues.idle)
	if _, err := s.Lookup(context.Background(), "second"); !errors.Is(err, dedup.ErrNotFound) {
		t.Errorf("Lookup of the cancelled enqueue's key = %v; want dedup.ErrNotFound (nothing queued)", err)
	}
}

// TestPostgresEnqueueGroupKilled: when the connection of a shared
// statement is lost before it commits (its backend killed), every
// enqueue in it is told an error, none is answered as queued, nothing of
// them is kept, and the enqueues waiting behind it go on in the next
// statement.
func TestPostgresEnqueueGroupKilled(t *testing.T) {
	t.Parallel()
	url := postgres.Get(t).NewDatabase(t)
	s := openPostgres(t, nil, Config{URL: url, Timeout: 20 * time.Second})
	release := blockWrites(t, s, url)
	first := enqueueAsync(context.Background(), s, "first")
	var pid int
	storetest.Eventually(t, "the first statement waiting for the lock", func() bool {
		pid = waitingStatement(t, url)
		return pid != 0
	})
	behind := []<-chan enqueueResult{enqueueAsync(context.Background(), s, "second"), enqueueAsync(context.Background(), s, "third")}
	storetest.Eventually(t, "two enqueues waiting for the next statement", func() bool { return s.enqueues.waiting() == 2 })
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	if r := <-first; r.won || r.err == nil {
		t.Errorf("the enqueue whose statement was killed = %v, %v; want an error", r.won, r.err)
	}
	release()
	for i, ch := range behind {
		if r := <-ch; r.err != nil || !r.won {
			t.Errorf("enqueue %d behind the killed statement = %v, %v; want won", i, r.won, r.err)
		}
	}
	if _, err := s.Lookup(context.Background(), "first"); !errors.Is(err, dedup.ErrNotFound) {
		t.Errorf("Lookup of the killed statement's key = %v; want dedup.ErrNotFound (nothing kept)", err)
	}
	if won, _, err := s.Enqueue(context.Background(), "first", storetest.Request, 0); err != nil || !won {
		t.Errorf("the sender's retry of the killed enqueue = %v, %v; want won", won, err)
	}
}

// TestEnqueueCallOwnsItsBody: a call's body is its own, not the caller's
// buffer, which the caller may reuse once its bound has passed while a
// committer still encodes the statement (a data race seen in the fault
// matrix's PostgreSQL store-link cells, and events queued with another's
// bytes). Likewise a completion's body.
func TestEnqueueCallOwnsItsBody(t *testing.T) {
	body := []byte(`{"id":"evt_1"}`)
	c := newEnqueueCall(context.Background(), "k", dedup.Request{Body: body}, nil, body)
	sc := newSucceedCall(context.Background(), dedup.Delivery{}, [codec.TokenLen]byte{}, dedup.Result{Status: 200, Body: body}, time.Hour)
	copy(body, "XXXXXXXXXXXXXX")
	if string(c.body) != `{"id":"evt_1"}` {
		t.Errorf("the enqueue's body changed with the caller's buffer: %q", c.body)
	}
	if string(sc.body) != `{"id":"evt_1"}` {
		t.Errorf("the completion's body changed with the caller's buffer: %q", sc.body)
	}
	if c := newEnqueueCall(context.Background(), "k", dedup.Request{}, nil, nil); c.body == nil {
		t.Error("an empty body is nil; the column is NOT NULL")
	}
}
