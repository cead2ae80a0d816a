package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// pgTransient reports whether a failed write may succeed if tried again
// soon: the connection was lost or refused, or the server is restarting,
// shutting down or failing over. An answer the server gave about the
// statement itself (a constraint, a missing table) is final.
func pgTransient(err error) bool {
	switch {
	case errors.Is(err, dedup.ErrNotOwner), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", // serialization failure, deadlock
			"57P01", "57P02", "57P03", // admin or crash shutdown, cannot connect now
			"25006": // read-only transaction: a standby not yet promoted
			return true
		}
		return pgErr.Code[:2] == "08" // connection exceptions
	}
	return true // refused, reset or timed out
}

// ConnectError is a failure to open a connection to PostgreSQL: the
// server cannot be reached, or it turned the configured user away. What
// must change is DATABASE_URL, the network or the database's roles, not
// the tables. Its message names the server and the user, never the
// password.
type ConnectError struct {
	// Addr is the server's host:port.
	Addr string
	// User is the role the store logs in as.
	User string
	// Refused is the server's reason for turning the login away
	// ("password authentication failed"); empty when the server was not
	// reached.
	Refused string
	err     error
}

func (e *ConnectError) Error() string {
	if e.Refused != "" {
		return fmt.Sprintf("cannot log in to PostgreSQL at %s as %s (%s)", e.Addr, e.User, e.Refused)
	}
	return fmt.Sprintf("cannot reach PostgreSQL at %s (%s)", e.Addr, innermost(e.err))
}

func (e *ConnectError) Unwrap() error { return e.err }

// connectError is err as a *ConnectError when it is a failure to open a
// connection (pgx's *pgconn.ConnectError), err itself otherwise. pgx's own
// message buries the cause under the connection's parameters, and a wrong
// password read as "create tables failed" sent operators to `migrate`.
func connectError(err error) error {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) || ce.Config == nil {
		return err
	}
	out := &ConnectError{Addr: net.JoinHostPort(ce.Config.Host, strconv.Itoa(int(ce.Config.Port))), User: ce.Config.User, err: err}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		out.Refused = pgErr.Message
		if pgErr.Code == "28P01" { // invalid_password: the message repeats the user
			out.Refused = "password authentication failed"
		}
	}
	return out
}

// innermost is the cause at the end of err's chain ("connection refused",
// "i/o timeout", a DNS answer), the first one of a joined error (one per
// host tried).
func innermost(err error) error {
	for {
		var next error
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			next = u.Unwrap()
		case interface{ Unwrap() []error }:
			if errs := u.Unwrap(); len(errs) > 0 {
				next = errs[0]
			}
		}
		if next == nil {
			return err
		}
		err = next
	}
}

// reporter tells Failed about a background task's failures once per
// change: a migration retried every second against a wrong password is one
// line, not one a second. Another failure is told again, and a success
// after failures is told to Recovered.
type reporter struct {
	failed    func(task string, err error)
	recovered func(task string)
	mu        sync.Mutex
	// last holds, for each task failing now, the state last told (state).
	last map[string]string
}

// report tells of task's outcome, err (nil: it succeeded), if it differs
// from the last one told.
func (r *reporter) report(task string, err error) {
	r.mu.Lock()
	last, failing := r.last[task]
	switch {
	case err == nil && failing:
		delete(r.last, task)
	case err != nil && (!failing || last != state(err)):
		r.last[task] = state(err)
	default:
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	if err == nil {
		r.recovered(task)
	} else {
		r.failed(task, err)
	}
}

// state is what makes two failures the same for report: the server out of
// reach whatever the cause (refused, timed out), the same refusal of the
// same login, or else the same message.
func state(err error) string {
	var ce *ConnectError
	switch {
	case !errors.As(err, &ce):
		return err.Error()
	case ce.Refused == "":
		return "unreachable " + ce.Addr
	default:
		return "refused " + ce.Addr + " " + ce.User + " " + ce.Refused
	}
}
