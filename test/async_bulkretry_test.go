package test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestAsyncBulkRetry: behind an app that fails everything, every event is
// dead-lettered at its first attempt (RETRY_MAX_ATTEMPTS=1), logged with
// its namespace, ID and how to retry it; once the app recovers, one
// `retry --all` puts them all back, each is delivered once more and
// completes, and a second bulk retry, by the CLI or the API, finds none.
func TestAsyncBulkRetry(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	app := newScriptedApp(t, func(id string, n int) (int, string) {
		if broken.Load() {
			return http.StatusInternalServerError, ""
		}
		return http.StatusOK, ""
	})
	env := asyncEnv(app.URL, diskStore.env(t))
	env["RETRY_MAX_ATTEMPTS"] = "1"
	px := startProxy(t, env)
	const n = 6
	queueEvents(t, px, acme, n)
	b := px.bounds()
	for i := range n {
		px.awaitState(t, acme, acme.Event(i).ID, "failed", b.delivered(1))
	}
	px.awaitLog(t, `"retry_with":"webhook-dedup retry /hooks/acme `, n)

	broken.Store(false)
	cliEnv := map[string]string{"ADMIN_ADDR": px.Admin, "ADMIN_TOKEN": adminToken}
	code, out, errOut := cli(t, cliEnv, "retry", "--all", "--namespace", "/hooks/acme")
	if code != 0 || out != "dead letters queued again: 6\n" {
		t.Fatalf("webhook-dedup retry --all: exit %d, %q %q; want the 6 queued again", code, out, errOut)
	}
	for i := range n {
		id := acme.Event(i).ID
		if done := px.awaitState(t, acme, id, "completed", b.delivered(1)); done.Attempts != 1 {
			t.Errorf("%s completed after %d attempts since the retry, want 1 (a new first attempt)", id, done.Attempts)
		}
		if seen := app.seen(id); len(seen) != 2 || seen[1].header != "1" {
			t.Errorf("%s: the app saw %+v, want the failed attempt and one delivery after the retry, marked attempt 1", id, seen)
		}
	}
	if code, out, errOut := cli(t, cliEnv, "retry", "--all"); code != 0 || out != "dead letters queued again: 0\n" {
		t.Errorf("a second retry --all: exit %d, %q %q; want none queued", code, out, errOut)
	}
	r := px.adminDo(t, http.MethodPost, "/v1/dead-letters/retry", adminToken)
	var res struct {
		Requeued   *int    `json:"requeued"`
		NextCursor *string `json:"next_cursor"`
	}
	if err := json.Unmarshal(r.Body, &res); err != nil || r.Status != 200 || res.Requeued == nil || *res.Requeued != 0 || res.NextCursor == nil || *res.NextCursor != "" {
		t.Errorf("POST /v1/dead-letters/retry after it all: %s, want 200 {\"requeued\":0,\"next_cursor\":\"\"}", r)
	}
	if total := app.total(); total != 2*n {
		t.Errorf("the app received %d requests, want %d (each event failed once, delivered once)", total, 2*n)
	}
	if strings.Contains(px.Logs(), `"max_age":259200`) {
		t.Error("the start-up line gives RETRY_MAX_AGE in seconds")
	}
}
