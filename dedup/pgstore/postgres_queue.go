package pgstore

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/storeop"
)

var _ dedup.Queue = (*Store)(nil)

// enqueueSQL claims the key for an async event (state queued, no expiry
// while it waits) and stores its request, in one statement, so one
// commit makes both durable or neither; a queue row left by an expired
// dead letter is replaced. Listeners hear of it once it commits when $9
// names their channel (see announce): the notification is made per
// queued row (LATERAL), so a duplicate, which queues nothing, sends none.
// Its payload is $16, the store's announcer, then the key.
const enqueueSQL = live + `, won AS (
	INSERT INTO %[1]srecords AS r (key, state, token, since, expires_at)
	SELECT $1, 3, NULL::bytea, now(), 'infinity'::timestamptz WHERE NOT EXISTS (SELECT FROM live)
	` + claimTakeover + `
	RETURNING r.key
), queued AS (
	INSERT INTO %[1]squeue AS q (key, method, request_uri, host, header_raw, remote_addr, tls, body, route, namespace, ttl_micros, trace_parent, accepted_at, attempts, due_at,
		order_key, order_seq, order_block)
	SELECT key, $2, $3, $4, $5, $6, $7, $8, $10, $11, $12, $13, now(), 0,
		CASE WHEN $14::text IS NOT NULL AND EXISTS (SELECT FROM %[1]squeue h
			WHERE h.order_key = $14::text AND h.order_seq IS NOT NULL AND h.key <> $1) THEN ` + waiting + ` ELSE now() END,
		$14::text, CASE WHEN $14::text IS NOT NULL THEN nextval('%[1]squeue_order_seq') END, $15 FROM won
	ON CONFLICT (key) DO UPDATE SET method = excluded.method, request_uri = excluded.request_uri,
		host = excluded.host, header = NULL, header_raw = excluded.header_raw, remote_addr = excluded.remote_addr, tls = excluded.tls,
		body = excluded.body, route = excluded.route, namespace = excluded.namespace, ttl_micros = excluded.ttl_micros,
		trace_parent = excluded.trace_parent, accepted_at = excluded.accepted_at, attempts = 0, due_at = excluded.due_at,
		lease_token = NULL, last_status = NULL, last_error = NULL, failed_at = NULL,
		order_key = excluded.order_key, order_seq = excluded.order_seq, order_block = excluded.order_block
	RETURNING q.key
)
SELECT true, ` + noRecord + ` FROM queued LEFT JOIN LATERAL (SELECT pg_notify($9, $16 || queued.key) WHERE $9::text IS NOT NULL) AS notified ON true
UNION ALL
SELECT false, * FROM live`

// An ordered event (order_key set) is given its place in its key
// (order_seq) from the sequence, and the statements that change what a
// key holds (enqueueSQL and requeueSQL, which give places, and succeedSQL,
// failSQL and forgetSQL, which take the head away) run while their
// transaction holds a lock on the key (lockOrderKeySQL, lockOrderOfSQL),
// taken by a statement of its own before them, in the same round trip (a
// batch: see Store.queryRow). So the places of one key follow the order of
// the commits (of the 202s): a place drawn without the lock could commit
// after a later one, which a Take might hand out first. And each such
// statement's snapshot, taken once the lock is held, sees everything the
// key's earlier holders committed: a lock taken inside the statement
// would come after its snapshot, and an enqueue could then see a head that
// a settle had just taken away, and wait behind it for ever. Keys whose
// hashes collide only wait for each other.
//
// Only the head of a key (its first place) is due: an event behind it
// waits (due_at is waiting, which no Take's range of due rows reaches),
// and is made due (promoteNextSQL) by the statement that takes the head
// away. So a Take reads the heads of keys, not the events queued behind
// them: with the events behind a head due as well, each Take passed over
// all of those due before another key's head, one probe each (3,000 of
// one key queued first: 6,000 rows read, 69 ms, for every Take).
const (
	lockOrderKeySQL = `SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))`
	lockOrderOfSQL  = `SELECT pg_advisory_xact_lock(hashtextextended(order_key, 0)) FROM %[1]squeue WHERE key = $1 AND order_key IS NOT NULL`
)

// waiting is the due_at of an ordered event behind the head of its key:
// never due. The admin API shows no next attempt for it, but the head it
// waits for (recordColumns).
const waiting = `'infinity'::timestamptz`

