// Package admin serves the operator's port: health, readiness, Prometheus
// metrics, an API to inspect and forget single events, and Go's profiles.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// Store is what the admin port needs of a dedup store.
type Store interface {
	Ping(ctx context.Context) error
	Lookup(ctx context.Context, key string) (dedup.Record, error)
	Forget(ctx context.Context, key string) (bool, error)
}

// DeadLetters is what the dead-letter API needs of the store's async queue
// (dedup.Queue).
type DeadLetters interface {
	DeadLetterLister
	Requeue(ctx context.Context, key string) error
}

// DeadLetterLister is what ListDeadLetters needs of a store.
type DeadLetterLister interface {
	DeadLetters(ctx context.Context, cursor string, limit int) ([]dedup.DeadLetter, string, error)
}

// Config configures the admin handler.
type Config struct {
	// Store is checked by /readyz and used by the events API. Required.
	Store Store
	// Gatherer is served on /metrics. Required.
	Gatherer prometheus.Gatherer
	// Token enables the events API (bearer token). If empty, the API answers 404.
	Token string
	// DeadLetters serves the dead-letter listing and retries. If nil (no
	// async route), those paths answer 404.
	DeadLetters DeadLetters
	// Events serves the events listing (GET /v1/events): the queue of a
	// store that keeps one, async routes or not. If nil (the store keeps
	// no queue: memory, DynamoDB), the listing answers 404 saying so.
	Events EventLister
	// KeyPrefix is the store key prefix, as the proxy uses it.
	KeyPrefix string
	// Logger logs admin actions. If nil, nothing is logged.
	Logger *zap.Logger
	// Upstream, if not nil, is checked by /readyz after the store: an
	// error makes it answer 503. Nil: readiness follows the store alone.
	Upstream func(ctx context.Context) error
}

// pingTimeout bounds /readyz's store check, so that an outage shows within
// seconds rather than hanging the probe.
const pingTimeout = 2 * time.Second

// Server is the admin handler.
type Server struct {
	cfg Config
	// tokenSum is the SHA-256 of cfg.Token, which hasToken compares with.
	tokenSum [sha256.Size]byte
	draining atomic.Bool
	// unready is set while /readyz answers 503 for the store, so that the
	// failure is logged when it starts rather than at every probe.
	unready atomic.Bool
	mux     *http.ServeMux
}

// New returns the admin handler.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	s := &Server{cfg: cfg, tokenSum: sha256.Sum256([]byte(cfg.Token)), mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", s.ready)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("GET /v1/events", s.authorized(s.listEvents))
	s.mux.HandleFunc("/v1/events", s.authorized(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
	}))
	s.mux.HandleFunc("GET /v1/events/{namespace}/{id}", s.authorized(s.inspect))
	s.mux.HandleFunc("DELETE /v1/events/{namespace}/{id}", s.authorized(s.forget))
	s.mux.HandleFunc("POST /v1/events/{namespace}/{id}/retry", s.authorized(s.retry))
	s.mux.HandleFunc("GET /v1/dead-letters", s.authorized(s.deadLetters))
	s.mux.HandleFunc("POST /v1/dead-letters/retry", s.authorized(s.retryDeadLetters))
	s.mux.HandleFunc("/v1/dead-letters/retry", s.authorized(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", "POST")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
	}))
	s.mux.HandleFunc("/v1/dead-letters", s.authorized(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
	}))
	// Every other method and path under /v1/events/ goes through the token
	// check too, so that without a token the API does not show at all
	// (the mux alone would answer 405 with an Allow header).
	s.mux.HandleFunc("/v1/events/{namespace}/{id}", s.authorized(methodNotAllowed))
	s.mux.HandleFunc("/v1/events/", s.authorized(notFound))
	// Go's profiles, for an operator with the token as for the API.
	s.mux.HandleFunc("GET /debug/pprof/", s.authorized(profiling))
	s.mux.HandleFunc("/debug/pprof/", s.authorized(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
	}))
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Drain makes /readyz answer 503 from now on (shutdown has begun).
func (s *Server) Drain() { s.draining.Store(true) }

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pingTimeout)
	defer cancel()
	if err := s.cfg.Store.Ping(ctx); err != nil {
		// The error names the store's address and says what failed: for
		// the logs and the operator (the bearer token), not for anyone
		// who can reach the probe.
		doc := map[string]string{"status": "store unavailable"}
		if s.cfg.Token != "" && s.hasToken(r) {
			doc["error"] = err.Error()
		}
		if s.unready.CompareAndSwap(false, true) {
			s.cfg.Logger.Warn("not ready: the store check failed", zap.Error(err))
		}
		writeJSON(w, http.StatusServiceUnavailable, doc)
		return
	}
	if s.unready.CompareAndSwap(true, false) {
		s.cfg.Logger.Info("ready: the store answers again")
	}
	if s.cfg.Upstream != nil {
		if err := s.cfg.Upstream(ctx); err != nil {
			s.cfg.Logger.Warn("readiness: the upstream does not answer", zap.Error(err))
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "upstream unavailable"})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// authorized guards the events API with the bearer token; without a token
// the API does not exist.
func (s *Server) authorized(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Token == "" {
			notFound(w, r)
			return
		}
		if !s.hasToken(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="webhook-dedup"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong bearer token"})
			return
		}
		next(w, r)
	}
}

