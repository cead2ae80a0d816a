package pgstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/storeop"
	"github.com/webhook-dedup/webhook-dedup/dedup/pgstore/pgname"
)

// Config says how to reach PostgreSQL and how to keep the tables.
type Config struct {
	// URL is a postgres:// (or postgresql://) URL or a key=value
	// connection string, as pgxpool reads it: its pool_max_conns and
	// other pool_* options apply.
	URL string
	// TablePrefix starts the tables' names (pgname.CheckPrefix). Empty:
	// "webhook_dedup_".
	TablePrefix string
	// Timeout bounds each operation, and opening a connection unless the
	// URL sets connect_timeout. Zero: 1s.
	Timeout time.Duration
	// PruneInterval is how often expired rows are deleted. Zero: never
	// (the caller prunes, or the tables grow).
	PruneInterval time.Duration
	// PruneBatch is how many rows one pruning statement deletes at most.
	// Zero: 1000.
	PruneBatch int
	// Pruned, if set, is told how many expired rows each pruning round
	// deleted (a metric). Nil: nobody.
	Pruned func(rows int)
	// AppName, if not empty, is the identity of the deployment whose
	// records these are: the store makes it the owner of KeyPrefix if it
	// has none, and refuses claims, lookups and pings (ErrPrefixOwned)
	// while another app owns it. Empty: no check.
	AppName, KeyPrefix string
	// AutoMigrate creates the tables at open when they are missing
	// (Migrate); if the database cannot be reached then, it tries again
	// every second in the background until it succeeds.
	AutoMigrate bool
	// Failed, if set, is told why a background task ("migrate" or
	// "prune") failed (a log line); each tries again later by itself. It
	// is told once per change, not at every attempt: again when the task
	// fails otherwise (a *ConnectError's server or reason changed, or
	// another error), and Recovered once it succeeds. Nil: nobody is told.
	Failed func(task string, err error)
	// Recovered, if set, is told that a task Failed was told of has
	// succeeded since. Nil: nobody is told.
	Recovered func(task string)
}

// Store is a store kept in PostgreSQL: one row per event ID in a table
// whose primary key is what makes a claim unique, and, for async events,
// one row per queued request beside it. Times are the database's clock
// (now()): every replica sharing the tables agrees on when a lease or a
// record expires, whatever its own clock says. It is safe for concurrent
// use.
type Store struct {
	pool    *pgxpool.Pool
	prefix  string
	sql     statements
	timeout time.Duration

	batch  int
	pruned func(int)
	// reports tells Failed and Recovered of the background tasks.
	reports *reporter
	stop    context.CancelFunc
	done    sync.WaitGroup

	keyPrefix string
	// owner checks that the key prefix is this app's (see CheckOwner).
	owner storeop.Owner

	// depth is this process's reckoning of the queue's depth, for
	// Enqueue's bound; reading holds Enqueue's own reads of it to one at
	// a time.
	depth   depthView
	reading sync.Mutex
	// enqueues gathers the enqueues waiting for a shared statement
	// (enqueue_group.go).
	enqueues group[*enqueueCall]
	// succeeds gathers the completions of deliveries waiting for a
	// shared statement (succeed_group.go).
	succeeds group[*succeedCall]
	// handedOrdered is set once a Take of this process has handed out an
	// ordered event (one with an order key): until then, no completion
	// this process makes can be of one, and its shared statements need
	// no order key's lock (see commitSucceeds).
	handedOrdered atomic.Bool

	notifyOnce sync.Once
	notify     chan struct{}
	// announced is when this process's enqueues last notified the
	// listeners (UnixNano; 0: never): at most once per announceEvery.
	announced atomic.Int64
	// announcer begins the payload of each notification of this store's
	// enqueues (random hex and a slash), by which its own listener knows
	// them (heardFromElsewhere).
	announcer string
	// background lives until Close: the pruner's, the migration's and
	// the listener's.
	background context.Context
}

