package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"
	"github.com/webhook-dedup/webhook-dedup/policy"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/proxy"
)

func TestUpstreamFailuresRelease(t *testing.T) {
	t.Run("unreachable: 502", func(t *testing.T) {
		f := newFixture(t, "/gh=github", proxy.Config{})
		f.up.Close()
		resp := f.post(t, "/gh", gh("x1"), "{}")
		wantAnswer(t, resp, http.StatusBadGateway, "upstream-error")
		assertFree(t, f.store, "test:github:x1")
	})
	t.Run("timeout: 504", func(t *testing.T) {
		f := newFixture(t, "/gh=github", proxy.Config{UpstreamTimeout: 100 * time.Millisecond})
		blockingUpstream(t, f) // held until the test ends
		resp := f.post(t, "/gh", gh("x2"), "{}")
		wantAnswer(t, resp, http.StatusGatewayTimeout, "upstream-error")
		assertFree(t, f.store, "test:github:x2")
	})
}

// TestSenderGoneAfterForwardAppSettles: a sender that hangs up once its
// request reached the app changes nothing: the app keeps working, copies
// meanwhile are in flight, and the app's answer settles the claim, 2xx
// completing it (the retry is a duplicate), anything else releasing it.
func TestSenderGoneAfterForwardAppSettles(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		next   string
		calls  int64
	}{
		{"app answers 200: completed", http.StatusOK, "duplicate", 1},
		{"app answers 500: released", http.StatusInternalServerError, "forwarded", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "/gh=github", proxy.Config{})
			arrived, finish := holdFirst(t, f, tc.status)
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/gh", strings.NewReader("{}"))
			req.Header.Set("X-GitHub-Delivery", "c1")
			done := doAsync(req)
			<-arrived
			cancel()
			<-done
			wantAnswer(t, f.post(t, "/gh", gh("c1"), "{}"), http.StatusConflict, "in-flight")
			finish()
			pollSettled(t, f.store, "test:github:c1")
			wantAnswer(t, f.post(t, "/gh", gh("c1"), "{}"), http.StatusOK, tc.next)
			if got := f.up.calls.Load(); got != tc.calls {
				t.Errorf("the app was called %d times, want %d", got, tc.calls)
			}
			for _, outcome := range []string{"client-gone", "upstream-error"} {
				if n := f.counter(t, "webhook_dedup_requests_total", "outcome", outcome); n != 0 {
					t.Errorf("counted %v %s, want 0", n, outcome)
				}
			}
		})
	}
}

// pollSettled waits, with a deadline, until key is no longer in flight,
// and returns its record (Absent once released). A 2xx is completed just
// after the sender has its answer: a test that looks at the record after
// the answer waits here.
func pollSettled(t *testing.T, s proxy.Store, key string) dedup.Record {
	t.Helper()
	deadline := time.Now().Add(loadMargin)
	for {
		rec, err := s.Lookup(context.Background(), key)
		if errors.Is(err, dedup.ErrNotFound) {
			return dedup.Record{State: dedup.Absent}
		}
		if err == nil && rec.State != dedup.InFlight {
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %s still in flight after %s (%v)", key, loadMargin, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// doAsync sends req from another goroutine; its error (nil once answered)
// arrives on the channel.
func doAsync(req *http.Request) <-chan error {
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	return done
}

// stallingStore is an embedded store whose claims wait until the test lets
// them go. A claim whose caller gives up first is taken all the same, as a
// Redis SET NX already sent is: only the answer is lost.
type stallingStore struct {
	*memstore.Store
	claiming chan string // the key of each claim as it begins
	proceed  chan struct{}
	claimed  chan dedup.Claim // each claim the store took, once it holds the key
}

func (s stallingStore) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error) {
	s.claiming <- key
	select {
	case <-s.proceed:
		c, rec, err := s.Store.Claim(ctx, key, lease)
		s.tell(c, rec, err)
		return c, rec, err
	case <-ctx.Done():
		s.tell(s.Store.Claim(context.Background(), key, lease))
		return dedup.Claim{}, dedup.Record{}, fmt.Errorf("dedup: claim %s: %w", key, ctx.Err())
	}
}

// tell reports a claim the store took on claimed, if there is room.
func (s stallingStore) tell(c dedup.Claim, _ dedup.Record, err error) {
	if err != nil || c.Token == "" {
		return
	}
	select {
	case s.claimed <- c:
	default:
	}
}

// TestSenderGoneDuringClaim: a sender that hangs up while its event is
// being claimed is counted as client-gone, not as a store failure; nothing
// is forwarded, and the claim the store took meanwhile is released rather
// than left to sit out its lease. (net/http notices a closed connection
// once the body has been read, as it is on a JSON route.)
func TestSenderGoneDuringClaim(t *testing.T) {
	st := stallingStore{Store: memstore.New(), claiming: make(chan string, 1), proceed: make(chan struct{}), claimed: make(chan dedup.Claim, 1)}
	t.Cleanup(func() { st.Close() })
	gone := make(chan struct{}) // closed once the proxy sees the sender gone
	f := newWrappedFixture(t, "/events=json:id", proxy.Config{Store: st}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			context.AfterFunc(r.Context(), func() { close(gone) })
			h.ServeHTTP(w, r)
		})
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/events", strings.NewReader(`{"id":"c2"}`))
	done := doAsync(req)
	key := <-st.claiming
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the request succeeded after its sender cancelled it")
	}
	<-gone
	close(st.proceed) // the store takes the claim just after the sender left
	// Until the store has taken the claim the key is free whether or not
	// the proxy releases it: wait for the claim to land, then for the
	// request to be counted (after its claim was settled), and only then
	// look at the key.
	select {
	case <-st.claimed:
	case <-time.After(loadMargin):
		t.Fatalf("the store took no claim within %s of being let go", loadMargin)
	}
	f.pollCounter(t, "webhook_dedup_requests_total", "outcome", "client-gone", 1)
	if rec, err := f.store.Lookup(context.Background(), key); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("key %s: %v %v once the request ended; want released, free to claim again (not left to sit out its lease)", key, rec.State, err)
	}
	for _, outcome := range []string{"store-unavailable", "forwarded"} {
		if n := f.counter(t, "webhook_dedup_requests_total", "outcome", outcome); n != 0 {
			t.Errorf("counted %v %s, want 0", n, outcome)
		}
	}
	if n := f.counter(t, "webhook_dedup_store_errors_total", "op", "claim"); n != 0 {
		t.Errorf("counted %v claim errors, want 0", n)
	}
	if n := f.up.calls.Load(); n != 0 {
		t.Errorf("the upstream was called %d times, want 0", n)
	}
}

