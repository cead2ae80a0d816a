package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/diskstore"
	"github.com/webhook-dedup/webhook-dedup/policy"
	"github.com/webhook-dedup/webhook-dedup/providers"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/delivery"
	"github.com/webhook-dedup/webhook-dedup/internal/intake"
	"github.com/webhook-dedup/webhook-dedup/proxy"

	// Named apart from this package's upstream, the test app.
	upstreamhttp "github.com/webhook-dedup/webhook-dedup/upstream"
)

// queueStore is the embedded store on disk, whose Enqueue can be made to
// fail as a store's does during an outage.
type queueStore struct {
	*diskstore.Store
	down atomic.Bool
}

func newQueueStore(t *testing.T) *queueStore {
	d, err := diskstore.Open(diskstore.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return &queueStore{Store: d}
}

func (q *queueStore) Enqueue(ctx context.Context, key string, req dedup.Request, maxDepth int) (bool, dedup.Record, error) {
	if q.down.Load() {
		return false, dedup.Record{}, errors.New("fake: connection refused")
	}
	return q.Store.Enqueue(ctx, key, req, maxDepth)
}

// request is the request queued under key, as a worker takes it.
func (q *queueStore) request(t *testing.T, key string) (dedup.Request, bool) {
	t.Helper()
	ds, err := q.Take(context.Background(), dedup.AllRoutes, 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Claim.Key == key {
			return d.Request, true
		}
	}
	return dedup.Request{}, false
}

// TestAsyncAccept: a first-seen webhook on an async route is queued and
// answered 202 queued without reaching the app; its request is kept whole
// (a header-sourced route reads the body too); copies are duplicates.
func TestAsyncAccept(t *testing.T) {
	q := newQueueStore(t)
	var nudges atomic.Int32
	f := newFixture(t, "/hooks=header:X-Id;async,/sync=header:X-Id", proxy.Config{Store: q, Queue: q, Enqueued: func(string) { nudges.Add(1) }})
	body := strings.Repeat("payload ", 100)
	resp := f.post(t, "/hooks/a?x=1", map[string]string{"X-Id": "e1", "X-Extra": "v"}, body)
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get(proxy.HeaderOutcome) != "queued" {
		t.Fatalf("first copy: %d %q, want 202 queued", resp.StatusCode, resp.Header.Get(proxy.HeaderOutcome))
	}
	var ans map[string]string
	if err := json.Unmarshal([]byte(readAll(t, resp)), &ans); err != nil || ans["status"] != "queued" || ans["event_id"] != "e1" {
		t.Errorf("first copy's body: %v %v", ans, err)
	}
	if n := f.up.calls.Load(); n != 0 {
		t.Errorf("the app was called %d times by the accept path", n)
	}
	if n := nudges.Load(); n != 1 {
		t.Errorf("Enqueued called %d times, want 1", n)
	}
	req, ok := q.request(t, "test:/hooks:e1")
	if !ok {
		t.Fatal("nothing queued under test:/hooks:e1")
	}
	if req.Method != "POST" || req.RequestURI != "/hooks/a?x=1" || req.Host == "" || req.Header.Get("X-Extra") != "v" ||
		string(req.Body) != body || req.RemoteAddr == "" || req.TLS {
		t.Errorf("queued %+v", req)
	}
	for i := 0; i < 2; i++ {
		dup := f.post(t, "/hooks/a", map[string]string{"X-Id": "e1"}, "other")
		if dup.StatusCode != 200 || dup.Header.Get(proxy.HeaderOutcome) != "duplicate" {
			t.Errorf("copy %d: %d %q, want 200 duplicate", i+2, dup.StatusCode, dup.Header.Get(proxy.HeaderOutcome))
		}
	}
	if n := nudges.Load(); n != 1 {
		t.Errorf("Enqueued called %d times after duplicates, want 1", n)
	}
	if got := f.counter(t, "webhook_dedup_requests_total", "outcome", "queued"); got != 1 {
		t.Errorf("requests_total{outcome=queued} = %v, want 1", got)
	}
	// The sync route beside it still forwards.
	if resp := f.post(t, "/sync", map[string]string{"X-Id": "e1"}, "x"); resp.Header.Get(proxy.HeaderOutcome) != "forwarded" {
		t.Errorf("sync route: %q, want forwarded", resp.Header.Get(proxy.HeaderOutcome))
	}
}

// TestAsyncStatus200: ASYNC_STATUS=200 answers queued events with 200.
func TestAsyncStatus200(t *testing.T) {
	q := newQueueStore(t)
	f := newFixture(t, "/hooks=header:X-Id;async", proxy.Config{Store: q, Queue: q, AsyncStatus: 200})
	resp := f.post(t, "/hooks", map[string]string{"X-Id": "e1"}, "{}")
	if resp.StatusCode != 200 || resp.Header.Get(proxy.HeaderOutcome) != "queued" {
		t.Fatalf("%d %q, want 200 queued", resp.StatusCode, resp.Header.Get(proxy.HeaderOutcome))
	}
}

// TestAsyncDuplicateOfSyncInFlight: an event a sync delivery holds (the
// route just turned async) is answered in flight, not queued twice.
func TestAsyncDuplicateOfSyncInFlight(t *testing.T) {
	q := newQueueStore(t)
	f := newFixture(t, "/hooks=header:X-Id;async", proxy.Config{Store: q, Queue: q})
	if _, _, err := q.Claim(context.Background(), "test:/hooks:e1", time.Minute); err != nil {
		t.Fatal(err)
	}
	resp := f.post(t, "/hooks", map[string]string{"X-Id": "e1"}, "{}")
	if resp.StatusCode != http.StatusConflict || resp.Header.Get(proxy.HeaderOutcome) != "in-flight" {
		t.Fatalf("%d %q, want 409 in-flight", resp.StatusCode, resp.Header.Get(proxy.HeaderOutcome))
	}
}

// TestAsyncStoreDown: the store failing answers 503 and queues nothing;
// with ON_STORE_ERROR=forward the webhook is forwarded unchecked at once.
func TestAsyncStoreDown(t *testing.T) {
	q := newQueueStore(t)
	q.down.Store(true)
	f := newFixture(t, "/hooks=header:X-Id;async", proxy.Config{Store: q, Queue: q})
	resp := f.post(t, "/hooks", map[string]string{"X-Id": "e1"}, "{}")
	if resp.StatusCode != 503 || resp.Header.Get(proxy.HeaderOutcome) != "store-unavailable" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("store down: %d %q, want 503 store-unavailable with Retry-After", resp.StatusCode, resp.Header.Get(proxy.HeaderOutcome))
	}
	if f.up.calls.Load() != 0 {
		t.Error("forwarded while the store is down")
	}
	if got := f.counter(t, "webhook_dedup_store_errors_total", "op", "enqueue"); got != 1 {
		t.Errorf("store_errors_total{op=enqueue} = %v, want 1", got)
	}

	q2 := newQueueStore(t)
	q2.down.Store(true)
	open := newFixture(t, "/hooks=header:X-Id;async", proxy.Config{Store: q2, Queue: q2, OnStoreError: policy.ForwardOnStoreError})
	resp = open.post(t, "/hooks", map[string]string{"X-Id": "e1"}, "body")
	if resp.StatusCode != 200 || resp.Header.Get(proxy.HeaderOutcome) != "forwarded-unchecked" || open.up.last(t).body != "body" {
		t.Errorf("store down, ON_STORE_ERROR=forward: %d %q", resp.StatusCode, resp.Header.Get(proxy.HeaderOutcome))
	}
}

