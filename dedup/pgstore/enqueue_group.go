package pgstore

import (
	"context"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// Enqueues are group-committed (group.go): the enqueues of unordered
// events waiting at the same time go in one statement (enqueueManySQL),
// and each caller is answered once it has committed, so a 202 never
// precedes durability. Ordered events (an order key) go one by one, as
// before: each takes the advisory lock of its key before its statement's
// snapshot, and the events of one key in one statement would not see each
// other's places.

// enqueueCall is an enqueue waiting for its statement's commit.
type enqueueCall struct {
	// ctx is the caller's (groupCall.context).
	ctx    context.Context
	key    string
	req    *dedup.Request
	header []byte // req.Header, encoded: the call's own
	body   []byte // a copy of req.Body, never nil (the column is NOT NULL)
	// misses counts the statements that answered nothing for key (see
	// claimAnswer): it is asked again, up to claimAttempts times.
	misses int
	// done gets the answer, once.
	done chan enqueueAnswer
}

// newEnqueueCall is the call of an enqueue of req under key, its header
// encoded. The call holds a copy of body: a committer may still be
// encoding its statement's parameters after a caller whose bound passed
// has returned, and the caller's body is then its own again (the proxy
// reuses its buffers), which the statement would have read as it
// changed: a race, and an event queued with another's bytes.
func newEnqueueCall(ctx context.Context, key string, req dedup.Request, header, body []byte) *enqueueCall {
	return &enqueueCall{ctx: ctx, key: key, req: &req, header: header,
		body: append([]byte{}, body...), done: make(chan enqueueAnswer, 1)}
}

func (c *enqueueCall) groupKey() string         { return c.key }
func (c *enqueueCall) context() context.Context { return c.ctx }

// enqueueAnswer is what a statement made of one enqueue.
type enqueueAnswer struct {
	won bool
	rec dedup.Record
	err error
	// alone says the shared statement failed on something other than the
	// connection: the caller runs its enqueue in a statement of its own,
	// whose error, if any, is its own.
	alone bool
}

// enqueueGrouped queues c for the next shared statement and waits for its
// answer or for c.ctx's end (the caller's bound), whichever comes first.
// A caller that stops waiting may still have its event queued, as when
// the answer of a statement of its own is lost: it is told of its
// context's end, counted as raised, and its retry finds the event held.
func (s *Store) enqueueGrouped(c *enqueueCall) (bool, dedup.Record, error) {
	s.enqueues.add(c, s.commitEnqueues)
	var a enqueueAnswer
	select {
	case a = <-c.done:
	case <-c.ctx.Done():
		return false, dedup.Record{}, c.ctx.Err()
	}
	if a.alone {
		return s.enqueueAlone(c)
	}
	return a.won, a.rec, a.err
}

// enqueueAlone runs c in a statement of its own, until it answers.
func (s *Store) enqueueAlone(c *enqueueCall) (bool, dedup.Record, error) {
	for range claimAttempts {
		answers, err := s.runEnqueues(c.ctx, []*enqueueCall{c}, s.announce(time.Now()))
		if err != nil {
			return false, dedup.Record{}, err
		}
		if a, ok := answers[c.key]; ok {
			return a.won, a.rec, nil
		}
	}
	return false, dedup.Record{}, errNoAnswer
}

// commitEnqueues runs calls in one statement and answers each. A key the
// statement answered nothing for is asked again in the next one. If the
// statement fails on the connection (or its time runs out), every call is
// told the error: none of them committed, or none is known to have. If it
// fails otherwise (one event the server refused), each call runs again
// alone, for an error of its own.
func (s *Store) commitEnqueues(calls []*enqueueCall) {
	ctx, cancel := s.bound(s.background)
	answers, err := s.runEnqueues(ctx, calls, s.announce(time.Now()))
	cancel()
	if err != nil {
		alone := len(calls) > 1 && !pgTransient(err)
		for _, c := range calls {
			c.done <- enqueueAnswer{err: err, alone: alone}
		}
		return
	}
	var again []*enqueueCall
	for _, c := range calls {
		a, ok := answers[c.key]
		switch {
		case ok:
			c.done <- a
		case c.misses+1 < claimAttempts:
			c.misses++
			again = append(again, c)
		default:
			c.done <- enqueueAnswer{err: errNoAnswer}
		}
	}
	if len(again) > 0 {
		s.enqueues.requeue(again)
	}
}

// runEnqueues runs calls, each a distinct key, in one statement
// (enqueueManySQL), notifying the listeners if notify, and returns the
// answer of each key it answered for.
func (s *Store) runEnqueues(ctx context.Context, calls []*enqueueCall, notify bool) (map[string]enqueueAnswer, error) {
	var channel *string // NULL: no notification
	if notify {
		channel = &s.sql.notify
	}
	args := enqueueManyArgs(calls, channel, s.announcer)
	answers := make(map[string]enqueueAnswer, len(calls))
	err := s.sending(ctx, args, func(q querier) error {
		rows, err := q.Query(ctx, s.sql.enqueueMany, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var key string
			var won bool
			var rec pgRecord
			if err := rows.Scan(append([]any{&key, &won}, rec.targets()...)...); err != nil {
				return err
			}
			if won {
				answers[key] = enqueueAnswer{won: true}
			} else {
				answers[key] = enqueueAnswer{rec: rec.record()}
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return answers, nil
}

// enqueueManyArgs are the parameters of enqueueManySQL for calls, the
// listeners' channel (nil: none) and the notification's announcer.
func enqueueManyArgs(calls []*enqueueCall, channel *string, announcer string) []any {
	n := len(calls)
	var (
		keys, methods, uris, hosts, addrs = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		routes, namespaces, traces        = make([]string, n), make([]string, n), make([]string, n)
		headers, bodies                   = make([][]byte, n), make([][]byte, n)
		tls                               = make([]bool, n)
		ttls                              = make([]int64, n)
	)
	for i, c := range calls {
		r := c.req
		keys[i], methods[i], uris[i], hosts[i], addrs[i] = c.key, r.Method, r.RequestURI, r.Host, r.RemoteAddr
		routes[i], namespaces[i], traces[i] = r.Route, r.Namespace, r.TraceParent
		headers[i], bodies[i], tls[i], ttls[i] = c.header, c.body, r.TLS, micros(max(r.TTL, 0))
	}
	return []any{keys, methods, uris, hosts, headers, addrs, tls, bodies, channel, routes, namespaces, ttls, traces, announcer}
}

// enqueueManySQL is enqueueSQL for many unordered events at once, one
// element of each array parameter an event ($1 the keys, distinct): each
// key is claimed and its request queued, or its live record returned, as
// enqueueSQL does for one, and all of it commits at once. Each live record
// is read by its own probe of the primary key (LATERAL), whatever the
// planner thinks of the arrays' length. Listeners hear of it once ($9
// names their channel, see announce), whatever the number of events
// queued, the payload $14, the store's announcer, then a key.
const enqueueManySQL = `WITH input AS MATERIALIZED (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::boolean[], $8::bytea[],
		$10::text[], $11::text[], $12::bigint[], $13::text[])
		AS i (key, method, request_uri, host, header_raw, remote_addr, tls, body, route, namespace, ttl_micros, trace_parent)
), live (key, state, since, ttl, status, fingerprint, content_type, body, attempts, last_status, last_error, due, blocked_by) AS MATERIALIZED (
	SELECT i.key, l.* FROM input i CROSS JOIN LATERAL (
		SELECT ` + recordColumns + `
		FROM %[1]srecords r LEFT JOIN %[1]squeue q ON q.key = r.key
		WHERE r.key = i.key AND (r.expires_at > now()) IS TRUE LIMIT 1) l
), won AS (
	INSERT INTO %[1]srecords AS r (key, state, token, since, expires_at)
	SELECT i.key, 3, NULL::bytea, now(), 'infinity'::timestamptz FROM input i WHERE NOT EXISTS (SELECT FROM live WHERE live.key = i.key)
	` + claimTakeover + `
	RETURNING r.key
), queued AS (
	INSERT INTO %[1]squeue AS q (key, method, request_uri, host, header_raw, remote_addr, tls, body, route, namespace, ttl_micros, trace_parent, accepted_at, attempts, due_at)
	SELECT i.key, i.method, i.request_uri, i.host, i.header_raw, i.remote_addr, i.tls, i.body, i.route, i.namespace, i.ttl_micros, i.trace_parent, now(), 0, now()
	FROM won JOIN input i ON i.key = won.key
	ON CONFLICT (key) DO UPDATE SET method = excluded.method, request_uri = excluded.request_uri,
		host = excluded.host, header = NULL, header_raw = excluded.header_raw, remote_addr = excluded.remote_addr, tls = excluded.tls,
		body = excluded.body, route = excluded.route, namespace = excluded.namespace, ttl_micros = excluded.ttl_micros,
		trace_parent = excluded.trace_parent, accepted_at = excluded.accepted_at, attempts = 0, due_at = excluded.due_at,
		lease_token = NULL, last_status = NULL, last_error = NULL, failed_at = NULL,
		order_key = NULL, order_seq = NULL, order_block = false
	RETURNING q.key
)
SELECT queued.key, true, ` + noRecord + ` FROM queued
	LEFT JOIN LATERAL (SELECT pg_notify($9, $14 || queued.key) WHERE $9::text IS NOT NULL AND queued.key = (SELECT min(key) FROM queued)) AS notified ON true
UNION ALL
SELECT key, false, state, since, ttl, status, fingerprint, content_type, body, attempts, last_status, last_error, due, blocked_by FROM live`