// The defaults of what PostgresConfig leaves unset.
const (
	DefaultTablePrefix = "webhook_dedup_"
	defaultPGTimeout   = time.Second
	// migrateEvery is how often a migration that failed is tried again.
	migrateEvery      = time.Second
	defaultPruneBatch = 1000
	// defaultPGConns is the pool's size unless the URL says
	// pool_max_conns: pgxpool's own default (4 on a small machine) would
	// queue a burst of webhooks behind four round trips.
	defaultPGConns = 16
)

// Open returns a store for cfg. An unreachable database is an
// error of each operation (and of Ping), not of OpenPostgres, which fails
// only on a configuration it cannot use; with AutoMigrate it tries once
// to create the tables before it returns (within Timeout), then in the
// background. Close stops the background work and closes the pool.
func Open(cfg Config) (*Store, error) {
	if cfg.URL == "" {
		return nil, errors.New("dedup: no PostgreSQL URL")
	}
	if cfg.TablePrefix == "" {
		cfg.TablePrefix = DefaultTablePrefix
	}
	if err := pgname.CheckPrefix(cfg.TablePrefix); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = defaultPGTimeout
	}
	if cfg.PruneBatch == 0 {
		cfg.PruneBatch = defaultPruneBatch
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// pgx's message quotes the URL, password and all.
		return nil, fmt.Errorf("dedup: PostgreSQL URL %s does not parse", redactPGURL(cfg.URL))
	}
	if !hasOption(cfg.URL, "pool_max_conns") {
		pc.MaxConns = defaultPGConns
	}
	if !hasOption(cfg.URL, "plan_cache_mode") {
		pc.AfterConnect = probeSession
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = cfg.Timeout
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("dedup: PostgreSQL: %w", err)
	}
	s := &Store{
		pool: pool, prefix: cfg.TablePrefix, sql: newStatements(cfg.TablePrefix), timeout: cfg.Timeout,
		batch: cfg.PruneBatch, pruned: cfg.Pruned,
		reports:   &reporter{failed: cfg.Failed, recovered: cfg.Recovered, last: map[string]string{}},
		keyPrefix: cfg.KeyPrefix,
		announcer: newAnnouncer(),
	}
	s.owner = storeop.Owner{App: cfg.AppName, Where: fmt.Sprintf("%q in %sowners", cfg.KeyPrefix, cfg.TablePrefix), Read: func(ctx context.Context) (string, error) {
		return s.readOwner(ctx, cfg.AppName)
	}}
	if s.reports.failed == nil {
		s.reports.failed = func(string, error) {}
	}
	if s.reports.recovered == nil {
		s.reports.recovered = func(string) {}
	}
	var ctx context.Context
	ctx, s.stop = context.WithCancel(context.Background())
	s.background = ctx
	if cfg.AutoMigrate {
		if err := s.Migrate(ctx); err != nil {
			s.reports.report("migrate", err)
			s.done.Go(func() { s.migrateUntilDone(ctx) })
		}
	}
	if cfg.PruneInterval > 0 {
		s.done.Go(func() { s.pruneEvery(ctx, cfg.PruneInterval) })
	}
	return s, nil
}

