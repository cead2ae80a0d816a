package test

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"testing"
	"time"
)

// orderedAcme is acme on an ordered route: the order key is the header
// X-Order-Key.
const orderedRoute = "/hooks/acme=header:X-Acme-Event-Id;async;order=header:X-Order-Key"

// orderKeys and perKey shape the ordered tests' traffic: event n is the
// (n / orderKeys)-th of key n % orderKeys.
const (
	orderKeys = 50
	perKey    = 10
)

// orderedEvent is acme's event n, carrying its order key.
func orderedEvent(n int) event {
	ev := acme.Event(n)
	ev.Extra = http.Header{"X-Order-Key": {fmt.Sprintf("key-%d", n%orderKeys)}}
	return ev
}

// failures is how many times the app answers 500 to the event id before
// it takes it: 0, 1 or 2, fixed by the ID.
func failures(id string) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % 3)
}

// TestAsyncOrderedDelivery: 50 keys of 10 events each, sent in turn, behind
// an app that fails each event 0 to 2 times and answers slowly: each key's
// app sees its events in the order of their 202s, one at a time (the
// attempts of one key, in the order they arrived, are the send order with
// retries repeated in place), on every async store, and across two
// proxies sharing Redis, Redis Cluster or PostgreSQL (each event sent to
// either, alternately: the order is the store's order of the 202s).
func TestAsyncOrderedDelivery(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		store   asyncStore
		proxies int
	}{
		{diskStore, 1},
		{redisStore, 2},
		{clusterStore, 2},
		{pgStore, 2},
	} {
		t.Run(tt.store.name, func(t *testing.T) {
			t.Parallel()
			app := newScriptedApp(t, func(id string, n int) (int, string) {
				time.Sleep(time.Duration(n%3) * 5 * time.Millisecond) // slow answers, of varying length
				if n <= failures(id) {
					return http.StatusInternalServerError, ""
				}
				return http.StatusOK, ""
			})
			env := asyncEnv(app.URL, tt.store.env(t))
			env["ROUTES"] = orderedRoute
			var pxs []*proxy
			for range tt.proxies {
				pxs = append(pxs, startProxy(t, env))
			}
			ctx, client := testContext(t), newClient(t)
			const n = orderKeys * perKey
			for i := range n {
				expect(t, "an ordered webhook", mustSend(t, ctx, client, pxs[i%len(pxs)], acme, orderedEvent(i)), 202, "queued")
			}
			// Each key's events one after the other, each taking its
			// failures plus one attempts.
			await(t, pxs[0].bounds().delivered(perKey*3), func() error {
				for i := range n {
					id := acme.Event(i).ID
					if got := len(app.seen(id)); got <= failures(id) {
						return fmt.Errorf("%s: %d attempts, wants %d", id, got, failures(id)+1)
					}
				}
				return nil
			})
			checkKeyOrder(t, app, n)
		})
	}
}

// checkKeyOrder checks that each key's attempts, in the order the app
// received them, are its events in the order they were sent, each
// repeated only in place (its retries).
func checkKeyOrder(t *testing.T, app *scriptedApp, n int) {
	t.Helper()
	seq := make(map[string]int, n) // event ID: its place in its key
	for i := range n {
		seq[acme.Event(i).ID] = i
	}
	byKey := make([][]int, orderKeys)
	for _, id := range app.arrivals() {
		if i, ok := seq[id]; ok {
			byKey[i%orderKeys] = append(byKey[i%orderKeys], i/orderKeys)
		}
	}
	for k, arrivals := range byKey {
		if got, want := slices.Compact(arrivals), []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(got, want) {
			t.Errorf("key-%d: the app saw its events in the order %v, want %v", k, got, want)
		}
	}
}