// TestAsyncBodyLimit: an async route holds the body, so MAX_BODY_BYTES
// applies even to a header-sourced ID.
func TestAsyncBodyLimit(t *testing.T) {
	q := newQueueStore(t)
	f := newFixture(t, "/hooks=header:X-Id;async", proxy.Config{Store: q, Queue: q, MaxBodyBytes: 10})
	resp := f.post(t, "/hooks", map[string]string{"X-Id": "e1"}, strings.Repeat("x", 11))
	if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get(proxy.HeaderOutcome) != "too-large" {
		t.Errorf("%d %q, want 413 too-large", resp.StatusCode, resp.Header.Get(proxy.HeaderOutcome))
	}
	if _, ok := q.request(t, "test:/hooks:e1"); ok {
		t.Error("a body over the limit was queued")
	}
}

// TestAcceptKeepsSettlement: a queued request carries how its event is
// settled, as the proxy decided when it accepted it: the route, the TTL a
// sync route would have given its record, and its namespace (a preset's
// name, or a generic route's path).
func TestAcceptKeepsSettlement(t *testing.T) {
	q := newQueueStore(t)
	f := newFixture(t, "/hooks=github;async,/other=header:X-Id;async", proxy.Config{Store: q, Queue: q})
	f.post(t, "/hooks/x", map[string]string{"X-GitHub-Delivery": "d1", "X-GitHub-Event": "push"}, "{}")
	f.post(t, "/other/y", map[string]string{"X-Id": "e1"}, "{}")
	ds, err := q.Take(context.Background(), dedup.AllRoutes, 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	queued := map[string]dedup.Request{}
	for _, d := range ds {
		queued[d.Claim.Key] = d.Request
	}
	for _, tc := range []struct {
		key, route, namespace string
		ttl                   time.Duration
	}{
		{"test:github:d1", "/hooks", "github", 4 * 24 * time.Hour},
		{"test:/other:e1", "/other", "/other", 72 * time.Hour},
	} {
		req, ok := queued[tc.key]
		if !ok {
			t.Fatalf("%s was not queued", tc.key)
		}
		if req.Route != tc.route || req.Namespace != tc.namespace || req.TTL != tc.ttl {
			t.Errorf("%s queued with route %q, namespace %q, TTL %s; want %q, %q, %s", tc.key, req.Route, req.Namespace, req.TTL, tc.route, tc.namespace, tc.ttl)
		}
	}
}

// TestAsyncDeliveredDuplicates: an event an async route queued and the
// delivery workers completed answers its duplicates as a sync route's
// would: with ReplayResponse the app's answer is replayed, and with
// BodyFingerprint the same body under another ID is a duplicate too.
func TestAsyncDeliveredDuplicates(t *testing.T) {
	q := newQueueStore(t)
	f := newFixture(t, "/hooks=header:X-Id;async", proxy.Config{Store: q, Queue: q,
		ReplayResponse: true, ReplayMaxBytes: 1024, BodyFingerprint: true})
	f.up.setAnswer(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte("<Response/>"))
	})
	tr := upstreamhttp.NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	u, _ := url.Parse(f.up.URL)
	const poll = 5 * time.Millisecond
	w := delivery.New(delivery.Config{Queue: q, Upstream: u, Transport: tr,
		ReplayResponse: true, ReplayMaxBytes: 1024, BodyFingerprint: true, Bodies: q, KeyPrefix: "test:",
		PollInterval: poll})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			drain, cancelDrain := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancelDrain()
			w.Drain(drain, drain)
		})
	}
	t.Cleanup(stop)

	wantAnswer(t, f.post(t, "/hooks/a", map[string]string{"X-Id": "e1"}, "payload"), http.StatusAccepted, "queued")
	// The workers find it at their next poll at the latest.
	deadline := time.Now().Add(poll + loadMargin)
	for {
		rec, err := q.Lookup(context.Background(), "test:/hooks:e1")
		if err == nil && rec.State == dedup.Completed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered within %s: %s, %v", poll+loadMargin, rec.State, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop() // the attempt has ended: the body's record is written too
	// e2 is another ID with the same body.
	for _, id := range []string{"e1", "e2"} {
		resp := f.post(t, "/hooks/a", map[string]string{"X-Id": id}, "payload")
		wantAnswer(t, resp, http.StatusCreated, "duplicate")
		if ct, b := resp.Header.Get("Content-Type"), readAll(t, resp); ct != "text/xml" || b != "<Response/>" {
			t.Errorf("duplicate %s: replayed %q %q, want the app's text/xml <Response/>", id, ct, b)
		}
	}
	if n := f.up.calls.Load(); n != 1 {
		t.Errorf("the app was called %d times, want once", n)
	}
}