// probeSettings are how each connection of the store's pool has
// PostgreSQL plan the store's statements: by one plan per statement and
// connection, made at its first run (a generic plan), with no sequential,
// bitmap or index-only scan. Planned on each run instead, the statements
// each webhook meets spent as long being planned as being run (0.27–0.38
// ms of each, pg_stat_statements); but a generic plan is made for no
// parameter values and the statistics of its moment, as for an empty
// queue, which makes any scan of a table look free: left to choose, such
// a plan read the whole queue on each Take, once for every due row, and
// delivery fell to a fifth of intake. With those scans off, each table is
// read by key or in a lane index's order, which is what the statements
// are written for (each names its tables' rows by key, by key = ANY(...)
// of the keys it handles where the planner may put the table on the outer
// side of a join), whatever the statistics say:
// TestPostgresPlansFollowTheQueue runs each after a burst that came once
// its plan was made. Index-only scans are off because the rest lane's walk
// of the routes, by one, waded through the index entries of delivered
// events not yet vacuumed on each Take (13.9 ms a Take, against 0.12 by an
// index scan, which marks them dead as it passes). A statement with no
// index to use (counting the queue for its stats) still scans. See
// docs/performance.md, "A generic plan". JIT compilation is off: the
// scan's penalty makes such a statement's estimate pass every JIT
// threshold, and compiling it (inlined and optimized, on a core the proxy
// shares) took longer than the statement's bound, on each run of it.
// Each of the store's statements reads a few rows; none gains by it.
const probeSettings = `SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off;
SET enable_bitmapscan = off; SET enable_indexonlyscan = off; SET jit = off`

// probeSession applies probeSettings to conn, a new connection of the
// pool.
func probeSession(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, probeSettings); err != nil {
		return fmt.Errorf("dedup: PostgreSQL: setting how statements are planned (PostgreSQL 12 or later): %w", err)
	}
	return nil
}

// hasOption reports whether a URL or key=value connection string sets
// option.
func hasOption(conn, option string) bool {
	if u, err := url.Parse(conn); err == nil && u.Scheme != "" {
		return u.Query().Has(option)
	}
	cfg, err := pgconn.ParseConfig(conn)
	if err != nil {
		return false
	}
	_, ok := cfg.RuntimeParams[option]
	return ok
}

// redactPGURL is a URL fit for a message: its password replaced.
func redactPGURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return "(a connection string)"
}

// Close stops the pruner and the listener, and closes the pool.
func (s *Store) Close() error {
	s.stop()
	s.done.Wait()
	s.pool.Close()
	return nil
}

// bound limits ctx to the store's operation timeout.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// claimAttempts bounds how often Claim asks again when its statement's
// snapshot missed the concurrent claim that beat it: once is enough, as
// the next statement's snapshot sees that claim committed.
const claimAttempts = 5

