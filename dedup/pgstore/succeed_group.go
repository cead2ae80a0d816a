package pgstore

import (
	"bytes"
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
)

// Completions of deliveries are group-committed (group.go): the Succeed
// calls waiting at the same time go in one round trip (the order keys'
// locks, once this process has handed out an ordered event, then
// succeedManySQL) and one commit. A delivery the shared
// statement did not complete (no longer its holder's, or beside another
// of its order key) and every delivery of a shared statement that failed
// are completed alone, as before (settle): that path retries what failed
// for a reason that passes and tells a lost answer from a lost lease.

// succeedCall is a Succeed waiting for its statement's commit.
type succeedCall struct {
	// ctx is the caller's (groupCall.context).
	ctx context.Context
	key string
	tok [codec.TokenLen]byte
	ttl int64 // micros
	// The result's columns (resultColumns) and the attempt (attemptJSON).
	status      int32
	fingerprint []byte
	contentType *string
	body        []byte
	attempt     *string
	// done gets whether the shared statement completed the delivery
	// (false: complete it alone).
	done chan bool
}

// newSucceedCall is the call of Succeed(ctx, d, res, ttl), tok d's token.
func newSucceedCall(ctx context.Context, d dedup.Delivery, tok [codec.TokenLen]byte, res dedup.Result, ttl time.Duration) *succeedCall {
	status, fp, ct, body := resultColumns(res)
	// A copy, as an enqueue's (newEnqueueCall): the statement may be
	// encoded after a caller whose bound passed has returned.
	body = bytes.Clone(body)
	return &succeedCall{ctx: ctx, key: d.Claim.Key, tok: tok, ttl: micros(ttl), status: status,
		fingerprint: fp, contentType: ct, body: body, attempt: attemptJSON(d, res.Status, ""), done: make(chan bool, 1)}
}

func (c *succeedCall) groupKey() string         { return c.key }
func (c *succeedCall) context() context.Context { return c.ctx }

// succeedGrouped queues c for the next shared statement and reports
// whether it completed the delivery, or c.ctx's error once the caller's
// bound passes first.
func (s *Store) succeedGrouped(c *succeedCall) (bool, error) {
	s.succeeds.add(c, s.commitSucceeds)
	select {
	case done := <-c.done:
		return done, nil
	case <-c.ctx.Done():
		return false, c.ctx.Err()
	}
}

// commitSucceeds runs calls in one round trip and one transaction, and
// tells each whether it completed its delivery; all of them are told
// they did not if it failed (each then runs alone).
func (s *Store) commitSucceeds(calls []*succeedCall) {
	ctx, cancel := s.bound(s.background)
	defer cancel()
	b := &pgx.Batch{}
	args := succeedManyArgs(calls)
	// The order keys' locks are taken only by a process that has handed
	// out an ordered event: a delivery is completed only with the token
	// of the Take that handed it out, so before then none of these can be
	// of one, and the locks' statement (a probe of each key, a statement
	// of its own to run) would find nothing to lock.
	locks := s.handedOrdered.Load()
	if locks {
		b.Queue(s.sql.lockOrdersOf, args[0])
	}
	b.Queue(s.sql.succeedMany, args...)
	done := make(map[string]bool, len(calls))
	err := s.sending(ctx, args, func(q querier) error {
		br := q.SendBatch(ctx, b)
		var err error
		if locks {
			_, err = br.Exec()
		}
		if err == nil {
			var rows pgx.Rows
			rows, err = br.Query()
			if err == nil {
				var key string
				_, err = pgx.ForEachRow(rows, []any{&key}, func() error {
					done[key] = true
					return nil
				})
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return err
	})
	for _, c := range calls {
		c.done <- err == nil && done[c.key]
	}
}

// succeedManyArgs are the parameters of succeedManySQL for calls.
func succeedManyArgs(calls []*succeedCall) []any {
	n := len(calls)
	var (
		keys         = make([]string, n)
		toks         = make([][]byte, n)
		ttls         = make([]int64, n)
		statuses     = make([]int32, n)
		fingerprints = make([][]byte, n)
		contentTypes = make([]*string, n)
		bodies       = make([][]byte, n)
		attempts     = make([]*string, n)
	)
	for i, c := range calls {
		keys[i], toks[i], ttls[i] = c.key, c.tok[:], c.ttl
		statuses[i], fingerprints[i], contentTypes[i], bodies[i], attempts[i] = c.status, c.fingerprint, c.contentType, c.body, c.attempt
	}
	return []any{keys, toks, ttls, statuses, fingerprints, contentTypes, bodies, attempts, dedup.HistoryLen}
}

// lockOrdersOfSQL is lockOrderOfSQL for the deliveries $1, each order key
// once, in the order of the locks' numbers: two transactions that take
// some of the same locks take them in the same order, and neither waits
// for the other for ever.
const lockOrdersOfSQL = `SELECT pg_advisory_xact_lock(l.h) FROM (
	SELECT DISTINCT hashtextextended(order_key, 0) AS h FROM %[1]squeue WHERE key = ANY($1::text[]) AND order_key IS NOT NULL ORDER BY 1) l`

// succeedManySQL is succeedSQL for many deliveries at once, one element
// of each array parameter a delivery ($1 the keys, distinct), and returns
// the keys of those it completed. It leaves out a delivery that shares its
// order key with another of them (which should not happen: only the head
// of a key is handed out), which would make the one statement take both
// heads away and promote neither's next.
var succeedManySQL = `WITH input AS MATERIALIZED (
	SELECT * FROM unnest($1::text[], $2::bytea[], $3::bigint[], $4::integer[], $5::bytea[], $6::text[], $7::bytea[], $8::text[])
		AS i (key, token, ttl_micros, status, fingerprint, content_type, body, attempt)
), mine AS (
	DELETE FROM %[1]squeue q USING input i
	WHERE q.key = ANY(ARRAY(SELECT key FROM input)) AND q.key = i.key AND (q.lease_token = i.token AND q.failed_at IS NULL) IS TRUE
		AND (q.order_key IS NULL OR NOT EXISTS (SELECT FROM %[1]squeue o JOIN input j ON j.key = o.key
			WHERE o.order_key = q.order_key AND o.key <> q.key))
	RETURNING q.key, q.attempts, q.accepted_at, q.order_key, true AS leaves
)` + promoteNextSQL + `
UPDATE %[1]srecords r SET state = 2, token = i.token, since = now(), expires_at = now() + i.ttl_micros * interval '1 microsecond',
	status = i.status, fingerprint = i.fingerprint, content_type = i.content_type, body = i.body, attempts = mine.attempts,
	accepted_at = mine.accepted_at, history = ` + historyAppend("i.attempt", "$9") + `
FROM mine JOIN input i ON i.key = mine.key WHERE r.key = ANY(ARRAY(SELECT key FROM mine)) AND r.key = mine.key
RETURNING r.key`
