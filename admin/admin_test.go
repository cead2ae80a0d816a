package admin_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/dedup"
)

const (
	token  = "s3cret-admin-token"
	prefix = "wd:"
)

// flakyStore is a real in-memory store whose Ping, Lookup and Forget can be
// made to fail, as Redis's do during an outage.
type flakyStore struct {
	*memstore.Store
	down atomic.Bool
}

var errDown = errors.New("fake: connection refused")

func (s *flakyStore) Ping(ctx context.Context) error {
	if s.down.Load() {
		return errDown
	}
	return s.Store.Ping(ctx)
}

func (s *flakyStore) Lookup(ctx context.Context, key string) (dedup.Record, error) {
	if s.down.Load() {
		return dedup.Record{}, errDown
	}
	return s.Store.Lookup(ctx, key)
}

func (s *flakyStore) Forget(ctx context.Context, key string) (bool, error) {
	if s.down.Load() {
		return false, errDown
	}
	return s.Store.Forget(ctx, key)
}

type fixture struct {
	store *flakyStore
	admin *admin.Server
	srv   *httptest.Server
}

// newFixture serves the admin handler over a real store with the given
// token ("" disables the events API).
func newFixture(t *testing.T, tok string) *fixture {
	t.Helper()
	mem := memstore.New()
	t.Cleanup(func() { _ = mem.Close() })
	st := &flakyStore{Store: mem}
	reg := prometheus.NewRegistry()
	probe := prometheus.NewCounter(prometheus.CounterOpts{Name: "admin_test_probe_total", Help: "A counter the test looks for."})
	reg.MustRegister(probe)
	probe.Add(3)
	adm := admin.New(admin.Config{Store: st, Gatherer: reg, Token: tok, KeyPrefix: prefix})
	srv := httptest.NewServer(adm)
	t.Cleanup(srv.Close)
	return &fixture{store: st, admin: adm, srv: srv}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

// do sends method on the raw (already escaped) path with the Authorization
// header auth ("" for none).
func (f *fixture) do(t *testing.T, method, path, auth string) reply {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, body}
}

func (f *fixture) claim(t *testing.T, key string, lease time.Duration) dedup.Claim {
	t.Helper()
	c, _, err := f.store.Claim(context.Background(), key, lease)
	if err != nil || c.Token == "" {
		t.Fatalf("claim %s: %+v, %v", key, c, err)
	}
	return c
}

func TestHealthz(t *testing.T) {
	f := newFixture(t, "")
	f.store.down.Store(true) // liveness does not depend on the store
	r := f.do(t, http.MethodGet, "/healthz", "")
	if r.status != http.StatusOK {
		t.Fatalf("GET /healthz: %d %s, want 200", r.status, r.body)
	}
	if r := f.do(t, http.MethodHead, "/healthz", ""); r.status != http.StatusOK {
		t.Errorf("HEAD /healthz: %d, want 200", r.status)
	}
}

func TestReadyz(t *testing.T) {
	f := newFixture(t, "")
	ready := func(want int, what string) map[string]string {
		t.Helper()
		return readyz(t, f, "", want, what)
	}

	ready(http.StatusOK, "store up")
	f.store.down.Store(true)
	if doc := ready(http.StatusServiceUnavailable, "store down"); doc["status"] != "store unavailable" || len(doc) != 1 {
		t.Errorf("store down: /readyz says %v; want only {\"status\":\"store unavailable\"}: the store's error names its address", doc)
	}
	f.store.down.Store(false)
	ready(http.StatusOK, "store back, without a restart")

	f.admin.Drain()
	if doc := ready(http.StatusServiceUnavailable, "draining"); doc["status"] != "shutting down" {
		t.Errorf("draining: /readyz says %v, want status \"shutting down\"", doc)
	}
	if r := f.do(t, http.MethodGet, "/healthz", ""); r.status != http.StatusOK {
		t.Errorf("draining: /healthz %d, want 200 (the process still serves)", r.status)
	}
}

