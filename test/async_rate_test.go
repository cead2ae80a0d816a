package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"
)

// rateRoutes is ROUTES with acme's route async and options after it, and
// jsonPath's async without any: the route beside it, which nothing of
// acme's may hold back.
func rateRoutes(options string) string {
	return acme.Path + "=" + acme.Source + ";async" + options + "," + jsonPath.Path + "=" + jsonPath.Source + ";async"
}

// arrivalTimes is every attempt the app saw, in time order.
func (a *scriptedApp) arrivalTimes() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	var all []time.Time
	for _, seen := range a.attempts {
		for _, s := range seen {
			all = append(all, s.at)
		}
	}
	slices.SortFunc(all, func(x, y time.Time) int { return x.Compare(y) })
	return all
}

// startTimes is when the proxy started each attempt of events 0…n-1 of
// p, in time order, as each event's attempts_history records it (the
// moment the route's pacer let the attempt start, to the millisecond):
// what a rate= promises about.
func (p *proxy) startTimes(t testing.TB, pv provider, n int) []time.Time {
	t.Helper()
	var all []time.Time
	for i := range n {
		id := pv.Event(i).ID
		a := p.adminDo(t, http.MethodGet, "/v1/events/"+url.PathEscape(namespace(pv))+"/"+url.PathEscape(id), adminToken)
		var ev struct {
			History []struct {
				At string `json:"at"`
			} `json:"attempts_history"`
		}
		if a.Status != http.StatusOK || json.Unmarshal(a.Body, &ev) != nil {
			t.Fatalf("GET event %s: %s", id, a)
		}
		for _, h := range ev.History {
			at, err := time.Parse(time.RFC3339Nano, h.At)
			if err != nil {
				t.Fatalf("event %s: attempts_history at %q: %v", id, h.At, err)
			}
			all = append(all, at)
		}
	}
	slices.SortFunc(all, func(x, y time.Time) int { return x.Compare(y) })
	return all
}