// stallingLookups is an embedded store whose lookups wait until their
// caller gives up, as a lookup of a stalled Redis does.
type stallingLookups struct {
	*memstore.Store
	looking chan string // the key of each lookup as it begins
}

func (s stallingLookups) Lookup(ctx context.Context, key string) (dedup.Record, error) {
	s.looking <- key
	<-ctx.Done()
	return dedup.Record{}, fmt.Errorf("dedup: lookup %s: %w", key, ctx.Err())
}

// TestSenderGoneDuringLookup: a sender that hangs up while the proxy looks
// up its body's fingerprint (DEDUP_BODY_FINGERPRINT) is counted as
// client-gone, not as a failed lookup or an unavailable store, and nothing
// is forwarded.
func TestSenderGoneDuringLookup(t *testing.T) {
	st := stallingLookups{Store: memstore.New(), looking: make(chan string, 1)}
	t.Cleanup(func() { st.Close() })
	f := newFixture(t, "/events=json:id", proxy.Config{Store: st, BodyFingerprint: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/events", strings.NewReader(`{"id":"l1"}`))
	done := doAsync(req)
	<-st.looking
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the request succeeded after its sender cancelled it")
	}
	f.pollCounter(t, "webhook_dedup_requests_total", "outcome", "client-gone", 1)
	if n := f.counter(t, "webhook_dedup_requests_total", "outcome", "store-unavailable"); n != 0 {
		t.Errorf("counted %v store-unavailable, want 0", n)
	}
	if n := f.counter(t, "webhook_dedup_store_errors_total", "op", "lookup"); n != 0 {
		t.Errorf("counted %v lookup errors, want 0", n)
	}
	if n := f.up.calls.Load(); n != 0 {
		t.Errorf("the upstream was called %d times, want 0", n)
	}
}

// brokenStore fails every operation, like an unreachable Redis.
type brokenStore struct{}

var errDown = errors.New("connection refused")

func (brokenStore) Claim(context.Context, string, time.Duration) (dedup.Claim, dedup.Record, error) {
	return dedup.Claim{}, dedup.Record{}, errDown
}
func (brokenStore) Complete(context.Context, dedup.Claim, dedup.Result, time.Duration) error {
	return errDown
}
func (brokenStore) Release(context.Context, dedup.Claim) error { return errDown }
func (brokenStore) Lookup(context.Context, string) (dedup.Record, error) {
	return dedup.Record{}, errDown
}

func TestStoreUnavailable(t *testing.T) {
	t.Run("reject", func(t *testing.T) {
		f := newFixture(t, "/gh=github", proxy.Config{Store: brokenStore{}})
		resp := f.post(t, "/gh", gh("s1"), "{}")
		wantAnswer(t, resp, http.StatusServiceUnavailable, "store-unavailable")
		if resp.Header.Get("Retry-After") == "" {
			t.Fatal("no Retry-After")
		}
		if f.up.calls.Load() != 0 {
			t.Fatal("forwarded while the store is down")
		}
	})
	t.Run("forward", func(t *testing.T) {
		f := newFixture(t, "/gh=github", proxy.Config{Store: brokenStore{}, OnStoreError: policy.ForwardOnStoreError})
		resp := f.post(t, "/gh", gh("s2"), "{}")
		wantAnswer(t, resp, http.StatusOK, "forwarded-unchecked")
		if f.up.calls.Load() != 1 {
			t.Fatal("not forwarded")
		}
	})
}
