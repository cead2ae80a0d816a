package delivery

import (
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// newReplyingApp is an upstream that reads the request and answers 201
// with body, as Content-Type text/xml.
func newReplyingApp(t *testing.T, body string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestCompletionReplay: with ReplayResponse an async completion keeps the
// app's response body and Content-Type, up to ReplayMaxBytes, as a sync
// route's does; a duplicate then finds them in the record the queue
// answers it with (the proxy replays that record). A larger body, or
// replay off, keeps neither.
func TestCompletionReplay(t *testing.T) {
	const answer = "<Response><Say>hi</Say></Response>"
	for _, tc := range []struct {
		name           string
		replay         bool
		maxBytes       int
		wantBody, want string // want: the Content-Type kept
	}{
		{name: "replay on", replay: true, maxBytes: 1024, wantBody: answer, want: "text/xml"},
		{name: "body over the limit", replay: true, maxBytes: len(answer) - 1},
		{name: "replay off", maxBytes: 1024},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newReplyingApp(t, answer)
			q := newQueue(t)
			req := webhookRequest(`{"id":"evt_1"}`)
			q.enqueue(t, "k", req)
			run(t, Config{Queue: q, Upstream: mustURL(t, a.URL), ReplayResponse: tc.replay, ReplayMaxBytes: tc.maxBytes})
			await(t, "completion", func() bool { return q.record(t, "k").State == dedup.Completed })

			queued, rec, err := q.Enqueue(context.Background(), "k", req, 0)
			if err != nil || queued {
				t.Fatalf("duplicate: queued %v, %v; want the completed record", queued, err)
			}
			if res := rec.Result; rec.State != dedup.Completed || res.Status != http.StatusCreated ||
				string(res.Body) != tc.wantBody || res.ContentType != tc.want {
				t.Errorf("the duplicate found %s %d %q %q; want completed, 201, %q, %q",
					rec.State, res.Status, res.ContentType, res.Body, tc.want, tc.wantBody)
			}
		})
	}
}

// TestCompletionBodyFingerprint: with BodyFingerprint an async completion
// also records its body under the body's key in the event's namespace,
// as a sync completion does, so that the same body under another ID is a
// duplicate, and the event's record keeps the whole fingerprint (the
// admin API's forget finds the body's key from it). Without BodyFingerprint,
// or when no route names the event's namespace any more, no body is
// recorded.
func TestCompletionBodyFingerprint(t *testing.T) {
	body := `{"id":"evt_1"}`
	sum := sha256.Sum256([]byte(body))
	for _, tc := range []struct {
		name        string
		fingerprint bool
		namespace   string
		wantBody    bool
	}{
		{name: "on", fingerprint: true, namespace: "github", wantBody: true},
		{name: "off", namespace: "github"},
		{name: "route gone", fingerprint: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newReplyingApp(t, "ok")
			q := newQueue(t)
			req := webhookRequest(body)
			req.Route, req.Namespace, req.TTL = "/hooks", tc.namespace, time.Hour
			q.enqueue(t, "p:github:d-1", req)
			stop := run(t, Config{Queue: q, Bodies: q, Upstream: mustURL(t, a.URL), BodyFingerprint: tc.fingerprint, KeyPrefix: "p:",
				ReplayResponse: true, ReplayMaxBytes: 1024})
			await(t, "completion", func() bool { return q.record(t, "p:github:d-1").State == dedup.Completed })
			stop() // the attempt has ended: its body is recorded, if ever

			if got := q.record(t, "p:github:d-1").Result.FullFingerprint; got != tc.fingerprint {
				t.Errorf("the event's record keeps the whole fingerprint: %v, want %v", got, tc.fingerprint)
			}
			rec := q.record(t, dedup.BodyKey("p:", "github", sum))
			switch {
			case !tc.wantBody && rec.State != dedup.Absent:
				t.Errorf("body record %s %+v; want none", rec.State, rec.Result)
			case tc.wantBody && (rec.State != dedup.Completed || rec.Result.Status != http.StatusCreated ||
				string(rec.Result.Body) != "ok" || rec.TTL <= 59*time.Minute || rec.TTL > time.Hour):
				t.Errorf("body record %s %+v, ttl %s; want the completion, replay included, for the event's 1h", rec.State, rec.Result, rec.TTL)
			}
			if rec := q.record(t, dedup.BodyKey("p:", "", sum)); rec.State != dedup.Absent {
				t.Errorf("body recorded without a namespace: %s %+v", rec.State, rec.Result)
			}
		})
	}
}
