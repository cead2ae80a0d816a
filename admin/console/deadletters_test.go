package console_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

var (
	rowRE  = regexp.MustCompile(`data-namespace="([^"]*)" data-event-id="([^"]*)"`)
	nextRE = regexp.MustCompile(`<a href="([^"]*)" rel="next">`)
)

// listed follows the dead-letter page from path through its Next links
// and returns the events listed, "namespace id" each, in order.
func (f *fixture) listed(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for pages := 0; path != ""; pages++ {
		if pages > 20 {
			t.Fatal("more than 20 pages")
		}
		r := f.do(t, http.MethodGet, path, nil, map[string]string{"Authorization": "Bearer " + token})
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		for _, m := range rowRE.FindAllStringSubmatch(r.body, -1) {
			out = append(out, html.UnescapeString(m[1])+" "+html.UnescapeString(m[2]))
		}
		path = ""
		if m := nextRE.FindStringSubmatch(r.body); m != nil {
			path = html.UnescapeString(m[1])
		}
	}
	return out
}

// msBoundary returns a millisecond (the stores' precision) that began
// after every earlier time, once the clock has passed it: what fails
// before the call is before it, what fails after is at or after it.
func msBoundary() time.Time {
	last := time.Now().Truncate(time.Millisecond)
	for !time.Now().Truncate(time.Millisecond).After(last) {
	}
	at := time.Now().Truncate(time.Millisecond)
	for !time.Now().Truncate(time.Millisecond).After(at) {
	}
	return at
}

// TestDeadLettersPageFilters: the dead-letter page lists what the filter
// chooses (namespace, failed after and before, read by the store's
// listing; last status, matched by the console), a page at a time through
// its Next links, and "Retry all matching" queues again those alone.
func TestDeadLettersPageFilters(t *testing.T) {
	f := newFixture(t, token)
	req := storetest.Request
	storetest.DeadLetter(t, f.st, prefix+"github:g-old")
	deadLetterWith(t, f.st, prefix+"/hooks/acme:a-old", req, 1) // no answer
	t1 := msBoundary()
	storetest.DeadLetter(t, f.st, prefix+"github:g-new", prefix+"/hooks/acme:a-new")
	deadLetterWith(t, f.st, prefix+"github:g-none", req, 1)
	after := t1.UTC().Format(time.RFC3339Nano)
	for _, tc := range []struct {
		name  string
		query url.Values
		want  []string
	}{
		{"every one", url.Values{}, []string{"github g-old", "/hooks/acme a-old", "/hooks/acme a-new", "github g-new", "github g-none"}},
		{"a namespace", url.Values{"namespace": {"github"}}, []string{"github g-old", "github g-new", "github g-none"}},
		{"a route path as namespace", url.Values{"namespace": {"/hooks/acme"}}, []string{"/hooks/acme a-old", "/hooks/acme a-new"}},
		{"failed after", url.Values{"failed_after": {after}}, []string{"/hooks/acme a-new", "github g-new", "github g-none"}},
		{"failed before", url.Values{"failed_before": {after}}, []string{"github g-old", "/hooks/acme a-old"}},
		{"no answer", url.Values{"status": {"none"}}, []string{"/hooks/acme a-old", "github g-none"}},
		{"all at once", url.Values{"namespace": {"github"}, "failed_after": {after}, "status": {"5xx"}}, []string{"github g-new"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, limit := range []string{"1", "2", "50"} {
				q := url.Values{}
				for k, v := range tc.query {
					q[k] = v
				}
				q.Set("limit", limit)
				got := f.listed(t, "/ui/dead-letters?"+q.Encode())
				// The same failure millisecond lists by key: compare as sets
				// where the store's order is not the test's to fix.
				slices.Sort(got)
				want := slices.Clone(tc.want)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("limit %s: listed %v, want %v", limit, got, want)
				}
			}
		})
	}
	t.Run("retry all matching", func(t *testing.T) {
		form := url.Values{"namespace": {"github"}, "failed_after": {after}, "status": {"500"}, "return": {"/ui/dead-letters"}}
		r := f.do(t, http.MethodPost, "/ui/dead-letters/retry-all", form, map[string]string{"Authorization": "Bearer " + token})
		if r.status != http.StatusSeeOther || !strings.Contains(r.header.Get("Location"), "requeued=1") {
			t.Fatalf("%d, Location %q: want 303 saying 1 requeued", r.status, r.header.Get("Location"))
		}
		for _, k := range []string{"github:g-old", "/hooks/acme:a-old", "/hooks/acme:a-new", "github:g-new", "github:g-none"} {
			want := dedup.Failed
			if k == "github:g-new" {
				want = dedup.Queued
			}
			if rec, err := f.st.Lookup(context.Background(), prefix+k); err != nil || rec.State != want {
				t.Errorf("%s: %v %v, want %v", k, rec.State, err, want)
			}
		}
	})
}