// Claim takes key for lease if no live record holds it, in one statement.
// If the key is free (or its record expired) it returns the new Claim and
// a Record in state Absent; otherwise a zero Claim and the record that
// holds the key.
func (s *Store) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error) {
	if err := storeop.CheckClaim(ctx, key, lease); err != nil {
		return dedup.Claim{}, dedup.Record{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.owner.Checked(ctx); err != nil {
		return dedup.Claim{}, dedup.Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	tok := codec.NewToken()
	won, rec, err := s.claimOnce(ctx, s.pool, "", nil, s.sql.claim, key, tok[:], micros(lease))
	if err != nil {
		return dedup.Claim{}, dedup.Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	if won {
		return dedup.Claim{Key: key, Token: hex.EncodeToString(tok[:])}, dedup.Record{State: dedup.Absent}, nil
	}
	return dedup.Claim{}, rec, nil
}

// claimOnce runs a claiming statement (a claim or an enqueue), after lock
// (see queryRow), until it answers with a row: won, or the record in the
// way.
func (s *Store) claimOnce(ctx context.Context, q querier, lock string, lockArg any, sql string, args ...any) (bool, dedup.Record, error) {
	for range claimAttempts {
		var won bool
		var rec pgRecord
		err := s.queryRow(ctx, q, lock, lockArg, sql, args, append([]any{&won}, rec.targets()...)...)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return false, dedup.Record{}, err
		}
		if won {
			return true, dedup.Record{}, nil
		}
		return false, rec.record(), nil
	}
	return false, dedup.Record{}, errNoAnswer
}

// errNoAnswer is a claiming statement's failure to answer for its key
// claimAttempts times in a row.
var errNoAnswer = fmt.Errorf("no answer after %d attempts: the key changes hands too fast", claimAttempts)

// queryRow runs sql and scans its one row into dest (pgx.ErrNoRows if
// none). Unless lock is empty, lock runs first, with lockArg, in the same
// transaction: one of the order key locks (see lockOrderKeySQL), held
// until sql commits and taken before sql's snapshot. Both go in one round
// trip: a batch runs as one implicit transaction, each statement with a
// snapshot of its own.
func (s *Store) queryRow(ctx context.Context, q querier, lock string, lockArg any, sql string, args []any, dest ...any) error {
	if lock == "" {
		return q.QueryRow(ctx, sql, args...).Scan(dest...)
	}
	br := q.SendBatch(ctx, lockThen(lock, lockArg, sql, args))
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(dest...)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// exec runs sql as queryRow does, for its command tag.
func (s *Store) exec(ctx context.Context, q querier, lock string, lockArg any, sql string, args ...any) (pgconn.CommandTag, error) {
	if lock == "" {
		return q.Exec(ctx, sql, args...)
	}
	br := q.SendBatch(ctx, lockThen(lock, lockArg, sql, args))
	_, err := br.Exec()
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// lockThen is the batch of lock, then sql.
func lockThen(lock string, lockArg any, sql string, args []any) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(lock, lockArg)
	b.Queue(sql, args...)
	return b
}

// Complete replaces c's in-flight record with a completed one holding res,
// kept for ttl. If c no longer owns its key it returns ErrNotOwner and
// changes nothing.
//
// The upstream has acted by now, and a record lost here lets a later
// duplicate through, so Complete retries for a few seconds (within ctx) a
// write that failed for a reason that passes (a lost connection, a
// database restarting); the statement accepts its own result again if an
// earlier attempt committed but its answer was lost.
func (s *Store) Complete(ctx context.Context, c dedup.Claim, res dedup.Result, ttl time.Duration) error {
	if _, err := storeop.CheckComplete(ctx, c, res, ttl); err != nil {
		return err
	}
	status, fp, ct, body := resultColumns(res)
	return s.owned(ctx, "complete", c.Key, c.Token, "", s.sql.complete, micros(ttl), status, fp, ct, body)
}

// owned runs a statement that changes key's row only for the owner of
// token (its first two parameters are the key and the token; args follow),
// after lock with the key (see queryRow; empty: none): ErrNotOwner unless
// it changed exactly one row. The upstream has acted by now, so a write
// that failed for a reason that passes is retried (see retry).
func (s *Store) owned(ctx context.Context, op, key, token, lock, sql string, args ...any) error {
	tok, err := storeop.CheckOwned(ctx, op, key, token)
	if err != nil {
		return err
	}
	args = append([]any{key, tok[:]}, args...)
	err = storeop.Retry(ctx, pgTransient, func(ctx context.Context) error {
		ctx, cancel := s.bound(ctx)
		defer cancel()
		return s.sending(ctx, args, func(q querier) error {
			tag, err := s.exec(ctx, q, lock, key, sql, args...)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return dedup.ErrNotOwner
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("dedup: %s %s: %w", op, key, err)
	}
	return nil
}

// resultColumns are res as the records table keeps it: NULL for an unknown
// fingerprint and for what is not replayed, and, as on Redis, only the
// fingerprint's first FingerprintPrefixLen bytes unless the whole one is
// asked for.
func resultColumns(res dedup.Result) (status int32, fingerprint []byte, contentType *string, body []byte) {
	switch {
	case res.Fingerprint == ([32]byte{}):
	case res.FullFingerprint:
		fingerprint = res.Fingerprint[:]
	default:
		fingerprint = res.Fingerprint[:dedup.FingerprintPrefixLen]
	}
	if res.ContentType != "" {
		contentType = &res.ContentType
	}
	if len(res.Body) > 0 {
		body = res.Body
	}
	return int32(res.Status), fingerprint, contentType, body
}

// Release deletes c's in-flight record so the event can be claimed again.
// If c no longer owns its key it returns ErrNotOwner and changes nothing.
func (s *Store) Release(ctx context.Context, c dedup.Claim) error {
	tok, err := storeop.CheckOwned(ctx, "release", c.Key, c.Token)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tag, err := s.pool.Exec(ctx, s.sql.release, c.Key, tok[:])
	if err != nil {
		return fmt.Errorf("dedup: release %s: %w", c.Key, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("dedup: release %s: %w", c.Key, dedup.ErrNotOwner)
	}
	return nil
}

// Lookup returns the live record for key, or ErrNotFound.
func (s *Store) Lookup(ctx context.Context, key string) (dedup.Record, error) {
	if err := ctx.Err(); err != nil {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.owner.Checked(ctx); err != nil {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	var rec pgRecord
	var history []byte
	err := s.pool.QueryRow(ctx, s.sql.lookup, key).Scan(append(rec.targets(), &history)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, dedup.ErrNotFound)
	}
	if err != nil {
		return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	r := rec.record()
	r.Delivery.History = codec.DecodeHistoryArray(history)
	return r, nil
}

// Forget deletes the record for key, whatever its state, with its queued
// request if any, and reports whether there was a live one.
func (s *Store) Forget(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var live bool
	err := s.queryRow(ctx, s.pool, s.sql.lockOrderOf, key, s.sql.forget, []any{key}, &live)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("dedup: forget %s: %w", key, err)
	}
	return live, nil
}

// Ping checks that the database answers and that the records table is
// there: with the tables missing, every claim would fail.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, s.sql.ping); err != nil {
		return fmt.Errorf("dedup: ping: %w", connectError(err))
	}
	// A standby, or a database whose transactions are read-only, answers
	// every read and refuses every claim.
	var readOnly bool
	if err := s.pool.QueryRow(ctx, `SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'`).Scan(&readOnly); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	if readOnly {
		return fmt.Errorf("dedup: ping: %w: PostgreSQL is read-only (a standby, or default_transaction_read_only)", dedup.ErrReadOnly)
	}
	if err := s.owner.Checked(ctx); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	return nil
}

// CheckOwner makes the configured AppName the owner of the key prefix if
// it has none, and returns an error wrapping ErrPrefixOwned, naming the
// owner, if another app owns it. Without an AppName it does nothing.
// Claims, lookups and pings wait for a successful check (each tries one
// until then).
func (s *Store) CheckOwner(ctx context.Context) error { return s.owner.Check(ctx) }

// readOwner makes appName the owner of the key prefix if it has none, and
// returns the owner. Two replicas inserting at once can both miss the
// row: the loser reads it on the next attempt.
func (s *Store) readOwner(ctx context.Context, appName string) (string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	for range claimAttempts {
		var owner string
		err := s.pool.QueryRow(ctx, s.sql.owner, s.keyPrefix, appName).Scan(&owner)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		return owner, connectError(err)
	}
	return "", fmt.Errorf("no answer after %d attempts", claimAttempts)
}

// Prune deletes expired rows in batches of PruneBatch until none is left,
// and returns how many it deleted. Each batch is its own short statement,
// so no lock is held for long and claims go on meanwhile. If another
// process holds the pruning lock (a replica pruning the same tables), it
// returns 0 at once: one pruner at a time is enough.
func (s *Store) Prune(ctx context.Context) (int, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("dedup: prune: %w", connectError(err))
	}
	defer conn.Release()
	key := s.lockKey("prune")
	var locked bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&locked); err != nil {
		return 0, fmt.Errorf("dedup: prune: %w", err)
	}
	if !locked {
		return 0, nil
	}
	defer func() {
		// The lock is the session's: give it back before the connection
		// goes back to the pool, or drop the connection.
		unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		if _, err := conn.Exec(unlockCtx, "SELECT pg_advisory_unlock($1)", key); err != nil {
			_ = conn.Conn().Close(unlockCtx)
		}
	}()
	total := 0
	for {
		bctx, cancel := s.bound(ctx)
		tag, err := conn.Exec(bctx, s.sql.prune, s.batch)
		cancel()
		if err != nil {
			return total, fmt.Errorf("dedup: prune: %w", err)
		}
		total += int(tag.RowsAffected())
		if tag.RowsAffected() < int64(s.batch) {
			return total, nil
		}
	}
}

// pruneEvery prunes every interval until ctx ends.
func (s *Store) pruneEvery(ctx context.Context, interval time.Duration) {
	storeop.Every(ctx, interval, func() bool {
		n, err := s.Prune(ctx)
		if ctx.Err() == nil {
			s.reports.report("prune", err)
		}
		if n > 0 && s.pruned != nil {
			s.pruned(n)
		}
		return false
	})
}

// migrateUntilDone tries Migrate every second until it succeeds or ctx
// ends.
func (s *Store) migrateUntilDone(ctx context.Context) {
	storeop.Every(ctx, migrateEvery, func() bool {
		err := s.Migrate(ctx)
		if ctx.Err() == nil {
			s.reports.report("migrate", err)
		}
		return err == nil
	})
}

// micros is d in whole microseconds, rounded up so that a positive
// duration never becomes 0.
func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// pgRecord is recordColumns as scanned; record makes a Record of it.
// Every field can be NULL: a won claim's row has no record.
type pgRecord struct {
	state       *int32
	since       *time.Time
	ttlMicros   *int64
	status      *int32
	fingerprint []byte
	contentType *string
	body        []byte
	attempts    *int32
	lastStatus  *int32
	lastError   *string
	due         *time.Time
	blockedBy   *string
}

// targets are where recordColumns are scanned to.
func (p *pgRecord) targets() []any {
	return []any{&p.state, &p.since, &p.ttlMicros, &p.status, &p.fingerprint, &p.contentType, &p.body,
		&p.attempts, &p.lastStatus, &p.lastError, &p.due, &p.blockedBy}
}

// record is the Record p describes.
func (p *pgRecord) record() dedup.Record {
	var rec dedup.Record
	if p.state != nil {
		rec.State = dedup.State(*p.state)
	}
	if p.since != nil {
		rec.Since = *p.since
	}
	if p.ttlMicros != nil && *p.ttlMicros > 0 {
		rec.TTL = time.Duration(*p.ttlMicros) * time.Microsecond
	}
	if rec.State == dedup.Completed {
		if p.status != nil {
			rec.Result.Status = int(*p.status)
		}
		copy(rec.Result.Fingerprint[:], p.fingerprint)
		rec.Result.FullFingerprint = len(p.fingerprint) == len(rec.Result.Fingerprint)
		if p.contentType != nil {
			rec.Result.ContentType = *p.contentType
		}
		if len(p.body) > 0 {
			rec.Result.Body = p.body
		}
	}
	if p.attempts != nil {
		rec.Delivery.Attempts = int(*p.attempts)
	}
	if p.lastStatus != nil {
		rec.Delivery.LastStatus = int(*p.lastStatus)
	}
	if p.lastError != nil {
		rec.Delivery.LastError = *p.lastError
	}
	if p.due != nil {
		rec.Delivery.NextAttemptAt = *p.due
	}
	if p.blockedBy != nil {
		// It waits behind the head of its order key: not due by itself.
		rec.Delivery.BlockedBy = *p.blockedBy
		rec.Delivery.NextAttemptAt = time.Time{}
	}
	return rec
}

// Features is what PostgreSQL can do: records and the async queue, shared
// by every replica, each write committed before it is answered, and
// LISTEN/NOTIFY to wake the workers of every replica when an event is
// queued.
func Features() dedup.Features {
	return dedup.Features{Queue: true, Durable: true, Shared: true, Wake: true}
}

// Backend is s as the program uses it: its records, its queue and its
// notifications.
func (s *Store) Backend() dedup.Backend {
	return dedup.Backend{Features: Features(), Store: s, Queue: s, Wake: s.Notify, Close: s.Close}
}
