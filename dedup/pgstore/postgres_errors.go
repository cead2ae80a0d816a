package pgstore

import (
	"context"
	"errors"

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