// promoteNextSQL is the step of a statement that takes the head of a key
// away, whose step mine returns the event (key), its order key, and
// whether it left its place (leaves; a dead letter that blocks its key
// keeps it): the key's next place, if it waits, is due, as of when it was
// accepted, as it was before it had to wait. The statement's snapshot
// still sees the head it takes away, hence h.key <> mine.key; a head that
// was not the first place of its key (an event that waited, forgotten)
// leaves the first one as it is.
//
// The next place is found first (next: one probe of the order index,
// which reads whether it waits), and the update joins it by key alone:
// one primary key lookup. With the test of due_at in the update, the
// planner, whose statistics took no event for waiting (a queue filled
// since its last ANALYZE), read every waiting event by the due index to
// find the one (3.5 ms a completion behind 2,500 of them, against 0.3).
const promoteNextSQL = `, next AS MATERIALIZED (
	SELECT first.key FROM mine CROSS JOIN LATERAL (SELECT h.key, h.due_at, h.failed_at FROM %[1]squeue h
		WHERE h.order_key = mine.order_key AND h.order_seq IS NOT NULL AND h.key <> mine.key
		ORDER BY h.order_seq LIMIT 1) first
	WHERE mine.leaves AND first.due_at = ` + waiting + ` AND first.failed_at IS NULL
), promoted AS (
	UPDATE %[1]squeue w SET due_at = w.accepted_at FROM next WHERE w.key = next.key AND w.key = ANY(ARRAY(SELECT key FROM next))
)`

// headOnly is the condition of a Take on the row q: no earlier place of
// its order key is held (true for a row without one), one probe of the
// order index. The events behind a head wait, so none of them is due;
// this holds back those queued before they did (by an earlier build),
// which were due at once: they cost a probe each, as they did then,
// until their keys' heads are delivered.
const headOnly = `NOT EXISTS (SELECT FROM %[1]squeue h WHERE h.order_key = q.order_key AND h.order_seq < q.order_seq)`

// takeLease leases the due deliveries its statement's first step (due)
// picked and locked to one caller: $2 is the lease's token, $3 its length.
// Each first step below picks up to $1 queued events whose time has come
// and deliveries whose lease ran out, oldest due first; SKIP LOCKED lets
// workers on every replica take at once without waiting for each other or
// taking the same row.
var takeLease = `
UPDATE %[1]squeue q SET lease_token = $2, due_at = now() + $3::bigint * interval '1 microsecond', attempts = q.attempts + 1
WHERE q.key = ANY(ARRAY(SELECT key FROM due))
RETURNING q.key, q.method, q.request_uri, q.host, q.header, q.header_raw, q.remote_addr, q.tls,
	CASE WHEN octet_length(q.body) < ` + strconv.Itoa(largeParams) + ` THEN q.body END, octet_length(q.body),
	q.route, q.namespace, q.ttl_micros, q.trace_parent, q.attempts, q.accepted_at, q.order_key IS NOT NULL`

// A body of largeParams bytes or more is not in a take statement's rows
// but read after it, in pieces of bodyPiece bytes (takeBodySQL), straight
// into a buffer of its size. pgx reads each row it is sent whole, into a
// buffer of its own rounded up to a power of two and kept in a pool for a
// while after: a 9 MiB body took a 16 MiB buffer beside its own copy, and
// up to four of them were in the pool at once, outside
// MAX_BUFFERED_BYTES, which counts the bodies of deliveries held.
const bodyPiece = 256 << 10

// takeBodySQL reads the body of the queued event $1 in pieces of $2 bytes,
// each with its place (from 1). The body is read whole once (the
// subquery's concatenation, which OFFSET 0 keeps from being merged into
// the outer query): a piece of a compressed value read from the table
// would be decompressed from its start each time (a 10 MiB body, kept
// compressed: 37 ms against 22).
const takeBodySQL = `SELECT p, substring(b.v FROM p FOR $2)
FROM (SELECT body || '\x'::bytea AS v FROM %[1]squeue WHERE key = $1 OFFSET 0) b
CROSS JOIN LATERAL generate_series(1, octet_length(b.v), $2) p`

// takeRouteSQL takes from route $4's lane, by the lane index: an index
// range of that route's due rows, which another route's backlog is not in.
// The route is matched with = ANY(ARRAY[...]), not =, for the planner:
// with =, it takes the route for a constant and the order for due_at
// alone, which the due index gives too, by reading through every route's
// due rows and filtering out the others'; it picks that index when its
// estimates make it look cheaper, whatever backlog of another route is
// due first (as it did in TestPostgresLaneTakesByIndex, for a route a
// quarter of the rows, all of them behind another's). With ANY, the order
// is route then due_at, which only the lane index gives without sorting
// all the route's due rows first.
var takeRouteSQL = `WITH due AS (
	SELECT key FROM %[1]squeue q
	WHERE failed_at IS NULL AND route = ANY(ARRAY[$4::text]) AND due_at <= now() AND ` + headOnly + `
	ORDER BY route, due_at LIMIT $1
	FOR UPDATE SKIP LOCKED
)` + takeLease