// TestAsyncQueueFull: while the queue holds QueueMaxDepth events, the
// store refuses a first-seen webhook of an async route, answered 503
// queue-full with Retry-After, and nothing is queued; a duplicate of an
// event the store holds is still answered as one; a sync route is not
// concerned; and once the queue has room, the refused event is accepted.
func TestAsyncQueueFull(t *testing.T) {
	q := newQueueStore(t)
	f := newFixture(t, "/hooks=header:X-Id;async,/sync=header:X-Id", proxy.Config{Store: q, Queue: q, QueueMaxDepth: 1})
	if resp := f.post(t, "/hooks", map[string]string{"X-Id": "old"}, "{}"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("below QueueMaxDepth: %d, want 202", resp.StatusCode)
	}
	resp := f.post(t, "/hooks", map[string]string{"X-Id": "new"}, "{}")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(proxy.HeaderOutcome) != "queue-full" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("first-seen while full: %d %q Retry-After %q, want 503 queue-full with Retry-After", resp.StatusCode, resp.Header.Get(proxy.HeaderOutcome), resp.Header.Get("Retry-After"))
	}
	if _, err := q.Lookup(context.Background(), "test:/hooks:new"); !errors.Is(err, dedup.ErrNotFound) {
		t.Errorf("a refused event left a record: %v", err)
	}
	if resp := f.post(t, "/hooks", map[string]string{"X-Id": "old"}, "{}"); resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderOutcome) != "duplicate" {
		t.Errorf("a duplicate while full: %d %q, want 200 duplicate", resp.StatusCode, resp.Header.Get(proxy.HeaderOutcome))
	}
	if resp := f.post(t, "/sync", map[string]string{"X-Id": "s1"}, "{}"); resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderOutcome) != "forwarded" {
		t.Errorf("a sync route while full: %d %q, want forwarded", resp.StatusCode, resp.Header.Get(proxy.HeaderOutcome))
	}
	if _, ok := q.request(t, "test:/hooks:old"); !ok { // taken: no longer waiting
		t.Fatal("the queued event was not there to take")
	}
	if resp := f.post(t, "/hooks", map[string]string{"X-Id": "new"}, "{}"); resp.StatusCode != http.StatusAccepted {
		t.Errorf("the refused event once the queue has room: %d, want 202", resp.StatusCode)
	}
}

