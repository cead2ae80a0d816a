package pgstore

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/webhook-dedup/webhook-dedup/dedup/pgstore/pgname"
)

// schemaSQL creates the tables, each statement a no-op when what it
// creates exists. %[1]s is the table prefix.
//
// records holds one row per event ID: its state, its claim's token, when
// it was claimed or completed and when it expires (infinity while an async
// event is queued or being delivered), the completed result, and for an
// async event delivered, the attempts it took. Expired
// rows are ignored by every read, taken over by a claim, and deleted by
// the pruner, which the expires_at index keeps cheap.
//
// queue holds the request of each async event until it is delivered, and
// where its delivery stands. due_at is when a queued event's next attempt
// is due, or, while a worker holds it (lease_token set), when its lease
// runs out: so one partial index finds both the due events and the
// deliveries whose worker died. route is the route the event was accepted
// on, which decides its lane (dedup.Lane); the lane index, by route then
// due_at, finds one route's due events without reading through another
// route's, however many of them are due first (see takeRouteSQL and
// takeRestSQL). Dead letters (failed_at set) have their own partial
// index, for their listing. A queue row goes with its record.
//
// owners names, per KEY_PREFIX, the deployment (APP_NAME) whose records
// these are.
const schemaSQL = `CREATE TABLE IF NOT EXISTS %[1]srecords (
	key          text PRIMARY KEY,
	state        smallint NOT NULL,
	token        bytea,
	since        timestamptz NOT NULL,
	expires_at   timestamptz NOT NULL,
	status       integer,
	fingerprint  bytea,
	content_type text,
	body         bytea,
	attempts     integer
);
CREATE INDEX IF NOT EXISTS %[1]srecords_expires_at ON %[1]srecords (expires_at);
CREATE TABLE IF NOT EXISTS %[1]squeue (
	key          text PRIMARY KEY REFERENCES %[1]srecords (key) ON DELETE CASCADE,
	method       text NOT NULL,
	request_uri  text NOT NULL,
	host         text NOT NULL,
	header       jsonb,
	remote_addr  text NOT NULL,
	tls          boolean NOT NULL,
	body         bytea NOT NULL,
	route        text NOT NULL DEFAULT '',
	namespace    text NOT NULL DEFAULT '',
	ttl_micros   bigint NOT NULL DEFAULT 0,
	trace_parent text NOT NULL DEFAULT '',
	header_raw   bytea,
	accepted_at  timestamptz NOT NULL,
	attempts     integer NOT NULL DEFAULT 0,
	due_at       timestamptz NOT NULL,
	lease_token  bytea,
	last_status  integer,
	last_error   text,
	failed_at    timestamptz
);
-- Added after the first release: how each event is settled, as the proxy
-- decided when it accepted it (empty for the events queued before).
ALTER TABLE %[1]squeue ADD COLUMN IF NOT EXISTS route text NOT NULL DEFAULT '',
	ADD COLUMN IF NOT EXISTS namespace text NOT NULL DEFAULT '',
	ADD COLUMN IF NOT EXISTS ttl_micros bigint NOT NULL DEFAULT 0;
-- Added with tracing: the accepting span's W3C traceparent, which each
-- delivery attempt's span links to (empty for the events queued before).
ALTER TABLE %[1]squeue ADD COLUMN IF NOT EXISTS trace_parent text NOT NULL DEFAULT '';
-- Added so that a header keeps every byte it came with (JSON replaced what
-- is not UTF-8 with U+FFFD): the header as stored by the request codec.
-- header holds it as JSON for the events queued before, NULL after.
ALTER TABLE %[1]squeue ADD COLUMN IF NOT EXISTS header_raw bytea,
	ALTER COLUMN header DROP NOT NULL;
CREATE INDEX IF NOT EXISTS %[1]squeue_due ON %[1]squeue (due_at) WHERE failed_at IS NULL;
CREATE INDEX IF NOT EXISTS %[1]squeue_failed ON %[1]squeue (key) WHERE failed_at IS NOT NULL;
-- Added with lanes: Take of one route's lane, and of the rest lane route by
-- route. Every row already has its route (events queued before the route
-- column have '', the rest lane's), so there is nothing to fill in. Built
-- here, it holds up writes to the queue while it is built (CONCURRENTLY
-- cannot run in a transaction); for a large queue, create it beforehand
-- with CREATE INDEX CONCURRENTLY and this finds it there.
CREATE INDEX IF NOT EXISTS %[1]squeue_lane ON %[1]squeue (route, due_at) WHERE failed_at IS NULL;
-- Added with ordered delivery (a route's order= option): the event's order
-- key (NULL: none, as for every event queued before), its place in the
-- key (order_seq, from the sequence, given under a lock on the key so
-- that the places follow the commits; NULL once it left the key), and
-- whether its dead letter keeps its place (ORDER_ON_FAILURE=block). Take
-- passes over an event while its key holds an earlier place, which the
-- order index finds in one probe. An event behind the head of its key
-- waits, due_at infinity, out of the due and lane indexes' ranges, until
-- the head leaves (see postgres_queue.go): nothing to add for it, and the
-- events queued before, due at once, are still held back by that probe.
ALTER TABLE %[1]squeue ADD COLUMN IF NOT EXISTS order_key text,
	ADD COLUMN IF NOT EXISTS order_seq bigint,
	ADD COLUMN IF NOT EXISTS order_block boolean NOT NULL DEFAULT false;
CREATE SEQUENCE IF NOT EXISTS %[1]squeue_order_seq;
CREATE INDEX IF NOT EXISTS %[1]squeue_order ON %[1]squeue (order_key, order_seq) WHERE order_seq IS NOT NULL;
-- Added with the events listing (events.go): each async event's last
-- attempts (a jsonb array; NULL for the rows written before, which list
-- with an empty history) and, once completed, when it was accepted; the
-- listing's three orders, each an index range. Built here as the lane
-- index is (see above): for a large queue, create them beforehand with
-- CREATE INDEX CONCURRENTLY.
ALTER TABLE %[1]srecords ADD COLUMN IF NOT EXISTS history jsonb,
	ADD COLUMN IF NOT EXISTS accepted_at timestamptz;
CREATE INDEX IF NOT EXISTS %[1]squeue_accepted ON %[1]squeue (accepted_at, (key COLLATE "C")) WHERE failed_at IS NULL;
CREATE INDEX IF NOT EXISTS %[1]squeue_failed_at ON %[1]squeue (failed_at, (key COLLATE "C")) WHERE failed_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS %[1]srecords_completed ON %[1]srecords (since, (key COLLATE "C")) WHERE state = 2 AND attempts IS NOT NULL;
CREATE TABLE IF NOT EXISTS %[1]sowners (
	key_prefix   text PRIMARY KEY,
	app_name     text NOT NULL
);
`

