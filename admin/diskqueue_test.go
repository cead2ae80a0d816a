package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/diskstore"
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
	adm := admin.New(admin.Config{Store: st, DeadLetters: st, Gatherer: prometheus.NewRegistry(), Token: token, KeyPrefix: prefix})
	srv := httptest.NewServer(adm)
	t.Cleanup(srv.Close)
	return &fixture{admin: adm, srv: srv}, st
}

// deadLetter queues each key and dead-letters it, as a worker whose
// last attempt failed would.
func deadLetter(t *testing.T, st *diskstore.Store, keys ...string) {
	t.Helper()
	ctx := context.Background()
	for _, key := range keys {
		if won, _, err := st.Enqueue(ctx, key, dedup.Request{Method: http.MethodPost, RequestURI: "/", Header: http.Header{}}); err != nil || !won {
			t.Fatalf("enqueue %s: %v %v", key, won, err)
		}
	}
	ds, err := st.Take(ctx, len(keys), time.Minute)
	if err != nil || len(ds) != len(keys) {
		t.Fatalf("take: %d of %d, %v", len(ds), len(keys), err)
	}
	for _, d := range ds {
		if err := st.Fail(ctx, d, 500, "the app answered 500", time.Hour); err != nil {
			t.Fatalf("fail %s: %v", d.Claim.Key, err)
		}
	}
}

// TestDeadLettersBadCursor: a cursor the store cannot read is the
// caller's mistake, 400, not an outage (503).
func TestDeadLettersBadCursor(t *testing.T) {
	f, st := newDiskFixture(t)
	deadLetter(t, st, prefix+"github:d1")
	for _, bad := range []string{"not-a-cursor", "zz", "00"} {
		if r := f.do(t, http.MethodGet, "/v1/dead-letters?cursor="+bad, "Bearer "+token); r.status != http.StatusBadRequest {
			t.Errorf("cursor=%s: %d %s, want 400", bad, r.status, r.body)
		}
	}
	if r := f.do(t, http.MethodGet, "/v1/dead-letters?cursor=", "Bearer "+token); r.status != http.StatusOK {
		t.Errorf("an empty cursor (the first page): %d %s, want 200", r.status, r.body)
	}
}