// heldEnqueues is a queue whose Enqueue waits until the test lets go,
// counting how many wait at once.
type heldEnqueues struct {
	*queueStore
	release chan struct{}
	inside  atomic.Int32
	most    atomic.Int32
}

func (q *heldEnqueues) Enqueue(ctx context.Context, key string, req dedup.Request, maxDepth int) (bool, dedup.Record, error) {
	n := q.inside.Add(1)
	defer q.inside.Add(-1)
	for m := q.most.Load(); n > m && !q.most.CompareAndSwap(m, n); m = q.most.Load() {
	}
	<-q.release
	return q.queueStore.Enqueue(ctx, key, req, maxDepth)
}

// TestAsyncEnqueueConcurrency: no more enqueues run at once than
// the Gate's width; the others wait their turn, and every one is then
// queued.
func TestAsyncEnqueueConcurrency(t *testing.T) {
	q := &heldEnqueues{queueStore: newQueueStore(t), release: make(chan struct{})}
	f := newFixture(t, "/hooks=header:X-Id;async", proxy.Config{Store: q, Queue: q, Enqueues: intake.New(2, 2)})
	answers := make([]<-chan *http.Response, 6)
	for i := range answers {
		answers[i] = f.postAsync(t, "/hooks", map[string]string{"X-Id": fmt.Sprint("e", i)}, "{}")
	}
	deadline := time.Now().Add(loadMargin)
	for q.inside.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d enqueues under way, want 2", q.inside.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(q.release)
	for i, ch := range answers {
		if resp := <-ch; resp.StatusCode != http.StatusAccepted {
			t.Errorf("webhook %d: %d, want 202", i, resp.StatusCode)
		}
	}
	if m := q.most.Load(); m != 2 {
		t.Errorf("at most %d enqueues at once, want the Gate's 2", m)
	}
}

// TestAsyncLargeBodiesOneAtATime: webhooks with a body of 1 MiB or more
// are queued one at a time, a small one beside them; the others wait
// their turn, counted in webhook_dedup_large_bodies_waiting, and each is
// then queued.
func TestAsyncLargeBodiesOneAtATime(t *testing.T) {
	q := &heldEnqueues{queueStore: newQueueStore(t), release: make(chan struct{})}
	f := newFixture(t, "/hooks=header:X-Id;async", proxy.Config{Store: q, Queue: q, Enqueues: intake.New(8, 8)})
	release := sync.OnceFunc(func() { close(q.release) })
	defer release() // on failure too: the fixture's server waits for its handlers
	const waiting = "webhook_dedup_large_bodies_waiting"
	large := strings.Repeat("x", 1<<20)
	var answers []<-chan *http.Response
	for i := range 3 {
		answers = append(answers, f.postAsync(t, "/hooks", map[string]string{"X-Id": fmt.Sprint("large", i)}, large))
	}
	answers = append(answers, f.postAsync(t, "/hooks", map[string]string{"X-Id": "small"}, "{}"))
	deadline := time.Now().Add(loadMargin)
	for q.inside.Load() != 2 || f.gauge(t, waiting) != 2 {
		if n := q.inside.Load(); n > 2 {
			t.Fatalf("%d enqueues under way at once; want one large and the small one", n)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d enqueues under way and %s = %v; want 2 and 2", q.inside.Load(), waiting, f.gauge(t, waiting))
		}
		time.Sleep(5 * time.Millisecond)
	}
	release()
	for i, ch := range answers {
		if resp := <-ch; resp.StatusCode != http.StatusAccepted {
			t.Errorf("webhook %d: %d, want 202", i, resp.StatusCode)
		}
	}
	if n := f.gauge(t, waiting); n != 0 {
		t.Errorf("%s = %v once every webhook was queued; want 0", waiting, n)
	}
}