// mostWithin is the most of ts (sorted) within any window of length d.
func mostWithin(ts []time.Time, d time.Duration) int {
	most, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= d {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// TestAsyncRouteRate: rate=10/s spaces a route's attempts, retries
// included, as the proxy starts them: 40 events queued at once, every
// fourth failing its first attempt, are attempted with no second holding
// more than 11 starts (N, and the one extra a rate allows at the start of
// a window), spread over no less than the rate's time for them all; the
// route reads paused, and its queue's depth the whole queue's, while its
// events wait their turn, and not paused once they are all delivered. On
// each store that keeps a queue in one process's reach (DATA_DIR) and one
// shared (Redis).
//
// The starts are the proxy's own, from each event's attempts_history:
// the promise is about them. What the app sees is logged beside them, not
// checked: each attempt reaches it later by the time its connection and
// the scheduling of both processes take, which on a loaded machine varies
// by more than an interval, so attempts started on time may arrive
// bunched (docs/ordering.md says so).
func TestAsyncRouteRate(t *testing.T) {
	t.Parallel()
	const events, rate = 40, 10
	attempts := events + events/4
	for _, st := range []asyncStore{diskStore, redisStore} {
		t.Run(st.name, func(t *testing.T) {
			app := newScriptedApp(t, func(id string, n int) (int, string) {
				if i, _ := strconv.Atoi(id[len("acme-"):]); i%4 == 0 && n == 1 {
					return http.StatusInternalServerError, ""
				}
				return http.StatusOK, ""
			})
			env := asyncEnv(app.URL, st.env(t))
			env["ROUTES"] = rateRoutes(fmt.Sprintf(";rate=%d/s", rate))
			px := startProxy(t, env)
			interval := px.bounds().cfg.RouteSpecs[0].Rate.Interval()
			queueEvents(t, px, acme, events)
			// 40 events at 10/s: the last waits four seconds, and the route
			// reads paused meanwhile. Not awaited with a failure, so that
			// the rate's own checks below say what they find too.
			// So does its queue's depth, and the other route's none.
			sawPaused, sawDepth := false, false
			for end := time.Now().Add(px.bounds().observed()); !(sawPaused && sawDepth) && time.Now().Before(end) && app.total() < attempts; time.Sleep(pollInterval) {
				fams := px.metrics(t)
				sawPaused = sawPaused || sample(fams, "webhook_dedup_route_paused", map[string]string{"route": acme.Path}) == 1
				depth := sample(fams, "webhook_dedup_route_queue_depth", map[string]string{"route": acme.Path})
				sawDepth = sawDepth || depth > 0 && depth == sample(fams, "webhook_dedup_queue_depth", nil)
			}
			if !sawPaused {
				t.Errorf("webhook_dedup_route_paused{route=%q} never 1 while its events waited their turn", acme.Path)
			}
			if !sawDepth {
				t.Errorf("webhook_dedup_route_queue_depth{route=%q} never showed the queue's depth while its events waited their turn", acme.Path)
			}
			await(t, time.Duration(attempts)*interval+px.bounds().delivered(2), func() error {
				if n := app.total(); n < attempts {
					return fmt.Errorf("%d of %d attempts reached the app", n, attempts)
				}
				return nil
			})
			// Every attempt is in its event's history once the event is
			// completed: the history is written with the outcome.
			for i := range events {
				px.awaitState(t, acme, acme.Event(i).ID, "completed", px.bounds().delivered(1))
			}
			all := px.startTimes(t, acme, events)
			if len(all) != attempts {
				t.Fatalf("%d attempts in the events' histories, want %d", len(all), attempts)
			}
			if most := mostWithin(all, time.Second); most > rate+1 {
				t.Errorf("%d attempts started within a second, want at most %d", most, rate+1)
			}
			if span, least := all[len(all)-1].Sub(all[0]), time.Duration(attempts-2)*interval; span < least {
				t.Errorf("%d attempts started over %s, want no less than %s at %d/s", len(all), span, least, rate)
			}
			arrived := app.arrivalTimes()
			t.Logf("%d attempts started over %s, at most %d within a second; the app saw %d over %s, at most %d within a second",
				len(all), all[len(all)-1].Sub(all[0]).Round(time.Millisecond), mostWithin(all, time.Second),
				len(arrived), arrived[len(arrived)-1].Sub(arrived[0]).Round(time.Millisecond), mostWithin(arrived, time.Second))
			await(t, px.bounds().observed(), func() error {
				if v := sample(px.metrics(t), "webhook_dedup_route_paused", map[string]string{"route": acme.Path}); v != 0 {
					return fmt.Errorf("webhook_dedup_route_paused{route=%q} = %v once all is delivered, want 0", acme.Path, v)
				}
				return nil
			})
		})
	}
}

// TestAsyncRoutePause: a 429 or a 503 with Retry-After pauses every new
// attempt of its route until then, capped at RETRY_MAX_INTERVAL, and not
// the route beside it: once the proxy reads the route paused, the events
// queued on it stay queued with no attempt counted, and reach the app no
// sooner than the pause's end (counted from the moment the app was
// asked, before its answer), and, under the cap, well before the
// Retry-After; the other route's are delivered meanwhile.
func TestAsyncRoutePause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		st          asyncStore
		status      int
		retryAfter  string
		maxInterval string
		options     string
	}{
		{"429 on DATA_DIR", diskStore, http.StatusTooManyRequests, "3", "5s", ""},
		{"429 on Redis", redisStore, http.StatusTooManyRequests, "3", "5s", ""},
		{"503 on a route with a rate", diskStore, http.StatusServiceUnavailable, "3", "5s", ";rate=50/s"},
		{"Retry-After beyond RETRY_MAX_INTERVAL", diskStore, http.StatusTooManyRequests, "60", "1s", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const others = 10
			first := acme.Event(0).ID
			app := newScriptedApp(t, func(id string, n int) (int, string) {
				if id == first && n == 1 {
					return tc.status, tc.retryAfter
				}
				return http.StatusOK, ""
			})
			env := asyncEnv(app.URL, tc.st.env(t))
			env["ROUTES"] = rateRoutes(tc.options)
			env["RETRY_MAX_INTERVAL"] = tc.maxInterval
			px := startProxy(t, env)
			b := px.bounds()
			secs, _ := strconv.Atoi(tc.retryAfter)
			pause := min(time.Duration(secs)*time.Second, b.cfg.RetryMaxInterval)

			queueEvents(t, px, acme, 1)
			await(t, b.delivered(1), func() error {
				if len(app.seen(first)) == 0 {
					return fmt.Errorf("the app has not seen %s", first)
				}
				return nil
			})
			asked := app.seen(first)[0].at
			await(t, b.observed(), func() error {
				fams := px.metrics(t)
				if v := sample(fams, "webhook_dedup_route_paused", map[string]string{"route": acme.Path}); v != 1 {
					return fmt.Errorf("webhook_dedup_route_paused{route=%q} = %v after the app's %d, want 1", acme.Path, v, tc.status)
				}
				return nil
			})
			if v := sample(px.metrics(t), "webhook_dedup_route_paused", map[string]string{"route": jsonPath.Path}); v != 0 {
				t.Errorf("webhook_dedup_route_paused{route=%q} = %v, want 0: only acme's app asked for a pause", jsonPath.Path, v)
			}
			ctx, client := testContext(t), newClient(t)
			for i := 1; i <= others; i++ {
				expect(t, "an event of the paused route", mustSend(t, ctx, client, px, acme, acme.Event(i)), 202, "queued")
				expect(t, "an event of the other route", mustSend(t, ctx, client, px, jsonPath, jsonPath.Event(i)), 202, "queued")
			}
			// The other route is not paused: its events are delivered
			// at once, before the pause ends (if it is long enough to
			// tell).
			await(t, b.drained(others, 0)+loadMargin, func() error {
				for i := 1; i <= others; i++ {
					if px.event(t, jsonPath, jsonPath.Event(i).ID).State != "completed" {
						return fmt.Errorf("%s not delivered during the other route's pause", jsonPath.Event(i).ID)
					}
				}
				return nil
			})
			if pause > time.Second && time.Now().After(asked.Add(pause)) {
				t.Errorf("the other route's events were delivered only %s after acme's pause of %s began: it was held back too", time.Since(asked), pause)
			}
			// Meanwhile the paused route's events stay queued, none
			// taken and no attempt counted, until a poll before the
			// pause's end.
			if pause > time.Second && time.Until(asked.Add(pause)) > time.Second {
				for i := 1; i <= others; i++ {
					if ev := px.event(t, acme, acme.Event(i).ID); ev.State != "queued" || ev.Attempts != 0 {
						t.Errorf("%s during the route's pause: %+v, want queued with no attempt", acme.Event(i).ID, ev)
					}
				}
			}
			// Every acme event after the pause; under the cap, long
			// before the Retry-After asked for.
			await(t, pause+b.drained(others+1, 0)+loadMargin, func() error {
				for i := 0; i <= others; i++ {
					if len(app.seen(acme.Event(i).ID)) == 0 || (i == 0 && len(app.seen(first)) < 2) {
						return fmt.Errorf("%s not delivered after the pause", acme.Event(i).ID)
					}
				}
				return nil
			})
			for i := 0; i <= others; i++ {
				seen := app.seen(acme.Event(i).ID)
				if i == 0 {
					seen = seen[1:]
				}
				for _, s := range seen {
					if early := asked.Add(pause).Sub(s.at); early > 0 {
						t.Errorf("%s reached the app %s before the route's pause of %s ended", acme.Event(i).ID, early, pause)
					}
				}
			}
			await(t, b.observed(), func() error {
				if v := sample(px.metrics(t), "webhook_dedup_route_paused", map[string]string{"route": acme.Path}); v != 0 {
					return fmt.Errorf("webhook_dedup_route_paused{route=%q} = %v after the pause, want 0", acme.Path, v)
				}
				return nil
			})
		})
	}
}