// takeRestSQL takes from the lane of every route but those in $4, and
// from every route when $4 is empty (dedup.AllRoutes). The due index
// would read through the excepted routes' due rows to reach the rest (a
// hung route's backlog on every Take), and no index range holds "every
// route but these": so the routes are walked in the lane index
// instead, one descent each (routes, a loose index scan: there are a few
// routes, and any number of events), and each route not excepted gives
// its oldest $1 due rows, by the lane index (matched as in takeRouteSQL),
// of which the oldest $1 are taken. (With no route excepted, the due
// index would give the oldest due rows at once; but the planner, whose
// statistics took the queue for empty, sorted every due row instead, on
// each Take, by a plan as cheap as the lane walk's for the rows it
// expected: TestPostgresPlansFollowTheQueue. The lane walk has no such
// plan.) Each route's rows are locked as they
// are read, up to $1 of each: those not taken are let go when the
// statement commits, and a concurrent Take, which skips them meanwhile,
// finds the next ones of each route rather than nothing.
var takeRestSQL = `WITH RECURSIVE routes (route) AS (
	(SELECT route FROM %[1]squeue WHERE failed_at IS NULL ORDER BY route LIMIT 1)
	UNION ALL
	SELECT (SELECT q.route FROM %[1]squeue q WHERE q.failed_at IS NULL AND q.route > routes.route ORDER BY q.route LIMIT 1)
	FROM routes WHERE routes.route IS NOT NULL
), due AS (
	SELECT lane.key FROM routes CROSS JOIN LATERAL (
		SELECT q.key, q.due_at FROM %[1]squeue q
		WHERE q.failed_at IS NULL AND q.route = ANY(ARRAY[routes.route]) AND q.due_at <= now() AND ` + headOnly + `
		ORDER BY q.route, q.due_at LIMIT $1
		FOR UPDATE SKIP LOCKED
	) lane
	WHERE routes.route <> ALL($4::text[])
	ORDER BY lane.due_at LIMIT $1
)` + takeLease

// extendSQL renews the lease of a delivery its holder still owns: the
// token is replaced at a takeover and cleared when the delivery is
// settled, and the row goes when the event is forgotten. As with the
// settling statements, a lease that ran out is still its holder's until
// someone takes the delivery over.
const extendSQL = `UPDATE %[1]squeue SET due_at = now() + $3::bigint * interval '1 microsecond'
WHERE key = $1 AND lease_token = $2 AND failed_at IS NULL`

// succeedSQL completes a delivery its holder still owns: the request goes,
// the record becomes a completed one, the next of its order key is due.
var succeedSQL = `WITH mine AS (
	DELETE FROM %[1]squeue WHERE key = $1 AND lease_token = $2 AND failed_at IS NULL
	RETURNING key, attempts, accepted_at, order_key, true AS leaves
)` + promoteNextSQL + `
UPDATE %[1]srecords r SET state = 2, token = $2, since = now(), expires_at = now() + $3::bigint * interval '1 microsecond',
	status = $4, fingerprint = $5, content_type = $6, body = $7, attempts = mine.attempts,
	accepted_at = mine.accepted_at, history = ` + historyAppend("$8", "$9") + `
FROM mine WHERE r.key = mine.key`

// retrySQL gives a delivery back to the queue, due at $3.
var retrySQL = `WITH mine AS (
	UPDATE %[1]squeue SET lease_token = NULL, due_at = $3, last_status = $4, last_error = $5
	WHERE key = $1 AND lease_token = $2 AND failed_at IS NULL RETURNING key
)
UPDATE %[1]srecords r SET history = ` + historyAppend("$6", "$7") + `
FROM mine WHERE r.key = mine.key`

// failSQL dead-letters a delivery: its record now expires after the
// dead-letter retention, and its request stays until then. An ordered
// event leaves its key, unless its dead letter blocks it
// (ORDER_ON_FAILURE=block): then it keeps its place, and its record is
// kept until it is requeued or forgotten (expiring would let the key go
// on unseen); otherwise the next of its key is due.
var failSQL = `WITH mine AS (
	UPDATE %[1]squeue SET lease_token = NULL, failed_at = now(), last_status = $3, last_error = $4,
		order_seq = CASE WHEN order_block THEN order_seq END
	WHERE key = $1 AND lease_token = $2 AND failed_at IS NULL RETURNING key, order_key, order_seq IS NULL AS leaves
)` + promoteNextSQL + `
UPDATE %[1]srecords r SET expires_at = CASE WHEN NOT mine.leaves THEN 'infinity' ELSE now() + $5::bigint * interval '1 microsecond' END,
	history = ` + historyAppend("$6", "$7") + `
FROM mine WHERE r.key = mine.key`