// TestOrderKeyMissing: on a route with order=, a webhook whose order key
// is absent, empty or not a valid one is still queued (202), unordered
// (due at once beside another without a key), and counted in
// webhook_dedup_order_key_missing_total{route}; one with its key is
// queued under the route and the key, behind the one before it.
func TestOrderKeyMissing(t *testing.T) {
	q := newQueueStore(t)
	f := newFixture(t, "/hooks=header:X-Id;async;order=header:X-Key,/json=header:X-Id;async;order=json:customer.id",
		proxy.Config{Store: q, Queue: q})
	for _, tt := range []struct {
		name, path string
		header     map[string]string
		body       string
	}{
		{"header absent", "/hooks", nil, "{}"},
		{"header empty", "/hooks", map[string]string{"X-Key": ""}, "{}"},
		{"header too long", "/hooks", map[string]string{"X-Key": strings.Repeat("k", providers.MaxIDLen+1)}, "{}"},
		{"JSON absent", "/json", nil, `{"customer":{}}`},
		{"JSON not an object", "/json", nil, `{"customer":"c1"}`},
		{"JSON empty", "/json", nil, `{"customer":{"id":""}}`},
		{"JSON control character", "/json", nil, `{"customer":{"id":"c\u00011"}}`},
		{"body not JSON", "/json", nil, `not json`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := f.counter(t, "webhook_dedup_order_key_missing_total", "route", tt.path)
			var keys []string
			for i := range 2 {
				id := fmt.Sprintf("%s-%d", strings.ReplaceAll(tt.name, " ", "-"), i)
				header := map[string]string{"X-Id": id}
				for k, v := range tt.header {
					header[k] = v
				}
				resp := f.post(t, tt.path, header, tt.body)
				if resp.StatusCode != http.StatusAccepted || resp.Header.Get(proxy.HeaderOutcome) != "queued" {
					t.Fatalf("%s: %d %q, want 202 queued", id, resp.StatusCode, resp.Header.Get(proxy.HeaderOutcome))
				}
				keys = append(keys, "test:"+tt.path+":"+id)
			}
			if got := f.counter(t, "webhook_dedup_order_key_missing_total", "route", tt.path) - before; got != 2 {
				t.Errorf("order_key_missing_total{route=%s} rose by %v, want 2", tt.path, got)
			}
			// Both due at once: neither waits behind the other.
			ds := takeAll(t, q)
			for _, k := range keys {
				if _, ok := ds[k]; !ok {
					t.Errorf("%s is not due beside the other event without a key (took %d)", k, len(ds))
				}
			}
		})
	}
	t.Run("key present", func(t *testing.T) {
		before := f.counter(t, "webhook_dedup_order_key_missing_total", "route", "/json")
		for i := range 2 {
			resp := f.post(t, "/json", map[string]string{"X-Id": fmt.Sprintf("keyed-%d", i)}, `{"customer":{"id":"c1"}}`)
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("keyed-%d: %d, want 202", i, resp.StatusCode)
			}
		}
		if got := f.counter(t, "webhook_dedup_order_key_missing_total", "route", "/json") - before; got != 0 {
			t.Errorf("order_key_missing_total rose by %v for webhooks with their key", got)
		}
		rec, err := q.Lookup(context.Background(), "test:/json:keyed-1")
		if err != nil || rec.Delivery.BlockedBy != "test:/json:keyed-0" {
			t.Errorf("keyed-1: blocked by %q (%v), want keyed-0", rec.Delivery.BlockedBy, err)
		}
		if ds := takeAll(t, q); len(ds) != 1 {
			t.Errorf("took %d deliveries, want keyed-0 alone", len(ds))
		}
	})
}

// takeAll takes every due delivery of q, by key.
func takeAll(t *testing.T, q *queueStore) map[string]dedup.Delivery {
	t.Helper()
	ds, err := q.Take(context.Background(), dedup.AllRoutes, 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]dedup.Delivery{}
	for _, d := range ds {
		out[d.Claim.Key] = d
	}
	return out
}