// Schema is the SQL that creates the tables whose names start
// with prefix: what Migrate runs, for those who apply it themselves.
func Schema(prefix string) (string, error) {
	if err := pgname.CheckPrefix(prefix); err != nil {
		return "", err
	}
	return fmt.Sprintf(schemaSQL, prefix), nil
}

// Migrate creates the tables when they are missing. Replicas that start
// together take turns (a transaction-scoped advisory lock): two
// concurrent CREATE TABLE IF NOT EXISTS of one table can fail.
func (s *Store) Migrate(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", s.lockKey("migrate")); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(schemaSQL, s.prefix))
		return err
	})
	if err != nil {
		return fmt.Errorf("dedup: create tables %srecords, %squeue and %sowners: %w", s.prefix, s.prefix, s.prefix, connectError(err))
	}
	return nil
}

// lockKey is the advisory lock key of one kind of work on these tables:
// replicas sharing the tables share the key, other deployments in the same
// database (another prefix) do not.
func (s *Store) lockKey(what string) int64 {
	h := fnv.New64a()
	h.Write([]byte("webhook-dedup:" + what + ":" + s.prefix))
	return int64(h.Sum64())
}

// statements are the store's SQL with its table names filled in.
type statements struct {
	claim, complete, release, lookup, forget, ping, prune string
	enqueue, enqueueMany, succeed, succeeded, retry, fail string
	requeue, succeedMany, lockOrdersOf                    string
	takeRoute, takeRest, takeBody, extend                 string
	deadLetters, stats, notify                            string
	lockOrderKey, lockOrderOf                             string
	events                                                [4]string // by dedup.State - Completed (eventsSQL)
	owner                                                 string
}