// TestReadyzDetailBehindToken: the store's error text is shown only to a
// request carrying ADMIN_TOKEN.
func TestReadyzDetailBehindToken(t *testing.T) {
	f := newFixture(t, token)
	f.store.down.Store(true)
	if doc := readyz(t, f, "", http.StatusServiceUnavailable, "no token"); len(doc) != 1 {
		t.Errorf("without the token: /readyz says %v; want the bare state", doc)
	}
	if doc := readyz(t, f, "Bearer wrong", http.StatusServiceUnavailable, "wrong token"); len(doc) != 1 {
		t.Errorf("with a wrong token: /readyz says %v; want the bare state", doc)
	}
	if doc := readyz(t, f, "Bearer "+token, http.StatusServiceUnavailable, "token"); !strings.Contains(doc["error"], errDown.Error()) {
		t.Errorf("with the token: /readyz says %v; want the store's error", doc)
	}
}

// readyz sends GET /readyz with the Authorization header auth ("" for
// none), checks the status, and returns the JSON it answered.
func readyz(t *testing.T, f *fixture, auth string, want int, what string) map[string]string {
	t.Helper()
	r := f.do(t, http.MethodGet, "/readyz", auth)
	if r.status != want {
		t.Errorf("%s: /readyz %d %s, want %d", what, r.status, r.body, want)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: /readyz Content-Type %q, want application/json", what, ct)
	}
	var doc map[string]string
	if err := json.Unmarshal(r.body, &doc); err != nil {
		t.Errorf("%s: /readyz body %q: %v", what, r.body, err)
	}
	return doc
}

func TestMetrics(t *testing.T) {
	f := newFixture(t, "")
	r := f.do(t, http.MethodGet, "/metrics", "")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "admin_test_probe_total 3\n") {
		t.Fatalf("GET /metrics: %d\n%s\nwant 200 with admin_test_probe_total 3", r.status, r.body)
	}
}

// eventPaths are the events API's paths, well-formed or not.
var eventPaths = []string{
	"/v1/events/stripe/evt_1",
	"/v1/events/%2Fhooks%2Facme/acme-1",
	"/v1/events/stripe",
	"/v1/events/stripe/evt_1/extra",
	"/v1/events/",
}

func TestEventsAPIIsAbsentWithoutToken(t *testing.T) {
	f := newFixture(t, "")
	f.claim(t, prefix+"stripe:evt_1", time.Minute)
	for _, path := range eventPaths {
		for _, method := range []string{http.MethodGet, http.MethodDelete, http.MethodPost, http.MethodPut} {
			for _, auth := range []string{"", "Bearer ", "Bearer anything"} {
				r := f.do(t, method, path, auth)
				if r.status != http.StatusNotFound || r.header.Get("WWW-Authenticate") != "" || r.header.Get("Allow") != "" {
					t.Errorf("no ADMIN_TOKEN: %s %s (Authorization %q): %d WWW-Authenticate=%q Allow=%q; want a plain 404",
						method, path, auth, r.status, r.header.Get("WWW-Authenticate"), r.header.Get("Allow"))
				}
			}
		}
	}
	if _, err := f.store.Lookup(context.Background(), prefix+"stripe:evt_1"); err != nil {
		t.Errorf("the record is gone after DELETEs without a token: %v", err)
	}
}

func TestEventsAPIRefusesMissingOrWrongToken(t *testing.T) {
	f := newFixture(t, token)
	f.claim(t, prefix+"stripe:evt_1", time.Minute)
	for _, auth := range []string{
		"",
		"Bearer",
		"Bearer ",
		"Bearer wrong",
		"Bearer " + token[:len(token)-1],
		"Bearer " + token + "x",
		"Basic " + token,
		token,
	} {
		for _, method := range []string{http.MethodGet, http.MethodDelete} {
			for _, path := range eventPaths {
				r := f.do(t, method, path, auth)
				if r.status != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s %s with Authorization %q: %d WWW-Authenticate=%q; want 401 with a Bearer challenge",
						method, path, auth, r.status, r.header.Get("WWW-Authenticate"))
				}
			}
		}
	}
	if _, err := f.store.Lookup(context.Background(), prefix+"stripe:evt_1"); err != nil {
		t.Errorf("the record is gone after unauthorized DELETEs: %v", err)
	}
	// The scheme is case-insensitive.
	if r := f.do(t, http.MethodGet, "/v1/events/stripe/evt_1", "bearer "+token); r.status != http.StatusOK {
		t.Errorf("GET with \"bearer <token>\": %d %s, want 200", r.status, r.body)
	}
}