// TestAsyncOrderedHeadAfterKill: a proxy killed (SIGKILL) while the app
// holds the head of a key: the next proxy on the same store delivers that
// head again before anything behind it (DATA_DIR as soon as the file is
// reopened, Redis and PostgreSQL once LEASE_TTL has run out).
func TestAsyncOrderedHeadAfterKill(t *testing.T) {
	t.Parallel()
	for _, store := range []asyncStore{diskStore, redisStore, pgStore} {
		t.Run(store.name, func(t *testing.T) {
			t.Parallel()
			app := newScriptedApp(t, nil)
			release := app.holdAll()
			t.Cleanup(release)
			env := asyncEnv(app.URL, store.env(t))
			env["ROUTES"] = orderedRoute
			env["UPSTREAM_TIMEOUT"], env["LEASE_TTL"] = "2s", "3s"
			px := startProxy(t, env)
			ctx, client := testContext(t), newClient(t)
			const events = 3
			ids := make([]string, events) // one key's: events 0, orderKeys, 2*orderKeys
			for i := range events {
				ids[i] = acme.Event(i * orderKeys).ID
				expect(t, "an ordered webhook", mustSend(t, ctx, client, px, acme, orderedEvent(i*orderKeys)), 202, "queued")
			}
			head := ids[0]
			await(t, px.bounds().delivered(1), func() error {
				if len(app.seen(head)) == 0 {
					return fmt.Errorf("the head has not reached the app")
				}
				return nil
			})
			px.Kill()
			release()
			next := startProxy(t, env)
			await(t, next.bounds().delivered(events+1), func() error {
				for i, id := range ids {
					if len(app.seen(id)) == 0 {
						return fmt.Errorf("event %d not delivered", i)
					}
				}
				if len(app.seen(head)) < 2 {
					return fmt.Errorf("the head was not delivered again")
				}
				return nil
			})
			var got []string // the key's requests, in the order they arrived
			for _, id := range app.arrivals() {
				if slices.Contains(ids, id) {
					got = append(got, id)
				}
			}
			if len(got) < 2 || got[0] != head || got[1] != head || !slices.Equal(slices.Compact(slices.Clone(got)), ids) {
				t.Errorf("the app saw %v, want the head %s twice, then the others in order %v", got, head, ids[1:])
			}
		})
	}
}

// TestAsyncOrderedKeyHangs: on an ordered route, the app hangs on one
// key's head (until UPSTREAM_TIMEOUT, far longer than the test) and
// answers the other keys at once: the other keys' events are all
// delivered within besideHung's bound from the first one's send (the
// hung key holds one worker of DELIVERY_CONCURRENCY), while the hung
// key's events behind its head wait, unsent, on every async store.
func TestAsyncOrderedKeyHangs(t *testing.T) {
	t.Parallel()
	for _, store := range []asyncStore{diskStore, redisStore, pgStore} {
		t.Run(store.name, func(t *testing.T) {
			t.Parallel()
			app := newScriptedApp(t, nil)
			env := asyncEnv(app.URL, store.env(t))
			env["ROUTES"] = orderedRoute
			env["DELIVERY_CONCURRENCY"], env["UPSTREAM_TIMEOUT"], env["SHUTDOWN_TIMEOUT"] = "4", "120s", "1s"
			px := startProxy(t, env)
			ctx, client := testContext(t), newClient(t)
			keyed := func(n int, key string) event {
				ev := acme.Event(n)
				ev.Extra = http.Header{"X-Order-Key": {key}}
				return ev
			}
			// The hung key first: its head is being delivered (and hangs)
			// before the others are sent.
			const hungEvents = 3
			var hung []string
			for i := range hungEvents {
				hung = append(hung, acme.Event(i).ID)
				app.hang(acme.Event(i).ID)
				expect(t, "an ordered webhook", mustSend(t, ctx, client, px, acme, keyed(i, "hung")), 202, "queued")
			}
			await(t, px.bounds().delivered(1), func() error {
				if len(app.seen(hung[0])) == 0 {
					return fmt.Errorf("the hung key's head has not reached the app")
				}
				return nil
			})
			const keys, each = 6, 4
			start := time.Now()
			var others []string
			for i := range keys * each {
				n := 100 + i
				others = append(others, acme.Event(n).ID)
				expect(t, "an ordered webhook", mustSend(t, ctx, client, px, acme, keyed(n, fmt.Sprintf("key-%d", i%keys))), 202, "queued")
			}
			bound := px.bounds().besideHung(len(others), each, 1, 0)
			if limit := px.bounds().cfg.UpstreamTimeout; bound >= limit {
				t.Fatalf("the bound %s is not below UPSTREAM_TIMEOUT %s: the test could not tell a wait for the hung key", bound, limit)
			}
			await(t, bound, func() error {
				for _, id := range others {
					if len(app.seen(id)) == 0 {
						return fmt.Errorf("%s not delivered", id)
					}
				}
				return nil
			})
			t.Logf("%d events of %d other keys delivered in %s (bound %s) while one key hangs", len(others), keys, time.Since(start).Round(time.Millisecond), bound)
			if got := len(app.seen(hung[0])); got != 1 {
				t.Errorf("the hung head was sent %d times, want once (still waiting)", got)
			}
			for _, id := range hung[1:] {
				if got := len(app.seen(id)); got != 0 {
					t.Errorf("%s, behind the hung head, was sent %d times", id, got)
				}
			}
		})
	}
}
