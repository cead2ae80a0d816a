package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/diskstore"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// newDiskFixture serves the admin handler over a real on-disk store and
// its queue, so that what the API maps is what a store answers.
func newDiskFixture(t *testing.T) (*fixture, *diskstore.Store) {
	t.Helper()
	st, err := diskstore.Open(diskstore.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	adm := admin.New(admin.Config{Store: st, DeadLetters: st, Events: st, Gatherer: prometheus.NewRegistry(), Token: token, KeyPrefix: prefix})
	srv := httptest.NewServer(adm)
	t.Cleanup(srv.Close)
	return &fixture{admin: adm, srv: srv}, st
}

// TestDeadLettersBadCursor: a cursor the store cannot read is the
// caller's mistake, 400, not an outage (503).
func TestDeadLettersBadCursor(t *testing.T) {
	f, st := newDiskFixture(t)
	storetest.DeadLetter(t, st, prefix+"github:d1")
	for _, bad := range []string{"not-a-cursor", "zz", "00"} {
		if r := f.do(t, http.MethodGet, "/v1/dead-letters?cursor="+bad, "Bearer "+token); r.status != http.StatusBadRequest {
			t.Errorf("cursor=%s: %d %s, want 400", bad, r.status, r.body)
		}
	}
	if r := f.do(t, http.MethodGet, "/v1/dead-letters?cursor=", "Bearer "+token); r.status != http.StatusOK {
		t.Errorf("an empty cursor (the first page): %d %s, want 200", r.status, r.body)
	}
}

// bulkRetry posts a bulk retry with query and decodes its answer.
func (f *fixture) bulkRetry(t *testing.T, query string) (int, admin.BulkRetry) {
	t.Helper()
	r := f.do(t, http.MethodPost, "/v1/dead-letters/retry"+query, "Bearer "+token)
	var res admin.BulkRetry
	if r.status == http.StatusOK {
		if err := json.Unmarshal(r.body, &res); err != nil {
			t.Fatalf("POST /v1/dead-letters/retry%s: %s: %v", query, r.body, err)
		}
	}
	return r.status, res
}

// states counts keys by their state.
func states(t *testing.T, st *diskstore.Store, keys ...string) map[dedup.State]int {
	t.Helper()
	n := map[dedup.State]int{}
	for _, key := range keys {
		rec, err := st.Lookup(context.Background(), key)
		if err != nil {
			t.Fatalf("lookup %s: %v", key, err)
		}
		n[rec.State]++
	}
	return n
}

// TestBulkRetry: POST /v1/dead-letters/retry requeues the dead letters a
// namespace and a failure window choose, at most limit of them with the
// cursor to go on from, leaves the others, and is idempotent.
func TestBulkRetry(t *testing.T) {
	f, st := newDiskFixture(t)
	var early, late, other []string
	for i := 0; i < 5; i++ {
		early = append(early, prefix+"/hooks/a:b:early-"+strconv.Itoa(i)) // a ':' in the namespace
		other = append(other, prefix+"/hooks/a:other-"+strconv.Itoa(i))   // the namespace /hooks/a
	}
	storetest.DeadLetter(t, st, early...)
	storetest.DeadLetter(t, st, other...)
	// The failure window's edge: the next millisecond, since the store
	// keeps failure times to the millisecond, rounded down. The early
	// ones failed before it; the clock passes it (within a millisecond)
	// before the late ones fail.
	edge := time.Now().UTC().Truncate(time.Millisecond).Add(time.Millisecond)
	for !time.Now().After(edge) {
	}
	for i := 0; i < 3; i++ {
		late = append(late, prefix+"/hooks/a:b:late-"+strconv.Itoa(i))
	}
	storetest.DeadLetter(t, st, late...)

	ns := "?namespace=" + url.QueryEscape("/hooks/a:b")
	before := "&failed_before=" + url.QueryEscape(edge.Format(time.RFC3339Nano))
	status, res := f.bulkRetry(t, ns+before+"&limit=3")
	if status != 200 || res.Requeued != 3 || res.NextCursor == "" {
		t.Errorf("first page of 3: %d %+v, want 3 requeued and a cursor", status, res)
	}
	status, res = f.bulkRetry(t, ns+before+"&limit=3&cursor="+url.QueryEscape(res.NextCursor))
	if status != 200 || res.Requeued != 2 || res.NextCursor != "" {
		t.Errorf("from the cursor: %d %+v, want the 2 left and no cursor", status, res)
	}
	if n := states(t, st, early...); n[dedup.Queued] != 5 {
		t.Errorf("early dead letters of /hooks/a:b: %v, want all 5 queued", n)
	}
	if n := states(t, st, append(late, other...)...); n[dedup.Failed] != 8 {
		t.Errorf("late ones and another namespace's: %v, want all 8 still failed", n)
	}
	if status, res = f.bulkRetry(t, ns+before); status != 200 || res.Requeued != 0 {
		t.Errorf("again: %d %+v, want none requeued", status, res)
	}
	if status, res = f.bulkRetry(t, "?failed_after="+url.QueryEscape(edge.Format(time.RFC3339Nano))); status != 200 || res.Requeued != 3 {
		t.Errorf("failed_after the edge: %d %+v, want the 3 late ones", status, res)
	}
	if status, res = f.bulkRetry(t, ""); status != 200 || res.Requeued != 5 || res.NextCursor != "" {
		t.Errorf("every one left: %d %+v, want the 5 of /hooks/a", status, res)
	}
	if n := states(t, st, append(late, other...)...); n[dedup.Queued] != 8 {
		t.Errorf("after retrying every one: %v, want all queued", n)
	}

	for _, bad := range []string{"?limit=0", "?limit=10001", "?limit=x", "?failed_before=yesterday", "?failed_after=2026-12-01", "?cursor=junk"} {
		if status, _ := f.bulkRetry(t, bad); status != http.StatusBadRequest {
			t.Errorf("POST /v1/dead-letters/retry%s: %d, want 400", bad, status)
		}
	}
	if r := f.do(t, http.MethodGet, "/v1/dead-letters/retry", "Bearer "+token); r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/dead-letters/retry: %d Allow %q, want 405 Allow POST", r.status, r.header.Get("Allow"))
	}
	if r := f.do(t, http.MethodPost, "/v1/dead-letters/retry", ""); r.status != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", r.status)
	}
}

