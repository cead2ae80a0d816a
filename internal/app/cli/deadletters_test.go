package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/dedup/diskstore"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// TestDeadLettersFilteredByServer: dead-letters sends its filters to the
// admin API (GET /v1/events?state=failed…) and pages with its cursor up
// to --limit, or asks the store's listing the same when it opens the
// store; both list the same dead letters, a route path holding ':' as
// its namespace included.
func TestDeadLettersFilteredByServer(t *testing.T) {
	dir := t.TempDir()
	st, err := diskstore.Open(diskstore.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	storetest.DeadLetter(t, st, "wd:stripe:old")
	// A millisecond (the stores' precision) after the first failure's,
	// and before the others'.
	last := time.Now().Truncate(time.Millisecond)
	for !time.Now().Truncate(time.Millisecond).After(last) {
	}
	mid := time.Now().Truncate(time.Millisecond)
	for !time.Now().Truncate(time.Millisecond).After(mid) {
	}
	storetest.DeadLetter(t, st, "wd:stripe:a", "wd:stripe:b", "wd:stripe:c", "wd:github:d", "wd:/hooks/a:b:c")

	var mu sync.Mutex
	var asked []url.Values
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" {
			mu.Lock()
			asked = append(asked, r.URL.Query())
			mu.Unlock()
		}
		admin.New(admin.Config{Store: st, DeadLetters: st, Events: st, Gatherer: prometheus.NewRegistry(), Token: "t", KeyPrefix: "wd:"}).ServeHTTP(w, r)
	}))
	t.Cleanup(api.Close)
	u, _ := url.Parse(api.URL)
	viaAPI := map[string]string{"ADMIN_ADDR": u.Host, "ADMIN_TOKEN": "t"}
	direct := map[string]string{"DATA_DIR": dir, "KEY_PREFIX": "wd:"}
	since := mid.UTC().Format(time.RFC3339Nano)

	for _, tc := range []struct {
		args []string
		want []string
		// pages is how many the API is asked for, and the last one's query.
		pages int
		last  url.Values
	}{
		{[]string{"--namespace", "stripe"}, []string{"stripe old", "stripe a", "stripe b", "stripe c"}, 1,
			url.Values{"state": {"failed"}, "namespace": {"stripe"}, "limit": {"1000"}}},
		{[]string{"--namespace", "stripe", "--since", since}, []string{"stripe a", "stripe b", "stripe c"}, 1,
			url.Values{"state": {"failed"}, "namespace": {"stripe"}, "since": {since}, "limit": {"1000"}}},
		{[]string{"--until", since}, []string{"stripe old"}, 1,
			url.Values{"state": {"failed"}, "until": {since}, "limit": {"1000"}}},
		{[]string{"--namespace", "/hooks/a:b"}, []string{"/hooks/a:b c"}, 1,
			url.Values{"state": {"failed"}, "namespace": {"/hooks/a:b"}, "limit": {"1000"}}},
		{[]string{"--namespace", "strip"}, nil, 1, url.Values{"state": {"failed"}, "namespace": {"strip"}, "limit": {"1000"}}},
		{[]string{"--namespace", "stripe", "--limit", "3"}, []string{"stripe old", "stripe a", "stripe b"}, 1,
			url.Values{"state": {"failed"}, "namespace": {"stripe"}, "limit": {"3"}}},
	} {
		for _, via := range []struct {
			name string
			env  map[string]string
		}{{"admin API", viaAPI}, {"store", direct}} {
			name := via.name + " " + strings.Join(tc.args, " ")
			if via.name == "store" {
				// The command opens DATA_DIR, which one process holds at a time.
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
			}
			mu.Lock()
			asked = nil
			mu.Unlock()
			out, err := runCommand(via.env, append([]string{"dead-letters", "-o", "json"}, tc.args...)...)
			if via.name == "store" {
				if st, err = diskstore.Open(diskstore.Config{Dir: dir}); err != nil {
					t.Fatal(err)
				}
			}
			var page admin.DeadLetterPage
			if err != nil || json.Unmarshal([]byte(out), &page) != nil {
				t.Errorf("%s: %q, %v", name, out, err)
				continue
			}
			var got []string
			for _, dl := range page.DeadLetters {
				got = append(got, dl.Namespace+" "+dl.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("%s: listed %q, want %q", name, got, tc.want)
			}
			mu.Lock()
			if via.name == "admin API" && (len(asked) != tc.pages || !equalQuery(asked[len(asked)-1], tc.last)) {
				t.Errorf("%s: the API was asked %v, want %d pages, the last %v", name, asked, tc.pages, tc.last)
			}
			mu.Unlock()
		}
	}
	t.Cleanup(func() { _ = st.Close() })
}

func equalQuery(a, b url.Values) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