// requeueSQL puts a live dead letter back as a new first attempt (an
// ordered one that left its key at a new place at the end of it, waiting
// if the key holds another; one that kept its place keeps it, the head),
// and says what the key held: requeued, or the live record's state (NULL:
// none).
const requeueSQL = `WITH mine AS (
	UPDATE %[1]squeue q SET failed_at = NULL, attempts = 0, accepted_at = now(), lease_token = NULL,
		due_at = CASE WHEN q.order_key IS NOT NULL AND EXISTS (SELECT FROM %[1]squeue h
			WHERE h.order_key = q.order_key AND h.order_seq IS NOT NULL AND h.key <> q.key
				AND (q.order_seq IS NULL OR h.order_seq < q.order_seq)) THEN ` + waiting + ` ELSE now() END,
		order_seq = coalesce(q.order_seq, CASE WHEN q.order_key IS NOT NULL THEN nextval('%[1]squeue_order_seq') END)
	FROM %[1]srecords r
	WHERE q.key = $1 AND q.failed_at IS NOT NULL AND r.key = q.key AND r.expires_at > now()
	RETURNING q.key
), kept AS (
	UPDATE %[1]srecords r SET expires_at = 'infinity', since = now() FROM mine WHERE r.key = mine.key
)
SELECT EXISTS (SELECT FROM mine),
	EXISTS (SELECT FROM %[1]srecords WHERE key = $1 AND expires_at > now()),
	(SELECT pg_notify($2, mine.key) FROM mine) IS NOT NULL`

// forgetSQL drops an event's record, and with it its queue row (the
// foreign key's cascade): if that was the head of its order key, the next
// is due.
const forgetSQL = `WITH mine AS (
	SELECT key, order_key, true AS leaves FROM %[1]squeue WHERE key = $1 AND order_seq IS NOT NULL
)` + promoteNextSQL + `
DELETE FROM %[1]srecords WHERE key = $1 RETURNING expires_at > now()`

// deadLettersSQL lists live dead letters in key order, after the cursor.
const deadLettersSQL = `SELECT q.key, q.attempts, q.last_status, q.last_error, q.failed_at
FROM %[1]squeue q JOIN %[1]srecords r ON r.key = q.key
WHERE q.failed_at IS NOT NULL AND q.key > $1 AND r.expires_at > now()
ORDER BY q.key LIMIT $2`

// statsSQL counts what waits (not what is being delivered) and its oldest
// age, a row a route, then the live dead letters, a row a route. Each
// part reads the queue by the partial index of its rows (failed_at IS
// NULL, IS NOT NULL), never the table whole: every delivered event leaves
// dead row versions behind until a vacuum, which autovacuum's default
// pace gets to once a minute, and a scan of the table read all of them on
// every read of the depth, once a second (40 ms of the shared core after
// 12 s of intake, growing until the vacuum: docs/performance.md). An
// index's entries of rows found dead are marked so (and the Takes walk
// the lane index too), so that the next read steps over them. Only a dead
// letter's record is read, by its key (a probe fenced as the shared
// statements' are, see group.go): joined to every queue row, the records
// were read whole, every completed one the table keeps for its TTL.
const statsSQL = `SELECT q.route,
	count(*) FILTER (WHERE q.lease_token IS NULL OR q.due_at <= now()),
	coalesce(extract(epoch FROM now() - min(q.accepted_at) FILTER (WHERE q.lease_token IS NULL OR q.due_at <= now())) * 1000000, 0)::bigint,
	0
FROM %[1]squeue q WHERE q.failed_at IS NULL GROUP BY q.route
UNION ALL
SELECT q.route, 0, 0, count(*) FILTER (WHERE dead.live)
FROM %[1]squeue q LEFT JOIN LATERAL (
	SELECT true AS live FROM %[1]srecords r
	WHERE r.key = q.key AND (r.expires_at > now()) IS TRUE LIMIT 1) dead ON true
WHERE q.failed_at IS NOT NULL GROUP BY q.route`