// recordColumns read a record (r) and its queue row (q, absent for sync
// events) as scanRecord expects them. A queue row decides the state of an
// async event: failed once dead-lettered, delivering while a worker's
// lease lasts, queued otherwise (a lease run out is a delivery due again).
const recordColumns = `CASE WHEN q.key IS NULL THEN r.state
		WHEN q.failed_at IS NOT NULL THEN 5
		WHEN q.lease_token IS NOT NULL AND q.due_at > now() THEN 4
		ELSE 3 END,
	r.since,
	CASE WHEN r.expires_at = 'infinity' THEN 0 ELSE (extract(epoch FROM r.expires_at - now()) * 1000000)::bigint END,
	r.status, r.fingerprint, r.content_type, r.body,
	coalesce(q.attempts, r.attempts), q.last_status, q.last_error,
	CASE WHEN q.failed_at IS NULL AND (q.lease_token IS NULL OR q.due_at <= now()) AND q.due_at < 'infinity' THEN q.due_at END,
	CASE WHEN q.order_seq IS NOT NULL AND q.failed_at IS NULL THEN (SELECT h.key FROM %[1]squeue h
		WHERE h.order_key = q.order_key AND h.order_seq < q.order_seq ORDER BY h.order_seq LIMIT 1) END`

// noRecord is recordColumns' width in NULLs, for the row of a won claim.
const noRecord = `NULL::integer, NULL::timestamptz, NULL::bigint, NULL::integer, NULL::bytea, NULL::text, NULL::bytea,
	NULL::integer, NULL::integer, NULL::text, NULL::timestamptz, NULL::text`

// claimTakeover is the ON CONFLICT clause of a claim: an expired row is
// taken over as if it were absent; a live one is left alone.
const claimTakeover = `ON CONFLICT (key) DO UPDATE SET state = excluded.state, token = excluded.token,
		since = excluded.since, expires_at = excluded.expires_at,
		status = NULL, fingerprint = NULL, content_type = NULL, body = NULL, attempts = NULL,
		history = NULL, accepted_at = NULL
	WHERE r.expires_at <= now()`

// live is the first step of a claim: the live record that holds the key,
// if any, read without a lock, so that a duplicate (the common case) is a
// read and writes nothing, not even a row lock. The insert that follows
// runs only when no live record was seen.
const live = `WITH live (state, since, ttl, status, fingerprint, content_type, body, attempts, last_status, last_error, due, blocked_by) AS (
	SELECT ` + recordColumns + `
	FROM %[1]srecords r LEFT JOIN %[1]squeue q ON q.key = r.key
	WHERE r.key = $1 AND r.expires_at > now()
)`

// claimAnswer is the last step of a claim: the won row, or the live
// record. Both snapshots are the statement's, taken before any concurrent
// claim committed: when such a claim is what stopped the insert (its row
// conflicted, live), no row comes back, and the caller asks again.
const claimAnswer = `SELECT true, ` + noRecord + ` FROM won
UNION ALL
SELECT false, * FROM live`

