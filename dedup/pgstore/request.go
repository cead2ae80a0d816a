package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// requestSQL reads an event's live record and its queue row, if any (the
// request goes with the row when the event completes): the row's columns
// as Take reads them, NULLs made zero values.
const requestSQL = `SELECT q.key IS NOT NULL, coalesce(q.method, ''), coalesce(q.request_uri, ''), coalesce(q.host, ''),
	q.header, q.header_raw, coalesce(q.remote_addr, ''), coalesce(q.tls, false), q.body,
	coalesce(q.route, ''), coalesce(q.namespace, ''), coalesce(q.ttl_micros, 0), coalesce(q.trace_parent, '')
FROM %[1]srecords r LEFT JOIN %[1]squeue q ON q.key = r.key
WHERE r.key = $1 AND r.expires_at > now()`

// Request returns the request key's event was queued with, from its
// queue row.
func (s *Store) Request(ctx context.Context, key string) (dedup.Request, error) {
	if err := ctx.Err(); err != nil {
		return dedup.Request{}, fmt.Errorf("dedup: request %s: %w", key, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.owner.Checked(ctx); err != nil {
		return dedup.Request{}, fmt.Errorf("dedup: request %s: %w", key, err)
	}
	var r dedup.Request
	var queued bool
	var header, headerRaw []byte
	var ttlMicros int64
	err := s.pool.QueryRow(ctx, fmt.Sprintf(requestSQL, s.prefix), key).Scan(&queued, &r.Method, &r.RequestURI, &r.Host,
		&header, &headerRaw, &r.RemoteAddr, &r.TLS, &r.Body, &r.Route, &r.Namespace, &ttlMicros, &r.TraceParent)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return dedup.Request{}, fmt.Errorf("dedup: request %s: %w", key, dedup.ErrNotFound)
	case err != nil:
		return dedup.Request{}, fmt.Errorf("dedup: request %s: %w", key, err)
	case !queued:
		return dedup.Request{}, fmt.Errorf("dedup: request %s: %w", key, dedup.ErrNoRequest)
	}
	r.TTL = time.Duration(ttlMicros) * time.Microsecond
	if err := readHeader(&r, header, headerRaw); err != nil {
		return dedup.Request{}, fmt.Errorf("dedup: request %s: header: %w", key, err)
	}
	// As Take hands it out: no header, no body are nil.
	if len(r.Header) == 0 {
		r.Header = http.Header(nil)
	}
	if len(r.Body) == 0 {
		r.Body = nil
	}
	return r, nil
}