// Enqueue claims key and stores req for delivery in one statement (one
// commit), shared with the enqueues waiting at the same time unless req
// is ordered (enqueue_group.go). If the key was free it returns true; otherwise false and the
// record that holds the key, and stores nothing. maxDepth is checked
// against the depth this process reckons (depthView): exact for what this
// process does, and as of its last read of the depth for what the other
// replicas sharing the tables do.
func (s *Store) Enqueue(ctx context.Context, key string, req dedup.Request, maxDepth int) (bool, dedup.Record, error) {
	if err := ctx.Err(); err != nil {
		return false, dedup.Record{}, fmt.Errorf("dedup: enqueue %s: %w", key, err)
	}
	header := codec.AppendHeader(nil, req.Header)
	body := req.Body
	if body == nil {
		body = []byte{}
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.owner.Checked(ctx); err != nil {
		return false, dedup.Record{}, fmt.Errorf("dedup: enqueue %s: %w", key, err)
	}
	admitted, err := s.admit(ctx, maxDepth)
	if err != nil {
		return false, dedup.Record{}, fmt.Errorf("dedup: enqueue %s: reading the queue's depth: %w", key, err)
	}
	if !admitted {
		return s.refused(ctx, key)
	}
	var won bool
	var rec dedup.Record
	if okey := orderKey(req); okey != nil {
		var channel *string // NULL: no notification
		if s.announce(time.Now()) {
			channel = &s.sql.notify
		}
		args := []any{key, req.Method, req.RequestURI, req.Host, header,
			req.RemoteAddr, req.TLS, body, channel, req.Route, req.Namespace, micros(max(req.TTL, 0)), req.TraceParent,
			okey, req.OrderBlock, s.announcer}
		err = s.sending(ctx, args, func(q querier) error {
			won, rec, err = s.claimOnce(ctx, q, s.sql.lockOrderKey, okey, s.sql.enqueue, args...)
			return err
		})
	} else if len(body) >= largeParams {
		// A large body goes in a statement of its own, sent from here:
		// nothing is saved by sharing a statement the body's bytes
		// dominate, and the call needs no copy of the body (see
		// newEnqueueCall), whose caller is here until it is sent.
		won, rec, err = s.enqueueAlone(&enqueueCall{ctx: ctx, key: key, req: &req, header: header, body: body})
	} else {
		won, rec, err = s.enqueueGrouped(newEnqueueCall(ctx, key, req, header, body))
	}
	s.depth.answered(won || err != nil)
	if err != nil {
		return false, dedup.Record{}, fmt.Errorf("dedup: enqueue %s: %w", key, err)
	}
	return won, rec, nil
}

// orderKey is the order_key column of req: NULL without one.
func orderKey(req dedup.Request) *string {
	if req.OrderKey == "" {
		return nil
	}
	return &req.OrderKey
}

// announceEvery is how often at most this process's enqueues notify the
// listeners (Notify). A notification costs every enqueue that sends one:
// PostgreSQL commits the transactions that notify one at a time, under a
// lock of its own, and wakes every listener. Sent with each enqueue, they
// took about 40% of the accept rate of a saturating intake (772–874
// events/s against 1,282–1,478 without, docs/performance.md). The first
// enqueue of each announceEvery still notifies, and the listeners' Take
// finds what was queued since; this process's own workers are woken by
// the proxy, and every worker polls anyway.
const announceEvery = 10 * time.Millisecond

// newAnnouncer is a store's announcer: a random token in hex, then a
// slash.
func newAnnouncer() string {
	tok := codec.NewToken()
	return hex.EncodeToString(tok[:]) + "/"
}

// announce reports whether an enqueue at now notifies the listeners: the
// first one since announceEvery.
func (s *Store) announce(now time.Time) bool {
	last := s.announced.Load()
	return now.UnixNano()-last >= int64(announceEvery) && s.announced.CompareAndSwap(last, now.UnixNano())
}

// Take leases up to n due deliveries of lane to the caller for lease.
//
// The lease commits only once its rows are in hand: the statement runs in
// a transaction of its own (BEGIN goes in the same round trip), committed
// once its answer is read. Committed with the statement, as a statement
// of its own is, a Take whose caller stopped waiting (Timeout on a loaded
// database, or a shutdown) while the database was still at it leased its
// rows all the same once the statement ended (pgx's cancel request came
// too late, or not at all): to no one, until the lease ran out (LEASE_TTL,
// 45s by default), with every event of their order keys waiting behind
// them. Now the connection is closed unanswered, and the transaction is
// rolled back; and a COMMIT sent whose answer does not come hands the
// deliveries out (commitFailed).
func (s *Store) Take(ctx context.Context, lane dedup.Lane, n int, lease time.Duration) ([]dedup.Delivery, error) {
	if take, err := storeop.CheckTake(ctx, n, lease); !take {
		return nil, err
	}
	bctx, cancel := s.bound(ctx)
	defer cancel()
	epoch := s.depth.takeBegins()
	tok := codec.NewToken()
	// A nil Except would go as NULL, which no route is unequal to.
	sql, args := s.sql.takeRest, []any{n, tok[:], micros(lease), append([]string{}, lane.Except...)}
	if !lane.Rest {
		sql, args[3] = s.sql.takeRoute, lane.Route
	}
	conn, err := s.pool.Acquire(bctx)
	if err != nil {
		return nil, fmt.Errorf("dedup: take: %w", err)
	}
	// Released in its transaction (an error before COMMIT), a connection
	// is closed, which rolls the transaction back.
	defer conn.Release()
	taken, err := takeRows(bctx, conn.Conn(), sql, args)
	if err == nil {
		err = s.readLargeBodies(bctx, conn.Conn(), taken)
	}
	if err != nil {
		return nil, fmt.Errorf("dedup: take: %w", err)
	}
	// The rows are in hand: the COMMIT has a bound of its own, whatever
	// the statement took of the first, and is not cut short by the
	// caller (a shutdown), which would lose what was taken.
	cctx, cancelCommit := s.bound(context.WithoutCancel(ctx))
	defer cancelCommit()
	if _, err := conn.Exec(cctx, "COMMIT"); commitFailed(err) {
		return nil, fmt.Errorf("dedup: take: committing the leases: %w", err)
	}
	token := hex.EncodeToString(tok[:])
	out := make([]dedup.Delivery, 0, len(taken))
	for _, row := range taken {
		if row.ordered {
			s.handedOrdered.Store(true)
		}
		d := row.d
		r := &d.Request
		if err := readHeader(r, row.header, row.headerRaw); err != nil {
			return nil, fmt.Errorf("dedup: take %s: header: %w", d.Claim.Key, err)
		}
		if len(r.Header) == 0 {
			r.Header = http.Header(nil)
		}
		if len(r.Body) == 0 {
			r.Body = nil
		}
		d.Claim.Token = token
		out = append(out, d)
	}
	s.depth.took(epoch, len(out))
	return out, nil
}

// commitFailed reports whether err, a COMMIT's, says it did not commit:
// the database refused it, or it was never sent (the connection closed
// meanwhile rolls the transaction back). A COMMIT sent and not answered
// within its bound most likely committed (a database slow to write its
// WAL, as the bench's was, now and then, for over a second, on a machine
// whose other work kept its disk busy): its deliveries are handed out. Were
// their lease not committed after all, this process's next Take finds them
// due, and a worker holding one adopts the new lease for its outcome
// (delivery's holding), rather than deliver them again a LEASE_TTL later.
func commitFailed(err error) bool {
	var pgErr *pgconn.PgError
	return err != nil && (errors.As(err, &pgErr) || pgconn.SafeToRetry(err))
}

// takenRow is a row of a take statement, its header not yet decoded.
type takenRow struct {
	d                 dedup.Delivery
	header, headerRaw []byte
	// bodyLen is the body's length: the body is not in the row when it
	// is large (readLargeBodies).
	bodyLen int64
	// ordered: the event has an order key (which Take does not hand out).
	ordered bool
}

// takeRows opens a transaction on conn and runs the take statement sql in
// it, in one round trip, and reads its rows; the transaction is left open
// for the caller to commit.
func takeRows(ctx context.Context, conn *pgx.Conn, sql string, args []any) ([]takenRow, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(sql, args...)
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	var out []takenRow
	for rows.Next() {
		var row takenRow
		r := &row.d.Request
		var ttlMicros int64
		if err := rows.Scan(&row.d.Claim.Key, &r.Method, &r.RequestURI, &r.Host, &row.header, &row.headerRaw, &r.RemoteAddr, &r.TLS, &r.Body, &row.bodyLen,
			&r.Route, &r.Namespace, &ttlMicros, &r.TraceParent, &row.d.Attempt, &row.d.AcceptedAt, &row.ordered); err != nil {
			rows.Close()
			return nil, err
		}
		r.TTL = time.Duration(ttlMicros) * time.Microsecond
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, br.Close()
}

// readLargeBodies reads the bodies the take statement left out of taken
// (largeParams and over) on conn, in its transaction, piece by piece into
// a buffer of each one's size.
func (s *Store) readLargeBodies(ctx context.Context, conn *pgx.Conn, taken []takenRow) error {
	for i := range taken {
		row := &taken[i]
		if row.bodyLen < largeParams {
			continue
		}
		body, err := readBody(ctx, conn, s.sql.takeBody, row.d.Claim.Key, row.bodyLen)
		if err != nil {
			return fmt.Errorf("%s: reading its body: %w", row.d.Claim.Key, err)
		}
		row.d.Request.Body = body
	}
	return nil
}

// readBody reads the size bytes of key's body by takeBodySQL (sql).
func readBody(ctx context.Context, conn *pgx.Conn, sql, key string, size int64) ([]byte, error) {
	body := make([]byte, size)
	rows, err := conn.Query(ctx, sql, key, bodyPiece)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var read int64
	for rows.Next() {
		var at int64
		if err := rows.Scan(&at, nil); err != nil {
			return nil, err
		}
		piece := rows.RawValues()[1]
		if at < 1 || at-1+int64(len(piece)) > size {
			return nil, fmt.Errorf("a piece of %d bytes at %d, past the body's %d", len(piece), at, size)
		}
		read += int64(copy(body[at-1:], piece))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if read != size {
		return nil, fmt.Errorf("read %d bytes of the body's %d", read, size)
	}
	return body, nil
}

// settle runs one token-checked statement on d's queue row (see owned),
// after lock. Each statement changes nothing once its first attempt
// committed (the token no longer matches), so a retry whose first answer
// was lost reports ErrNotOwner.
func (s *Store) settle(ctx context.Context, op string, d dedup.Delivery, lock, sql string, args ...any) error {
	return s.owned(ctx, op, d.Claim.Key, d.Claim.Token, lock, sql, args...)
}

// Extend renews d's lease for lease from now. ErrNotOwner once d is no
// longer its holder's. Retried as the settling calls are (see owned): a
// repeat whose first answer was lost renews the lease again, from later.
func (s *Store) Extend(ctx context.Context, d dedup.Delivery, lease time.Duration) error {
	if _, err := storeop.CheckExtend(ctx, d, lease); err != nil {
		return err
	}
	return s.settle(ctx, "extend", d, "", s.sql.extend, micros(lease))
}

// Succeed completes d's event with res, kept for ttl, and drops its
// request: in a statement shared with the Succeed calls waiting at the
// same time (succeed_group.go), or alone.
func (s *Store) Succeed(ctx context.Context, d dedup.Delivery, res dedup.Result, ttl time.Duration) error {
	if err := storeop.CheckDuration("ttl", ttl); err != nil {
		return fmt.Errorf("dedup: succeed %s: %w", d.Claim.Key, err)
	}
	if err := codec.CheckResult(res); err != nil {
		return fmt.Errorf("dedup: succeed %s: %w", d.Claim.Key, err)
	}
	if tok, ok := codec.ParseToken(d.Claim.Token); ok && ctx.Err() == nil {
		gctx, cancel := s.bound(ctx)
		done, err := s.succeedGrouped(newSucceedCall(gctx, d, tok, res, ttl))
		cancel()
		if done {
			return nil
		}
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("dedup: succeed %s: %w", d.Claim.Key, err)
		}
	}
	// Not completed by a shared statement (see succeed_group.go): alone.
	status, fp, ct, body := resultColumns(res)
	err := s.settle(ctx, "succeed", d, s.sql.lockOrderOf, s.sql.succeed, micros(ttl), status, fp, ct, body, attemptJSON(d, res.Status, ""), dedup.HistoryLen)
	if errors.Is(err, dedup.ErrNotOwner) && s.succeeded(ctx, d) {
		return nil // done already: a repeat whose first answer was lost
	}
	return err
}

// succeeded reports whether d's own Succeed completed its event: the
// completed record keeps the token that completed it.
func (s *Store) succeeded(ctx context.Context, d dedup.Delivery) bool {
	tok, ok := codec.ParseToken(d.Claim.Token)
	if !ok {
		return false
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var done bool
	err := s.pool.QueryRow(ctx, s.sql.succeeded, d.Claim.Key, tok[:]).Scan(&done)
	return err == nil && done
}

// Retry gives d back to the queue, due again at next.
func (s *Store) Retry(ctx context.Context, d dedup.Delivery, next time.Time, status int, reason string) error {
	err := s.settle(ctx, "retry", d, "", s.sql.retry, next, nullStatus(status), reason, attemptJSON(d, status, reason), dedup.HistoryLen)
	if !errors.Is(err, dedup.ErrNotOwner) {
		s.depth.raise() // it waits again, or may (an answer lost)
	}
	return err
}

// Fail dead-letters d's event, kept with its request for keep.
func (s *Store) Fail(ctx context.Context, d dedup.Delivery, status int, reason string, keep time.Duration) error {
	if err := storeop.CheckDuration("keep", keep); err != nil {
		return fmt.Errorf("dedup: fail %s: %w", d.Claim.Key, err)
	}
	return s.settle(ctx, "fail", d, s.sql.lockOrderOf, s.sql.fail, nullStatus(status), reason, micros(keep), attemptJSON(d, status, reason), dedup.HistoryLen)
}

// nullStatus is a status as the queue keeps it: NULL when no answer came.
func nullStatus(status int) *int32 {
	if status == 0 {
		return nil
	}
	n := int32(status)
	return &n
}

// Requeue puts a dead-lettered event back in the queue as a new first
// attempt. ErrNotFound if unknown, ErrNotFailed if not dead-lettered.
func (s *Store) Requeue(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: requeue %s: %w", key, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var requeued, exists, notified bool
	if err := s.queryRow(ctx, s.pool, s.sql.lockOrderOf, key, s.sql.requeue, []any{key, s.sql.notify}, &requeued, &exists, &notified); err != nil {
		s.depth.raise() // it may wait again (an answer lost)
		return fmt.Errorf("dedup: requeue %s: %w", key, err)
	}
	switch {
	case requeued:
		s.depth.raise()
		return nil
	case exists:
		return fmt.Errorf("dedup: requeue %s: %w", key, dedup.ErrNotFailed)
	default:
		return fmt.Errorf("dedup: requeue %s: %w", key, dedup.ErrNotFound)
	}
}

// DeadLetters lists up to limit failed events in key order from cursor.
func (s *Store) DeadLetters(ctx context.Context, cursor string, limit int) ([]dedup.DeadLetter, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", fmt.Errorf("dedup: dead letters: %w", err)
	}
	after, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return nil, "", fmt.Errorf("%w %q", dedup.ErrBadCursor, cursor)
	}
	if limit <= 0 {
		return nil, "", nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	// One more than asked says whether there is a next page.
	rows, err := s.pool.Query(ctx, s.sql.deadLetters, string(after), limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("dedup: dead letters: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (dedup.DeadLetter, error) {
		var dl dedup.DeadLetter
		var status *int32
		var reason *string
		err := row.Scan(&dl.Key, &dl.Attempts, &status, &reason, &dl.FailedAt)
		if status != nil {
			dl.LastStatus = int(*status)
		}
		if reason != nil {
			dl.LastError = *reason
		}
		return dl, err
	})
	if err != nil {
		return nil, "", fmt.Errorf("dedup: dead letters: %w", err)
	}
	if len(list) <= limit {
		return list, "", nil
	}
	list = list[:limit]
	return list, base64.RawURLEncoding.EncodeToString([]byte(list[limit-1].Key)), nil
}

// Stats reports the queue's depth, its oldest event's age, the number of
// dead letters and each route's depth, in one scan grouped by route; the
// depth is the depth view's new start.
func (s *Store) Stats(ctx context.Context) (dedup.QueueStats, error) {
	if err := ctx.Err(); err != nil {
		return dedup.QueueStats{}, fmt.Errorf("dedup: queue stats: %w", err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var st dedup.QueueStats
	read := s.depth.beginRead(time.Now())
	rows, err := s.pool.Query(ctx, s.sql.stats)
	if err != nil {
		return dedup.QueueStats{}, fmt.Errorf("dedup: queue stats: %w", err)
	}
	// A route's waiting events and its dead letters come in rows of
	// their own.
	var route string
	var depth, dead int
	var oldest int64
	_, err = pgx.ForEachRow(rows, []any{&route, &depth, &oldest, &dead}, func() error {
		st.Depth += depth
		st.DeadLetters += dead
		st.OldestAge = max(st.OldestAge, time.Duration(oldest)*time.Microsecond)
		if depth > 0 {
			if st.Routes == nil {
				st.Routes = map[string]int{}
			}
			st.Routes[route] = depth
		}
		return nil
	})
	if err != nil {
		return dedup.QueueStats{}, fmt.Errorf("dedup: queue stats: %w", err)
	}
	// Every read is the depth view's too: the delivery Backlog's, every
	// second, keeps it fresh.
	s.depth.endRead(read, st.Depth, time.Now())
	return st, nil
}

// Notify returns a channel that receives (without blocking the sender:
// several events may make one signal) when an event is queued or
// requeued, by this process or any other sharing the tables, so that
// delivery workers wait on it and on a timer rather than poll often. It
// listens (LISTEN) on a connection of its own from the first call until
// Close, and connects again after the database was lost, signalling once
// it is back (what was queued meanwhile was not heard). Optional: Take
// finds every due event without it.
func (s *Store) Notify() <-chan struct{} {
	s.notifyOnce.Do(func() {
		s.notify = make(chan struct{}, 1)
		s.done.Go(func() { s.listen(s.background) })
	})
	return s.notify
}

// listen keeps a LISTEN connection until ctx ends.
func (s *Store) listen(ctx context.Context) {
	pause := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !storeop.Sleep(ctx, pause) {
				return
			}
			pause = min(2*pause, 5*time.Second)
		}
	}
}

// listenOnce listens on one connection until it fails or ctx ends.
func (s *Store) listenOnce(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A listening connection is never handed back: it would keep
	// receiving notifications for whoever got it next.
	pc := conn.Hijack()
	defer pc.Close(context.WithoutCancel(ctx))
	if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{s.sql.notify}.Sanitize()); err != nil {
		return err
	}
	s.signal() // anything queued while no one listened
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		if s.heardFromElsewhere(n.Payload) {
			s.signal()
		}
	}
}

// heardFromElsewhere reports whether a notification whose payload is
// payload came from elsewhere than this process's enqueues: another
// process's, or a requeue (whose payload is the bare key). This
// process's own enqueues wake their lanes themselves (the proxy's
// Enqueued); heard back, each woke every lane, which took nothing from
// all but one: an empty Take of each other lane at every announcement
// (announceEvery): 60 a second beside one busy route, measured.
func (s *Store) heardFromElsewhere(payload string) bool {
	return !strings.HasPrefix(payload, s.announcer)
}

func (s *Store) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// readHeader sets r's header from its columns: header_raw, the request
// codec's bytes, or for an event queued before it existed, header's JSON.
func readHeader(r *dedup.Request, header, headerRaw []byte) error {
	if headerRaw != nil {
		dec := codec.Decoder{Rest: headerRaw}
		r.Header = dec.Header()
		if dec.Err == nil && len(dec.Rest) > 0 {
			dec.Err = errors.New("trailing bytes")
		}
		return dec.Err
	}
	return json.Unmarshal(header, &r.Header)
}