func newStatements(p string) statements {
	f := func(sql string) string { return fmt.Sprintf(sql, p) }
	return statements{
		// A claim is one statement: it reports the live record in the
		// way, or inserts (a new row, or an expired one taken over, whose
		// stale queue row goes too). The primary key decides between
		// concurrent claims.
		claim: f(live + `, won AS (
	INSERT INTO %[1]srecords AS r (key, state, token, since, expires_at)
	SELECT $1, 1, $2, now(), now() + $3::bigint * interval '1 microsecond' WHERE NOT EXISTS (SELECT FROM live)
	` + claimTakeover + `
	RETURNING r.key
), stale AS (
	DELETE FROM %[1]squeue WHERE key = $1 AND EXISTS (SELECT FROM won)
)
` + claimAnswer),
		// A completion is accepted from the claim's owner while its lease
		// lasts, and again (a retry whose first answer was lost) if the
		// record already holds the same result.
		complete: f(`UPDATE %[1]srecords SET state = 2, since = now(), expires_at = now() + $3::bigint * interval '1 microsecond',
	status = $4, fingerprint = $5, content_type = $6, body = $7
WHERE key = $1 AND token = $2 AND (
	(state = 1 AND expires_at > now()) OR
	(state = 2 AND status = $4 AND fingerprint IS NOT DISTINCT FROM $5
		AND content_type IS NOT DISTINCT FROM $6 AND body IS NOT DISTINCT FROM $7))`),
		release: f(`DELETE FROM %[1]srecords WHERE key = $1 AND token = $2 AND state = 1 AND expires_at > now()`),
		lookup: f(`SELECT ` + recordColumns + `, r.history
FROM %[1]srecords r LEFT JOIN %[1]squeue q ON q.key = r.key
WHERE r.key = $1 AND r.expires_at > now()`),
		forget: f(forgetSQL),
		// The tables, as this version writes them: the queue's columns
		// added since the first release included, so that a database
		// not migrated since is not taken for ready. Not the lane index:
		// every statement works without it (a Take of one lane then
		// reads through the others' due rows), and a proxy not ready
		// until `migrate` runs would take no webhook at all.
		ping: f(`SELECT q.route, q.namespace, q.ttl_micros, q.trace_parent, q.header_raw, q.order_key, q.order_seq, q.order_block FROM %[1]srecords r LEFT JOIN %[1]squeue q ON q.key = r.key LIMIT 0`),
		// A small batch by physical address (a TID scan: no sort, no
		// long lock), skipping rows a claim is taking over right now.
		prune: f(`DELETE FROM %[1]srecords WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM %[1]srecords WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED))`),
		enqueue:      f(enqueueSQL),
		enqueueMany:  f(enqueueManySQL),
		takeRoute:    f(takeRouteSQL),
		takeRest:     f(takeRestSQL),
		takeBody:     f(takeBodySQL),
		extend:       f(extendSQL),
		succeed:      f(succeedSQL),
		succeedMany:  f(succeedManySQL),
		lockOrdersOf: f(lockOrdersOfSQL),
		succeeded:    f(`SELECT EXISTS (SELECT FROM %[1]srecords WHERE key = $1 AND state = 2 AND token = $2 AND expires_at > now())`),
		retry:        f(retrySQL),
		fail:         f(failSQL),
		requeue:      f(requeueSQL),
		lockOrderKey: lockOrderKeySQL,
		lockOrderOf:  f(lockOrderOfSQL),
		deadLetters:  f(deadLettersSQL),
		stats:        f(statsSQL),
		events:       eventStatements(f),
		notify:       notifyChannel(p),
		// The owner of a key prefix: this app if it had none. The
		// snapshot caveat of a claim holds: a concurrent first owner may
		// make it answer nothing, and the caller asks again.
		owner: f(`WITH mine AS (
	INSERT INTO %[1]sowners (key_prefix, app_name) VALUES ($1, $2) ON CONFLICT (key_prefix) DO NOTHING RETURNING app_name
)
SELECT app_name FROM mine
UNION ALL
SELECT app_name FROM %[1]sowners WHERE key_prefix = $1 AND NOT EXISTS (SELECT FROM mine)`),
	}
}

// notifyChannel is the LISTEN/NOTIFY channel that says an event was
// queued, one per table prefix.
func notifyChannel(prefix string) string {
	return strings.TrimSuffix(prefix, "_") + "_queued"
}
