package test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestAsyncHeaderBytesKept: a header value with bytes that are not UTF-8
// (obs-text, which HTTP allows) reaches the app as it came, byte for
// byte, on every store that keeps the queue: on PostgreSQL it reached the
// app with U+FFFD in their place.
func TestAsyncHeaderBytesKept(t *testing.T) {
	t.Parallel()
	for _, st := range []asyncStore{diskStore, redisStore, pgStore} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			raw := "caf\xe9 \xff\xfe"
			var mu sync.Mutex
			var got []string
			app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				mu.Lock()
				got = append(got, r.Header.Values("X-Raw")...)
				mu.Unlock()
			}))
			t.Cleanup(app.Close)
			env := st.env(t)
			env["UPSTREAM_URL"], env["ROUTES"], env["ALLOW_UNVERIFIED_ASYNC"] = app.URL, "/hooks=header:X-Id;async", "true"
			px := launch(t, env)
			px.waitHealthy()
			px.awaitReady(t)
			req, err := http.NewRequest(http.MethodPost, px.URL("/hooks"), bytes.NewReader([]byte("{}")))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Id", "e-1")
			req.Header.Set("X-Raw", raw)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("answered %d, want 202 queued", resp.StatusCode)
			}
			await(t, px.bounds().delivered(1), func() error {
				mu.Lock()
				defer mu.Unlock()
				if len(got) == 0 {
					return errors.New("the app never got the event")
				}
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			if got[0] != raw {
				t.Errorf("the app got X-Raw %q, want %q byte for byte", got[0], raw)
			}
		})
	}
}