// hasToken reports whether r carries the bearer token (set: Token is not
// empty). The auth scheme is case-insensitive (RFC 9110). Both sides are
// hashed so that the constant-time comparison does not leak the token's
// length either.
func (s *Server) hasToken(r *http.Request) bool {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	got := sha256.Sum256([]byte(token))
	return strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare(got[:], s.tokenSum[:]) == 1
}

func notFound(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found"})
}

func methodNotAllowed(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Allow", "GET, HEAD, DELETE")
	writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
}

// Event is the events API's view of one record.
type Event struct {
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
	// State is "in-flight" or "completed" (sync routes), or "queued",
	// "delivering", "completed" or "failed" (async routes).
	State string `json:"state"`
	// Status is the upstream's status code; zero (omitted) while in flight.
	Status int `json:"status,omitempty"`
	// AgeSeconds is the time since the claim (in flight) or the completion.
	AgeSeconds float64 `json:"age_seconds"`
	// TTLSeconds is the time left before the record expires: the lease
	// while in flight, the retention once completed.
	TTLSeconds float64 `json:"ttl_seconds"`
	// BodySHA256 is the hex fingerprint of the completed request's body;
	// empty (omitted) when unknown. It tells a changed payload from a retry.
	BodySHA256 string `json:"body_sha256,omitempty"`
	// Attempts, LastStatus, LastError and NextAttemptAt tell where an
	// async event's background delivery stands: the attempts made, the
	// app's last answer (0: none answered), why the last attempt failed
	// and when a queued event is due (RFC 3339). Omitted where they do
	// not apply (sync routes, a first attempt not yet made).
	Attempts      int    `json:"attempts,omitempty"`
	LastStatus    int    `json:"last_status,omitempty"`
	LastError     string `json:"last_error,omitempty"`
	NextAttemptAt string `json:"next_attempt_at,omitempty"`
	// AcceptedAt is when an async event was accepted (or requeued), where
	// known (RFC 3339, to the millisecond): the listing, and a queued or
	// delivering event.
	AcceptedAt string `json:"accepted_at,omitempty"`
	// FailedAt and CompletedAt are when an async event was dead-lettered
	// or completed (RFC 3339, to the millisecond).
	FailedAt    string `json:"failed_at,omitempty"`
	CompletedAt string `json:"completed_at,omitempty"`
	// AttemptsHistory is an async event's last dedup.HistoryLen attempts,
	// oldest first ([] before the first); omitted for sync records.
	AttemptsHistory []Attempt `json:"attempts_history,omitzero"`
	// BlockedBy is, for an event of an ordered route waiting behind the
	// head of its order key, that head: the event whose completion (or
	// dead letter, or forgetting) it waits for. Omitted otherwise.
	BlockedBy *EventRef `json:"blocked_by,omitempty"`
}

