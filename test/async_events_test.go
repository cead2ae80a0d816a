package test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
)

// TestAsyncEventsListing: behind an app that fails some events twice
// before taking them and always fails the others, the events listing
// shows each group under its state (completed, failed) with every
// attempt in its history, 3 and RETRY_MAX_ATTEMPTS, and its cursor pages
// through each event exactly once.
func TestAsyncEventsListing(t *testing.T) {
	t.Parallel()
	const n, maxAttempts = 7, 4
	flaky := map[string]bool{}
	for i := range n {
		if i%2 == 0 {
			flaky[acme.Event(i).ID] = true
		}
	}
	app := newScriptedApp(t, func(id string, seen int) (int, string) {
		if flaky[id] && seen > 2 {
			return http.StatusOK, ""
		}
		return http.StatusInternalServerError, ""
	})
	env := asyncEnv(app.URL, diskStore.env(t))
	env["RETRY_MAX_ATTEMPTS"] = "4"
	px := startProxy(t, env)
	queueEvents(t, px, acme, n)
	b := px.bounds()
	want := map[string]string{} // id → state
	for i := range n {
		id := acme.Event(i).ID
		want[id] = "failed"
		if flaky[id] {
			want[id] = "completed"
		}
		px.awaitState(t, acme, id, want[id], b.delivered(maxAttempts))
	}

	seen := map[string]int{}
	for _, state := range []string{"completed", "failed"} {
		cursor, pages := "", 0
		for ; pages == 0 || cursor != ""; pages++ {
			q := url.Values{"state": {state}, "namespace": {"/hooks/acme"}, "limit": {"2"}, "cursor": {cursor}}
			r := px.adminDo(t, http.MethodGet, "/v1/events?"+q.Encode(), adminToken)
			var page struct {
				Events []struct {
					Namespace, ID, State string
					Attempts             int
					History              []struct {
						Attempt    int    `json:"attempt"`
						At         string `json:"at"`
						DurationMS *int64 `json:"duration_ms"`
						Status     int    `json:"status"`
						Error      string `json:"error"`
					} `json:"attempts_history"`
				} `json:"events"`
				NextCursor string `json:"next_cursor"`
			}
			if r.Status != http.StatusOK || json.Unmarshal(r.Body, &page) != nil || len(page.Events) > 2 || pages > n {
				t.Fatalf("GET /v1/events?%s: %s", q.Encode(), r)
			}
			for _, ev := range page.Events {
				seen[ev.ID]++
				attempts := maxAttempts
				if want[ev.ID] == "completed" {
					attempts = 3
				}
				if ev.State != state || want[ev.ID] != state || ev.Namespace != "/hooks/acme" || ev.Attempts != attempts || len(ev.History) != attempts {
					t.Errorf("listed under %s: %s %s with %d attempts and a history of %d, want %s with %d", state, ev.ID, ev.State, ev.Attempts, len(ev.History), want[ev.ID], attempts)
					continue
				}
				for i, a := range ev.History {
					ok := a.Attempt == i+1 && a.At != "" && a.DurationMS != nil && a.Status == http.StatusInternalServerError && a.Error != ""
					if i == attempts-1 && state == "completed" {
						ok = a.Attempt == i+1 && a.Status == http.StatusOK && a.Error == ""
					}
					if !ok {
						t.Errorf("%s's attempt %d: %+v", ev.ID, i+1, a)
					}
				}
			}
			cursor = page.NextCursor
		}
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("%s listed %d times, want once", id, seen[id])
		}
	}
}
