package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// TestEventsParams: every malformed parameter of GET /v1/events is a 400
// whose error names it; the well-formed ones list.
func TestEventsParams(t *testing.T) {
	f, _ := newDiskFixture(t)
	for _, tt := range []struct {
		query string
		param string // "" for 200
	}{
		{"state=failed", ""},
		{"state=queued&namespace=github&since=2026-01-01T00:00:00Z&until=2026-01-02T00:00:00.5%2B02:00&limit=1000", ""},
		{"", "state"},
		{"state=in-flight", "state"},
		{"state=FAILED", "state"},
		{"state=failed&since=yesterday", "since"},
		{"state=failed&until=2026-01-01", "until"},
		{"state=failed&since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "since"},
		{"state=failed&limit=0", "limit"},
		{"state=failed&limit=1001", "limit"},
		{"state=failed&limit=ten", "limit"},
		{"state=failed&cursor=%21%21", "cursor"},
		{"state=failed&cursor=AAAA", "cursor"},
	} {
		r := f.do(t, http.MethodGet, "/v1/events?"+tt.query, "Bearer "+token)
		var doc map[string]any
		_ = json.Unmarshal(r.body, &doc)
		switch {
		case tt.param == "" && r.status != http.StatusOK:
			t.Errorf("?%s: %d %s, want 200", tt.query, r.status, r.body)
		case tt.param != "" && (r.status != http.StatusBadRequest || !strings.HasPrefix(fmt.Sprint(doc["error"]), tt.param+":")):
			t.Errorf("?%s: %d %s, want 400 naming %s", tt.query, r.status, r.body, tt.param)
		}
	}
	if r := f.do(t, http.MethodPost, "/v1/events?state=failed", "Bearer "+token); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/events: %d, want 405", r.status)
	}
}

// TestEventsAuth: the listing is the admin API's: 404 without a token
// configured, 401 without or with a wrong one.
func TestEventsAuth(t *testing.T) {
	f, _ := newDiskFixture(t)
	for auth, want := range map[string]int{"": 401, "Bearer wrong": 401, "Basic " + token: 401, "Bearer " + token: 200} {
		if r := f.do(t, http.MethodGet, "/v1/events?state=queued", auth); r.status != want {
			t.Errorf("Authorization %q: %d, want %d", auth, r.status, want)
		}
	}
	off := newFixture(t, "")
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		if r := off.do(t, method, "/v1/events?state=queued", "Bearer "+token); r.status != http.StatusNotFound {
			t.Errorf("%s without ADMIN_TOKEN: %d, want 404", method, r.status)
		}
	}
}

// TestEventsNoQueue: a store that keeps no queue (memory, DynamoDB) says
// so, with the 404 the dead-letter API answers there.
func TestEventsNoQueue(t *testing.T) {
	f := newFixture(t, token)
	r := f.do(t, http.MethodGet, "/v1/events?state=failed", "Bearer "+token)
	if r.status != http.StatusNotFound || !strings.Contains(string(r.body), "keeps no event list") {
		t.Errorf("memory store: %d %s, want 404 saying the store keeps no event list", r.status, r.body)
	}
	if r := f.do(t, http.MethodGet, "/v1/dead-letters", "Bearer "+token); r.status != http.StatusNotFound {
		t.Errorf("dead letters on the memory store: %d, want 404 as the events listing", r.status)
	}
}

// TestEventsListing: what a real store lists is shown with the event's
// name, its times and its history, the same as the event's own view, and
// the cursor pages through each event once.
func TestEventsListing(t *testing.T) {
	f, st := newDiskFixture(t)
	ctx := context.Background()
	for i := range 5 {
		storetest.MustEnqueue(t, st, fmt.Sprintf("%sgithub:d%d", prefix, i))
	}
	storetest.MustEnqueue(t, st, prefix+"stripe:s1")
	began := time.Date(2026, 5, 1, 10, 0, 0, 123e6, time.UTC)
	for _, d := range storetest.Take(t, st, 6, storetest.Lease) {
		d.Began, d.Took = began, 1500*time.Millisecond
		if err := st.Fail(ctx, d, 502, "the app answered 502: bad gateway", storetest.Keep); err != nil {
			t.Fatal(err)
		}
	}
	var all []admin.Event
	cursor, pages := "", 0
	for ; pages == 0 || cursor != ""; pages++ {
		r := f.do(t, http.MethodGet, "/v1/events?state=failed&namespace=github&limit=2&cursor="+url.QueryEscape(cursor), "Bearer "+token)
		var page admin.EventPage
		if r.status != http.StatusOK || json.Unmarshal(r.body, &page) != nil || len(page.Events) > 2 {
			t.Fatalf("page %d: %d %s", pages, r.status, r.body)
		}
		all, cursor = append(all, page.Events...), page.NextCursor
	}
	if len(all) != 5 || pages != 3 {
		t.Fatalf("listed %d github events in %d pages, want 5 in 3", len(all), pages)
	}
	seen := map[string]bool{}
	for _, ev := range all {
		if ev.Namespace != "github" || seen[ev.ID] || ev.State != "failed" || ev.FailedAt == "" || ev.AcceptedAt == "" || ev.Attempts != 1 {
			t.Errorf("listed %+v", ev)
		}
		seen[ev.ID] = true
		want := []admin.Attempt{{Attempt: 1, At: "2026-05-01T10:00:00.123Z", DurationMS: 1500, Status: 502, Error: "the app answered 502: bad gateway"}}
		if fmt.Sprint(ev.AttemptsHistory) != fmt.Sprint(want) {
			t.Errorf("%s's history: %+v, want %+v", ev.ID, ev.AttemptsHistory, want)
		}
	}
	// The event's own view shows the same.
	r := f.do(t, http.MethodGet, "/v1/events/github/d3", "Bearer "+token)
	var one admin.Event
	if r.status != http.StatusOK || json.Unmarshal(r.body, &one) != nil || len(one.AttemptsHistory) != 1 || one.AttemptsHistory[0].Status != 502 || one.FailedAt == "" {
		t.Errorf("GET /v1/events/github/d3: %d %s", r.status, r.body)
	}
	// An event not yet attempted lists with an empty history, not none.
	storetest.MustEnqueue(t, st, prefix+"github:new")
	r = f.do(t, http.MethodGet, "/v1/events?state=queued", "Bearer "+token)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"attempts_history":[]`) {
		t.Errorf("queued event: %d %s, want attempts_history []", r.status, r.body)
	}
}