// racedQueue is a disk queue on which another operator retries the
// first dead letter of every page just after it is listed.
type racedQueue struct{ *diskstore.Store }

func (q racedQueue) DeadLetters(ctx context.Context, cursor string, limit int) ([]dedup.DeadLetter, string, error) {
	dls, next, err := q.Store.DeadLetters(ctx, cursor, limit)
	if err == nil && len(dls) > 0 {
		err = q.Requeue(ctx, dls[0].Key)
	}
	return dls, next, err
}

// TestBulkRetrySkipsTheRetried: a dead letter retried by someone else
// between the listing and its turn is skipped, not an error.
func TestBulkRetrySkipsTheRetried(t *testing.T) {
	_, st := newDiskFixture(t)
	storetest.DeadLetter(t, st, prefix+"github:1", prefix+"github:2", prefix+"github:3")
	res, err := admin.RetryDeadLetters(context.Background(), racedQueue{st}, prefix, admin.RetrySelection{}, "", 10)
	if err != nil || res.Requeued != 2 || res.NextCursor != "" {
		t.Errorf("RetryDeadLetters = %+v, %v; want 2 requeued (the first was retried by the other operator), no error", res, err)
	}
}

// pagedQueue is a disk queue whose listing answers one dead letter a page.
type pagedQueue struct{ *diskstore.Store }

func (q pagedQueue) DeadLetters(ctx context.Context, cursor string, _ int) ([]dedup.DeadLetter, string, error) {
	return q.Store.DeadLetters(ctx, cursor, 1)
}

// TestBulkRetryStopsBeforeItsDeadline: with too little time left for
// another page, a bulk retry stops between pages and answers the cursor
// to go on from, rather than running past the admin port's write timeout.
func TestBulkRetryStopsBeforeItsDeadline(t *testing.T) {
	_, st := newDiskFixture(t)
	storetest.DeadLetter(t, st, prefix+"github:1", prefix+"github:2", prefix+"github:3")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // less than a page's margin
	defer cancel()
	res, err := admin.RetryDeadLetters(ctx, pagedQueue{st}, prefix, admin.RetrySelection{}, "", 10)
	if err != nil || res.Requeued != 1 || res.NextCursor == "" {
		t.Fatalf("RetryDeadLetters near its deadline = %+v, %v; want the first page's 1 and a cursor", res, err)
	}
	rest, err := admin.RetryDeadLetters(context.Background(), pagedQueue{st}, prefix, admin.RetrySelection{}, res.NextCursor, 10)
	if err != nil || rest.Requeued != 2 || rest.NextCursor != "" {
		t.Errorf("from its cursor = %+v, %v; want the other 2", rest, err)
	}
}
