package admin

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// RetrySelection chooses the dead letters a bulk retry queues again. The
// zero value chooses every one.
type RetrySelection struct {
	// Namespace, if not empty, keeps the dead letters of this namespace
	// (a preset's name or a route's path) alone.
	Namespace string
	// FailedBefore keeps those dead-lettered before it. If zero, the
	// moment the retry began: an event dead-lettered again meanwhile (an
	// app still failing) is not retried twice by one call.
	FailedBefore time.Time
	// FailedAfter, if not zero, keeps those dead-lettered at or after it.
	FailedAfter time.Time
}

// selects reports whether sel chooses dl, a dead letter of a store whose
// keys start with prefix.
func (sel RetrySelection) selects(prefix string, dl dedup.DeadLetter) bool {
	if sel.Namespace != "" {
		// Against the namespace asked for, not the key split at its first
		// ':', which a route path may hold.
		if ns, _ := dedup.SplitEventKey(prefix, sel.Namespace, dl.Key); ns != sel.Namespace {
			return false
		}
	}
	return dl.FailedAt.Before(sel.FailedBefore) && (sel.FailedAfter.IsZero() || !dl.FailedAt.Before(sel.FailedAfter))
}

// BulkRetry is what a bulk retry did: how many dead letters it queued
// again, and the cursor to go on from when it stopped at its limit or
// its deadline (empty once it has been through them all).
type BulkRetry struct {
	Requeued   int    `json:"requeued"`
	NextCursor string `json:"next_cursor"`
}

// Bulk retries: limit's default and bound.
const (
	defaultBulk = 1000
	maxBulk     = 10000
)

// bulkBudget bounds one POST /v1/dead-letters/retry, within the admin
// port's 30 s write timeout (internal/server.Admin): every requeue is a
// store write (an fsync on DATA_DIR), and 10000 of them may take longer.
// pageMargin is the time a page is given: with less left before the
// deadline, RetryDeadLetters stops at the page's start and answers the
// cursor to go on from, as it does at its limit.
const (
	bulkBudget = 20 * time.Second
	pageMargin = 5 * time.Second
)

// RetryDeadLetters queues again, as new first attempts, up to limit of
// the dead letters sel chooses, reading them from cursor (empty: from the
// first) a page at a time, for the API and the CLI alike. One that is no
// longer dead-lettered when its turn comes (retried meanwhile, or
// expired) is skipped, so a second call requeues none of the first's.
// With a deadline on ctx, it stops between pages once less than
// pageMargin is left, with the cursor to go on from. On an error it
// returns what was requeued until then.
func RetryDeadLetters(ctx context.Context, q DeadLetters, prefix string, sel RetrySelection, cursor string, limit int) (BulkRetry, error) {
	if sel.FailedBefore.IsZero() {
		sel.FailedBefore = time.Now()
	}
	var res BulkRetry
	for {
		if deadline, ok := ctx.Deadline(); ok && cursor != "" && time.Until(deadline) < pageMargin {
			res.NextCursor = cursor
			return res, nil
		}
		// A page no longer than what is left to requeue, so that the
		// limit is reached at a page's end, where the store's cursor
		// says where to go on.
		dls, next, err := q.DeadLetters(ctx, cursor, min(limit-res.Requeued, maxPage))
		if err != nil {
			return res, err
		}
		for _, dl := range dls {
			if !sel.selects(prefix, dl) {
				continue
			}
			err := q.Requeue(ctx, dl.Key)
			switch {
			case errors.Is(err, dedup.ErrNotFailed), errors.Is(err, dedup.ErrNotFound):
				continue
			case err != nil:
				return res, err
			}
			res.Requeued++
		}
		if cursor = next; cursor == "" {
			return res, nil
		}
		if res.Requeued == limit {
			res.NextCursor = cursor
			return res, nil
		}
	}
}

// retryDeadLetters serves POST /v1/dead-letters/retry.
func (s *Server) retryDeadLetters(w http.ResponseWriter, r *http.Request) {
	if s.cfg.DeadLetters == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no async route: nothing is ever dead-lettered"})
		return
	}
	query := r.URL.Query()
	sel := RetrySelection{Namespace: query.Get("namespace")}
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"failed_before", &sel.FailedBefore}, {"failed_after", &sel.FailedAfter}} {
		if v := query.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": p.name + ": not an RFC 3339 time (2026-12-01T08:00:00Z)"})
				return
			}
			*p.t = t
		}
	}
	limit := defaultBulk
	if v := query.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxBulk {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "limit must be a number from 1 to " + strconv.Itoa(maxBulk)})
			return
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), bulkBudget)
	defer cancel()
	res, err := RetryDeadLetters(ctx, s.cfg.DeadLetters, s.cfg.KeyPrefix, sel, query.Get("cursor"), limit)
	if res.Requeued > 0 {
		s.cfg.Logger.Info("dead letters queued again by the admin API", zap.Int("requeued", res.Requeued), zap.String("namespace", sel.Namespace),
			zap.Time("failed_before", sel.FailedBefore), zap.Time("failed_after", sel.FailedAfter))
	}
	switch {
	case errors.Is(err, dedup.ErrBadCursor):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "cursor: not one a previous answer returned as next_cursor"})
	case err != nil:
		// What was requeued stays requeued: the count says how far it got.
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error(), "requeued": res.Requeued})
	default:
		writeJSON(w, http.StatusOK, res)
	}
}