// EventRef names an event: its namespace and ID.
type EventRef struct {
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
}

// async reports whether a state is one of an async route's.
func async(st dedup.State) bool {
	return st == dedup.Queued || st == dedup.Delivering || st == dedup.Failed
}

func (s *Server) inspect(w http.ResponseWriter, r *http.Request) {
	ns, id := r.PathValue("namespace"), r.PathValue("id")
	rec, err := s.cfg.Store.Lookup(r.Context(), s.key(ns, id))
	switch {
	case errors.Is(err, dedup.ErrNotFound):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no record for this event"})
		return
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	ev := NewEvent(ns, id, rec, time.Now())
	if head := rec.Delivery.BlockedBy; head != "" && rec.State == dedup.Queued {
		// The head was accepted on the same route: its namespace first.
		hns, hid := dedup.SplitEventKey(s.cfg.KeyPrefix, ns, head)
		ev.BlockedBy = &EventRef{Namespace: hns, ID: hid}
	}
	writeJSON(w, http.StatusOK, ev)
}

// NewEvent is rec as the events API shows it, at time now. The inspect
// command prints the same rendering.
func NewEvent(namespace, id string, rec dedup.Record, now time.Time) Event {
	ev := Event{Namespace: namespace, ID: id, State: rec.State.String(), TTLSeconds: seconds(rec.TTL)}
	if rec.State == dedup.Completed {
		ev.Status = rec.Result.Status
		ev.BodySHA256 = rec.Result.FingerprintHex()
	}
	if !rec.Since.IsZero() {
		ev.AgeSeconds = seconds(now.Sub(rec.Since))
	}
	if d := rec.Delivery; async(rec.State) || d.Attempts > 0 {
		ev.Attempts, ev.LastStatus, ev.LastError = d.Attempts, d.LastStatus, d.LastError
		if !d.NextAttemptAt.IsZero() && rec.State == dedup.Queued {
			ev.NextAttemptAt = d.NextAttemptAt.UTC().Format(time.RFC3339)
		}
		ev.AttemptsHistory = history(d.History)
		switch since := rec.Since.UTC().Format(rfc3339ms); {
		case rec.Since.IsZero():
		case rec.State == dedup.Failed:
			ev.FailedAt = since
		case rec.State == dedup.Completed:
			ev.CompletedAt = since
		default:
			ev.AcceptedAt = since
		}
	}
	return ev
}

// seconds is d in seconds, to the millisecond: finer is noise to a
// reader. It rounds the float, not the Duration: 2978ms.Seconds() is
// 2.9779999999999998, which JSON would print as such.
func seconds(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

// retry puts a dead-lettered event back in the queue as a new first attempt.
func (s *Server) retry(w http.ResponseWriter, r *http.Request) {
	if s.cfg.DeadLetters == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no async route: nothing is ever dead-lettered"})
		return
	}
	ns, id := r.PathValue("namespace"), r.PathValue("id")
	err := s.cfg.DeadLetters.Requeue(r.Context(), s.key(ns, id))
	switch {
	case errors.Is(err, dedup.ErrNotFound):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no record for this event"})
	case errors.Is(err, dedup.ErrNotFailed):
		writeJSON(w, http.StatusConflict, map[string]string{"error": "the event is not dead-lettered: it is queued, being delivered or completed"})
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
	default:
		s.cfg.Logger.Info("dead letter queued again by the admin API", zap.String("namespace", ns), zap.String("event_id", id))
		writeJSON(w, http.StatusAccepted, map[string]string{"status": "queued", "namespace": ns, "id": id})
	}
}

// DeadLetter is the dead-letter listing's view of one failed event.
type DeadLetter struct {
	Namespace  string `json:"namespace"`
	ID         string `json:"id"`
	Attempts   int    `json:"attempts"`
	LastStatus int    `json:"last_status"`
	LastError  string `json:"last_error"`
	// FailedAt is when it was dead-lettered (RFC 3339).
	FailedAt string `json:"failed_at"`
}

// DeadLetterPage is one page of the listing; NextCursor is empty on the last.
type DeadLetterPage struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	NextCursor  string       `json:"next_cursor"`
}

