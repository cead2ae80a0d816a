package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// asyncStore holds async records as a queue keeps them: Lookup reports
// them, DeadLetters pages through the failed ones in key order, and
// Requeue turns a failed one queued. The stores' queues themselves are
// held to this by dedup's conformance suite; here the API's mapping is
// under test.
type asyncStore struct {
	*flakyStore
	mu      sync.Mutex
	records map[string]dedup.Record
	order   []string
}

func (s *asyncStore) put(key string, rec dedup.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.records[key]; !ok {
		s.order = append(s.order, key)
	}
	s.records[key] = rec
}

func (s *asyncStore) Lookup(ctx context.Context, key string) (dedup.Record, error) {
	s.mu.Lock()
	rec, ok := s.records[key]
	s.mu.Unlock()
	if ok {
		return rec, nil
	}
	return s.flakyStore.Lookup(ctx, key)
}

func (s *asyncStore) DeadLetters(_ context.Context, cursor string, limit int) ([]dedup.DeadLetter, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start, _ := strconv.Atoi(cursor)
	var out []dedup.DeadLetter
	for i := start; i < len(s.order); i++ {
		rec := s.records[s.order[i]]
		if rec.State != dedup.Failed {
			continue
		}
		if len(out) == limit {
			return out, strconv.Itoa(i), nil
		}
		out = append(out, dedup.DeadLetter{Key: s.order[i], Attempts: rec.Delivery.Attempts, LastStatus: rec.Delivery.LastStatus,
			LastError: rec.Delivery.LastError, FailedAt: rec.Since})
	}
	return out, "", nil
}

func (s *asyncStore) Requeue(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[key]
	switch {
	case !ok:
		return dedup.ErrNotFound
	case rec.State != dedup.Failed:
		return dedup.ErrNotFailed
	}
	s.records[key] = dedup.Record{State: dedup.Queued, Since: time.Now()}
	return nil
}

func newAsyncFixture(t *testing.T) (*fixture, *asyncStore) {
	t.Helper()
	mem := memstore.New()
	t.Cleanup(func() { _ = mem.Close() })
	st := &asyncStore{flakyStore: &flakyStore{Store: mem}, records: map[string]dedup.Record{}}
	adm := admin.New(admin.Config{Store: st, DeadLetters: st, Gatherer: prometheus.NewRegistry(), Token: token, KeyPrefix: prefix})
	srv := httptest.NewServer(adm)
	t.Cleanup(srv.Close)
	return &fixture{store: st.flakyStore, admin: adm, srv: srv}, st
}

// TestInspectAsync: the event view shows an async event's delivery.
func TestInspectAsync(t *testing.T) {
	f, st := newAsyncFixture(t)
	next := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	st.put(prefix+"github:d1", dedup.Record{State: dedup.Queued, Since: time.Now(), TTL: time.Hour,
		Delivery: dedup.DeliveryStatus{Attempts: 2, LastStatus: 503, LastError: "the app answered 503", NextAttemptAt: next}})
	status, ev := f.inspect(t, "/v1/events/github/d1")
	if status != 200 || ev["state"] != "queued" || ev["attempts"] != 2.0 || ev["last_status"] != 503.0 ||
		ev["last_error"] != "the app answered 503" || ev["next_attempt_at"] != "2030-01-02T03:04:05Z" {
		t.Errorf("queued event: %d %v", status, ev)
	}
	// An event of an ordered route waiting behind the head of its key.
	st.put(prefix+"github:d4", dedup.Record{State: dedup.Queued, Since: time.Now(), Delivery: dedup.DeliveryStatus{BlockedBy: prefix + "github:d:1"}})
	if _, ev := f.inspect(t, "/v1/events/github/d4"); fmt.Sprint(ev["blocked_by"]) != "map[id:d:1 namespace:github]" || ev["next_attempt_at"] != nil {
		t.Errorf("waiting event: %v, want blocked by github d:1", ev)
	}
	if _, ev := f.inspect(t, "/v1/events/github/d1"); ev["blocked_by"] != nil {
		t.Errorf("due event: %v, want no blocked_by", ev)
	}
	st.put(prefix+"github:d2", dedup.Record{State: dedup.Delivering, Since: time.Now(), Delivery: dedup.DeliveryStatus{Attempts: 1}})
	if _, ev := f.inspect(t, "/v1/events/github/d2"); ev["state"] != "delivering" || ev["attempts"] != 1.0 || ev["next_attempt_at"] != nil {
		t.Errorf("delivering event: %v", ev)
	}
	st.put(prefix+"github:d3", dedup.Record{State: dedup.Failed, Since: time.Now(), Delivery: dedup.DeliveryStatus{Attempts: 25, LastError: "connection refused"}})
	if _, ev := f.inspect(t, "/v1/events/github/d3"); ev["state"] != "failed" || ev["attempts"] != 25.0 || ev["last_error"] != "connection refused" {
		t.Errorf("failed event: %v", ev)
	}
}

