package test

import (
	"net/http"
	"testing"
)

// TestRedirectIsNotDone: only a 2xx means the app took an event. An app
// answering its first attempt 302 (a moved endpoint, a login page) has
// not: on a sync route the 302 reaches the sender as it is and the
// sender's retry is forwarded; on an async route the event is retried.
// Either way the app sees the event twice and it completes once.
func TestRedirectIsNotDone(t *testing.T) {
	t.Parallel()
	redirectFirst := func(_ string, n int) (int, string) {
		if n == 1 {
			return http.StatusFound, ""
		}
		return http.StatusOK, ""
	}
	t.Run("sync", func(t *testing.T) {
		t.Parallel()
		app := newScriptedApp(t, redirectFirst)
		env := map[string]string{"UPSTREAM_URL": app.URL, "ROUTES": routes(allProviders...)}
		for k, v := range signedSecrets {
			env[k] = v
		}
		px := startProxy(t, env)
		ctx, client := testContext(t), newClient(t)
		// A webhook sender does not follow redirects: the 302 is its answer.
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		ev := acme.Event(1)
		expect(t, "first delivery, which the app redirects", mustSend(t, ctx, client, px, acme, ev), http.StatusFound, "forwarded")
		expect(t, "the sender's retry", mustSend(t, ctx, client, px, acme, ev), http.StatusOK, "forwarded")
		expect(t, "a copy after the 200", mustSend(t, ctx, client, px, acme, ev), http.StatusOK, "duplicate")
		if seen := app.seen(ev.ID); len(seen) != 2 {
			t.Errorf("the app saw %d requests for the event, want 2 (the redirected one and the retry)", len(seen))
		}
	})
	t.Run("async", func(t *testing.T) {
		t.Parallel()
		app := newScriptedApp(t, redirectFirst)
		px := startProxy(t, asyncEnv(app.URL, diskStore.env(t)))
		ev := acme.Event(1)
		expect(t, "delivery", mustSend(t, testContext(t), newClient(t), px, acme, ev), http.StatusAccepted, "queued")
		done := px.awaitState(t, acme, ev.ID, "completed", px.bounds().delivered(2))
		if done.Attempts != 2 {
			t.Errorf("completed after %d attempts, want 2: the 302 is a failed attempt, retried", done.Attempts)
		}
		var attempts []string
		for _, a := range app.seen(ev.ID) {
			attempts = append(attempts, a.header)
		}
		if len(attempts) != 2 || attempts[0] != "1" || attempts[1] != "2" {
			t.Errorf("the app saw attempts %q, want 1 and 2", attempts)
		}
	})
}