// Dead-letter pages: limit's default and bound.
const (
	defaultPage = 100
	maxPage     = 1000
)

func (s *Server) deadLetters(w http.ResponseWriter, r *http.Request) {
	if s.cfg.DeadLetters == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no async route: nothing is ever dead-lettered"})
		return
	}
	limit := defaultPage
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPage {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "limit must be a number from 1 to " + strconv.Itoa(maxPage)})
			return
		}
		limit = n
	}
	page, err := ListDeadLetters(r.Context(), s.cfg.DeadLetters, s.cfg.KeyPrefix, r.URL.Query().Get("cursor"), limit)
	switch {
	case errors.Is(err, dedup.ErrBadCursor):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "cursor: not one a previous page returned as next_cursor"})
		return
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// ListDeadLetters reads one page of dead letters, each named by namespace
// and ID as the events API names it (for the API and the CLI alike).
func ListDeadLetters(ctx context.Context, st DeadLetterLister, prefix, cursor string, limit int) (DeadLetterPage, error) {
	dls, next, err := st.DeadLetters(ctx, cursor, limit)
	if err != nil {
		return DeadLetterPage{}, err
	}
	page := DeadLetterPage{DeadLetters: make([]DeadLetter, 0, len(dls)), NextCursor: next}
	for _, dl := range dls {
		ns, id := dedup.SplitEventKey(prefix, "", dl.Key)
		page.DeadLetters = append(page.DeadLetters, DeadLetter{
			Namespace: ns, ID: id, Attempts: dl.Attempts, LastStatus: dl.LastStatus, LastError: dl.LastError,
			FailedAt: dl.FailedAt.UTC().Format(time.RFC3339),
		})
	}
	return page, nil
}

func (s *Server) forget(w http.ResponseWriter, r *http.Request) {
	ns, id := r.PathValue("namespace"), r.PathValue("id")
	existed, err := Forget(r.Context(), s.cfg.Store, s.cfg.KeyPrefix, ns, id)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	if !existed {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no record for this event"})
		return
	}
	s.cfg.Logger.Info("event forgotten by the admin API", zap.String("namespace", ns), zap.String("event_id", id))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) key(namespace, id string) string {
	return dedup.EventKey(s.cfg.KeyPrefix, namespace, id)
}

// Forgetter is what Forget needs of a store.
type Forgetter interface {
	Lookup(ctx context.Context, key string) (dedup.Record, error)
	Forget(ctx context.Context, key string) (bool, error)
}

// Forget deletes an event's record so that its next delivery is forwarded,
// and reports whether there was one. With DEDUP_BODY_FINGERPRINT the proxy
// also keeps the completed body's fingerprint under a key of its own, which
// would answer the redelivery as a duplicate; that record goes too.
func Forget(ctx context.Context, st Forgetter, prefix, namespace, id string) (bool, error) {
	key := dedup.EventKey(prefix, namespace, id)
	rec, err := st.Lookup(ctx, key)
	if err != nil && !errors.Is(err, dedup.ErrNotFound) {
		return false, err
	}
	existed, err := st.Forget(ctx, key)
	if err != nil {
		return false, err
	}
	if fp := rec.Result.Fingerprint; rec.State == dedup.Completed && rec.Result.FullFingerprint && rec.Result.KnownBody() {
		if _, err := st.Forget(ctx, dedup.BodyKey(prefix, namespace, fp)); err != nil {
			return existed, err
		}
	}
	return existed, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