// TestDeadLettersPaged: the listing pages with limit and cursor, names
// each event by namespace and ID, and refuses a bad limit.
func TestDeadLettersPaged(t *testing.T) {
	f, st := newAsyncFixture(t)
	failedAt := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	for i := 0; i < 5; i++ {
		st.put(prefix+"/hooks/acme:id:"+strconv.Itoa(i), dedup.Record{State: dedup.Failed, Since: failedAt,
			Delivery: dedup.DeliveryStatus{Attempts: 3, LastStatus: 500, LastError: "the app answered 500"}})
		st.put(prefix+"stripe:ok"+strconv.Itoa(i), dedup.Record{State: dedup.Queued})
	}
	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("the listing never ends")
		}
		r := f.do(t, http.MethodGet, "/v1/dead-letters?limit=2&cursor="+cursor, "Bearer "+token)
		var page struct {
			DeadLetters []map[string]any `json:"dead_letters"`
			NextCursor  *string          `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil || r.status != 200 || page.NextCursor == nil || page.DeadLetters == nil {
			t.Fatalf("page: %d %s %v", r.status, r.body, err)
		}
		for _, dl := range page.DeadLetters {
			if dl["namespace"] != "/hooks/acme" || dl["attempts"] != 3.0 || dl["last_status"] != 500.0 ||
				dl["last_error"] != "the app answered 500" || dl["failed_at"] != "2026-05-06T07:08:09Z" {
				t.Errorf("dead letter %v", dl)
			}
			seen = append(seen, dl["id"].(string))
		}
		if len(page.DeadLetters) > 2 {
			t.Errorf("limit=2 gave %d", len(page.DeadLetters))
		}
		if *page.NextCursor == "" {
			break
		}
		cursor = *page.NextCursor
	}
	if len(seen) != 5 || seen[0] != "id:0" || seen[4] != "id:4" {
		t.Errorf("listed %q, want id:0 … id:4", seen)
	}
	for _, bad := range []string{"0", "-1", "x", "1001"} {
		if r := f.do(t, http.MethodGet, "/v1/dead-letters?limit="+bad, "Bearer "+token); r.status != 400 {
			t.Errorf("limit=%s: %d, want 400", bad, r.status)
		}
	}
	if r := f.do(t, http.MethodGet, "/v1/dead-letters", ""); r.status != 401 {
		t.Errorf("without the token: %d, want 401", r.status)
	}
}

// TestRetryDeadLetter: 202 for a failed event, which is queued again; 409
// for one that is not failed; 404 for an unknown one.
func TestRetryDeadLetter(t *testing.T) {
	f, st := newAsyncFixture(t)
	st.put(prefix+"github:dead", dedup.Record{State: dedup.Failed, Delivery: dedup.DeliveryStatus{Attempts: 25}})
	st.put(prefix+"github:busy", dedup.Record{State: dedup.Delivering})
	auth := "Bearer " + token
	if r := f.do(t, http.MethodPost, "/v1/events/github/dead/retry", auth); r.status != http.StatusAccepted {
		t.Errorf("retry a dead letter: %d %s, want 202", r.status, r.body)
	}
	if _, ev := f.inspect(t, "/v1/events/github/dead"); ev["state"] != "queued" {
		t.Errorf("after retry: %v, want queued", ev)
	}
	if r := f.do(t, http.MethodPost, "/v1/events/github/dead/retry", auth); r.status != http.StatusConflict {
		t.Errorf("retry a queued event: %d, want 409", r.status)
	}
	if r := f.do(t, http.MethodPost, "/v1/events/github/busy/retry", auth); r.status != http.StatusConflict {
		t.Errorf("retry an event being delivered: %d, want 409", r.status)
	}
	if r := f.do(t, http.MethodPost, "/v1/events/github/nope/retry", auth); r.status != http.StatusNotFound {
		t.Errorf("retry an unknown event: %d, want 404", r.status)
	}
	if r := f.do(t, http.MethodPost, "/v1/events/github/dead/retry", ""); r.status != http.StatusUnauthorized {
		t.Errorf("retry without the token: %d, want 401", r.status)
	}
}

// TestDeadLettersWithoutAsync: with no queue the paths answer 404.
func TestDeadLettersWithoutAsync(t *testing.T) {
	f := newFixture(t, token)
	if r := f.do(t, http.MethodGet, "/v1/dead-letters", "Bearer "+token); r.status != 404 {
		t.Errorf("GET /v1/dead-letters without a queue: %d, want 404", r.status)
	}
	if r := f.do(t, http.MethodPost, "/v1/events/github/x/retry", "Bearer "+token); r.status != 404 {
		t.Errorf("retry without a queue: %d, want 404", r.status)
	}
}