func TestEventsAPIOtherMethodsAndPaths(t *testing.T) {
	f := newFixture(t, token)
	auth := "Bearer " + token
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch} {
		r := f.do(t, method, "/v1/events/stripe/evt_1", auth)
		if r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") == "" {
			t.Errorf("%s: %d Allow=%q, want 405 with Allow", method, r.status, r.header.Get("Allow"))
		}
	}
	for _, path := range []string{"/v1/events/stripe", "/v1/events/stripe/evt_1/extra", "/v1/events/"} {
		if r := f.do(t, http.MethodGet, path, auth); r.status != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, r.status)
		}
	}
}

// event is the events API's JSON, decoded loosely so that a missing field shows.
type event map[string]any

func (f *fixture) inspect(t *testing.T, path string) (int, event) {
	t.Helper()
	r := f.do(t, http.MethodGet, path, "Bearer "+token)
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET %s: Content-Type %q, want application/json", path, ct)
	}
	var ev event
	if err := json.Unmarshal(r.body, &ev); err != nil {
		t.Fatalf("GET %s: %d %q is not JSON: %v", path, r.status, r.body, err)
	}
	return r.status, ev
}

func TestInspect(t *testing.T) {
	f := newFixture(t, token)
	ctx := context.Background()

	for _, tc := range []struct {
		name, namespace, id, path string
	}{
		{"preset namespace", "stripe", "evt_1", "/v1/events/stripe/evt_1"},
		{"route path namespace, escaped", "/hooks/acme", "acme-1", "/v1/events/%2Fhooks%2Facme/acme-1"},
		{"escaped ID", "/hooks/acme", "a/b c:d", "/v1/events/%2Fhooks%2Facme/a%2Fb%20c:d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if status, ev := f.inspect(t, tc.path); status != http.StatusNotFound {
				t.Errorf("unknown event: %d %v, want 404", status, ev)
			}

			c := f.claim(t, prefix+tc.namespace+":"+tc.id, 30*time.Second)
			status, ev := f.inspect(t, tc.path)
			if status != http.StatusOK {
				t.Fatalf("in-flight event: %d %v, want 200", status, ev)
			}
			if ev["state"] != "in-flight" || ev["namespace"] != tc.namespace || ev["id"] != tc.id {
				t.Errorf("in-flight event: %v; want state in-flight, namespace %q, id %q", ev, tc.namespace, tc.id)
			}
			if _, ok := ev["status"]; ok {
				t.Errorf("in-flight event has a status: %v", ev)
			}
			checkSeconds(t, ev, "age_seconds", 0, 5)
			checkSeconds(t, ev, "ttl_seconds", 25, 30)

			body := []byte(`{"id":"` + tc.id + `"}`)
			fp := sha256.Sum256(body)
			if err := f.store.Complete(ctx, c, dedup.Result{Status: 201, Fingerprint: fp}, time.Hour); err != nil {
				t.Fatal(err)
			}
			status, ev = f.inspect(t, tc.path)
			if status != http.StatusOK {
				t.Fatalf("completed event: %d %v, want 200", status, ev)
			}
			if ev["state"] != "completed" || ev["status"] != 201.0 || ev["body_sha256"] != hex.EncodeToString(fp[:]) {
				t.Errorf("completed event: %v; want state completed, status 201, body_sha256 %x", ev, fp)
			}
			checkSeconds(t, ev, "age_seconds", 0, 5)
			checkSeconds(t, ev, "ttl_seconds", 3595, 3600)
		})
	}
}

func checkSeconds(t *testing.T, ev event, field string, lo, hi float64) {
	t.Helper()
	v, ok := ev[field].(float64)
	if !ok || v < lo || v > hi {
		t.Errorf("%s = %v; want a number in [%v, %v] (event %v)", field, ev[field], lo, hi, ev)
	}
}

func TestForget(t *testing.T) {
	f := newFixture(t, token)
	ctx := context.Background()
	auth := "Bearer " + token

	inflight := prefix + "/hooks/acme:acme-1"
	f.claim(t, inflight, time.Minute)
	completed := prefix + "stripe:evt_1"
	c := f.claim(t, completed, time.Minute)
	body := []byte(`{"id":"evt_1"}`)
	fp := sha256.Sum256(body)
	if err := f.store.Complete(ctx, c, dedup.Result{Status: 200, Fingerprint: fp}, time.Hour); err != nil {
		t.Fatal(err)
	}
	// What the proxy keeps with DEDUP_BODY_FINGERPRINT: the body's own record.
	bodyKey := prefix + "stripe#sha256:" + hex.EncodeToString(fp[:])
	bc := f.claim(t, bodyKey, time.Minute)
	if err := f.store.Complete(ctx, bc, dedup.Result{Status: 200, Fingerprint: fp}, time.Hour); err != nil {
		t.Fatal(err)
	}
	other := prefix + "stripe:evt_2"
	f.claim(t, other, time.Minute)

	for _, tc := range []struct{ path, key string }{
		{"/v1/events/%2Fhooks%2Facme/acme-1", inflight},
		{"/v1/events/stripe/evt_1", completed},
	} {
		if r := f.do(t, http.MethodDelete, tc.path, auth); r.status != http.StatusNoContent || len(r.body) != 0 {
			t.Errorf("DELETE %s: %d %q, want 204 with no body", tc.path, r.status, r.body)
		}
		if _, err := f.store.Lookup(ctx, tc.key); !errors.Is(err, dedup.ErrNotFound) {
			t.Errorf("after DELETE %s, Lookup(%q): %v, want dedup.ErrNotFound", tc.path, tc.key, err)
		}
		if r := f.do(t, http.MethodDelete, tc.path, auth); r.status != http.StatusNotFound {
			t.Errorf("second DELETE %s: %d, want 404", tc.path, r.status)
		}
		if status, _ := f.inspect(t, tc.path); status != http.StatusNotFound {
			t.Errorf("GET %s after DELETE: %d, want 404", tc.path, status)
		}
	}
	if _, err := f.store.Lookup(ctx, bodyKey); !errors.Is(err, dedup.ErrNotFound) {
		t.Errorf("the body fingerprint record survived forgetting its event: %v", err)
	}
	if _, err := f.store.Lookup(ctx, other); err != nil {
		t.Errorf("forgetting evt_1 touched evt_2: %v", err)
	}
}

func TestEventsAPIStoreDown(t *testing.T) {
	f := newFixture(t, token)
	f.claim(t, prefix+"stripe:evt_1", time.Minute)
	f.store.down.Store(true)
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		r := f.do(t, method, "/v1/events/stripe/evt_1", "Bearer "+token)
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), errDown.Error()) {
			t.Errorf("%s with the store down: %d %s, want 503 naming the store's error", method, r.status, r.body)
		}
	}
}

// TestEventSecondsToTheMillisecond: age_seconds and ttl_seconds are
// numbers rounded to the millisecond, as JSON prints them: 2.978, not
// 2.9779999999999998.
func TestEventSecondsToTheMillisecond(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	rec := dedup.Record{State: dedup.Completed, Since: now.Add(-2978*time.Millisecond - 400*time.Microsecond), TTL: 4*time.Second + 350*time.Millisecond}
	doc, err := json.Marshal(admin.NewEvent("github", "d1", rec, now))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"age_seconds":2.978,`, `"ttl_seconds":4.35}`} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("event %s, want %s", doc, want)
		}
	}
}
