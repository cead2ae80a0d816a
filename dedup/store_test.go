package dedup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
)

// store is what the conformance suite exercises: the methods every store
// of this package shares, with the same meaning (what the cache asks of
// the store behind it, too).
type store = Cacheable

var _ store = (*Memory)(nil)

const (
	lease = 30 * time.Second // long enough never to expire during a test
	keep  = time.Hour        // a completed record's TTL that never expires during a test
	short = 150 * time.Millisecond
	// expiring is the TTL of a completed record a case waits to see
	// expire: the record must still be there when looked up right after
	// Complete, so it outlives a write and a read on a loaded machine.
	expiring = time.Second
)

// replayed is a Result with every field set.
var replayed = Result{
	Status:      201,
	Fingerprint: sha256.Sum256([]byte(`{"id":"evt_1"}`)),
	ContentType: "application/json",
	Body:        []byte(`{"ok":true}`),
}

// storeTests is the conformance suite: each case gets a key no other case
// uses.
var storeTests = []struct {
	name string
	run  func(t *testing.T, s store, key string)
}{
	{"claim free key", func(t *testing.T, s store, key string) {
		c, rec := mustClaim(t, s, key, lease)
		if c.Key != key {
			t.Errorf("Claim.Key = %q, want %q", c.Key, key)
		}
		if tok, err := hex.DecodeString(c.Token); err != nil || len(tok) != 16 {
			t.Errorf("Claim.Token = %q, want 32 hex digits", c.Token)
		}
		if !reflect.DeepEqual(rec, Record{State: Absent}) {
			t.Errorf("Record = %+v, want Absent", rec)
		}
		other, _ := mustClaim(t, s, key+"/other", lease)
		t.Cleanup(func() { _, _ = s.Forget(context.Background(), key+"/other") })
		if other.Token == c.Token {
			t.Errorf("two claims share token %q", c.Token)
		}
	}},
	{"claim taken in flight", func(t *testing.T, s store, key string) {
		before := time.Now()
		mustClaim(t, s, key, lease)
		after := time.Now()
		c, rec, err := s.Claim(context.Background(), key, lease)
		if err != nil {
			t.Fatal(err)
		}
		if c != (Claim{}) {
			t.Errorf("second Claim = %+v, want zero", c)
		}
		checkInFlight(t, rec, before, after, lease)
	}},
	{"complete then claim", func(t *testing.T, s store, key string) {
		for _, tc := range []struct {
			name string
			res  Result
		}{
			{"status and fingerprint", Result{Status: 200, Fingerprint: sha256.Sum256([]byte("x"))}},
			{"whole fingerprint", Result{Status: 200, Fingerprint: sha256.Sum256([]byte("x")), FullFingerprint: true}},
			{"unknown fingerprint", Result{Status: 204}},
			{"replayed", replayed},
			{"content type without body", Result{Status: 202, ContentType: "text/plain"}},
			{"body without content type", Result{Status: 200, Body: []byte{0, 1, 2, 0xff}}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				key := key + "/" + tc.name
				t.Cleanup(func() { _, _ = s.Forget(context.Background(), key) })
				c, _ := mustClaim(t, s, key, lease)
				before := time.Now()
				if err := s.Complete(context.Background(), c, tc.res, keep); err != nil {
					t.Fatal(err)
				}
				after := time.Now()
				c2, rec, err := s.Claim(context.Background(), key, lease)
				if err != nil {
					t.Fatal(err)
				}
				if c2 != (Claim{}) {
					t.Errorf("Claim after Complete = %+v, want zero", c2)
				}
				checkCompleted(t, rec, tc.res, before, after, keep)
			})
		}
	}},
	{"release then claim", func(t *testing.T, s store, key string) {
		c1, _ := mustClaim(t, s, key, lease)
		if err := s.Release(context.Background(), c1); err != nil {
			t.Fatal(err)
		}
		c2, rec := mustClaim(t, s, key, lease)
		if rec.State != Absent {
			t.Errorf("Claim after Release: state %v, want absent", rec.State)
		}
		if c2.Token == c1.Token {
			t.Error("a new claim reused the released token")
		}
	}},
	{"wrong token", func(t *testing.T, s store, key string) {
		before := time.Now()
		owner, _ := mustClaim(t, s, key, lease)
		after := time.Now()
		stranger, _ := mustClaim(t, s, key+"/stranger", lease)
		t.Cleanup(func() { _, _ = s.Forget(context.Background(), key+"/stranger") })
		for _, tc := range []struct {
			name string
			c    Claim
		}{
			{"never issued", Claim{Key: key, Token: hex.EncodeToString(make([]byte, 16))}},
			{"another key's", Claim{Key: key, Token: stranger.Token}},
			{"malformed", Claim{Key: key, Token: "not a token"}},
			{"empty", Claim{Key: key}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if err := s.Complete(context.Background(), tc.c, replayed, keep); !errors.Is(err, ErrNotOwner) {
					t.Errorf("Complete = %v, want ErrNotOwner", err)
				}
				if err := s.Release(context.Background(), tc.c); !errors.Is(err, ErrNotOwner) {
					t.Errorf("Release = %v, want ErrNotOwner", err)
				}
				checkInFlight(t, mustLookup(t, s, key), before, after, lease)
			})
		}
		if err := s.Complete(context.Background(), owner, replayed, keep); err != nil {
			t.Errorf("owner's Complete after the strangers: %v", err)
		}
	}},
	{"stale token after release and reclaim", func(t *testing.T, s store, key string) {
		old, _ := mustClaim(t, s, key, lease)
		if err := s.Release(context.Background(), old); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		owner, _ := mustClaim(t, s, key, lease)
		after := time.Now()
		if err := s.Complete(context.Background(), old, replayed, keep); !errors.Is(err, ErrNotOwner) {
			t.Errorf("stale Complete = %v, want ErrNotOwner", err)
		}
		if err := s.Release(context.Background(), old); !errors.Is(err, ErrNotOwner) {
			t.Errorf("stale Release = %v, want ErrNotOwner", err)
		}
		checkInFlight(t, mustLookup(t, s, key), before, after, lease)
		if err := s.Release(context.Background(), owner); err != nil {
			t.Errorf("owner's Release: %v", err)
		}
	}},
	{"complete or release after complete", func(t *testing.T, s store, key string) {
		c, _ := mustClaim(t, s, key, lease)
		before := time.Now()
		if err := s.Complete(context.Background(), c, replayed, keep); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		if err := s.Complete(context.Background(), c, Result{Status: 299}, keep); !errors.Is(err, ErrNotOwner) {
			t.Errorf("second Complete = %v, want ErrNotOwner", err)
		}
		if err := s.Release(context.Background(), c); !errors.Is(err, ErrNotOwner) {
			t.Errorf("Release after Complete = %v, want ErrNotOwner", err)
		}
		checkCompleted(t, mustLookup(t, s, key), replayed, before, after, keep)
	}},
	{"lease expiry", func(t *testing.T, s store, key string) {
		old, _ := mustClaim(t, s, key, short)
		var owner Claim
		var before, after time.Time
		eventually(t, "the expired lease to free the key", func() bool {
			before = time.Now()
			c, _, err := s.Claim(context.Background(), key, lease)
			after = time.Now()
			if err != nil {
				t.Fatal(err)
			}
			owner = c
			return c != (Claim{})
		})
		if err := s.Complete(context.Background(), old, replayed, keep); !errors.Is(err, ErrNotOwner) {
			t.Errorf("expired owner's Complete = %v, want ErrNotOwner", err)
		}
		if err := s.Release(context.Background(), old); !errors.Is(err, ErrNotOwner) {
			t.Errorf("expired owner's Release = %v, want ErrNotOwner", err)
		}
		checkInFlight(t, mustLookup(t, s, key), before, after, lease)
		if err := s.Complete(context.Background(), owner, replayed, keep); err != nil {
			t.Errorf("new owner's Complete: %v", err)
		}
	}},
	{"completed record expires", func(t *testing.T, s store, key string) {
		c, _ := mustClaim(t, s, key, lease)
		if err := s.Complete(context.Background(), c, replayed, expiring); err != nil {
			t.Fatal(err)
		}
		if rec := mustLookup(t, s, key); rec.State != Completed || rec.TTL > expiring {
			t.Errorf("just completed: %v with TTL %s, want completed with TTL ≤ %s", rec.State, rec.TTL, expiring)
		}
		eventually(t, "the completed record to expire", func() bool {
			_, err := s.Lookup(context.Background(), key)
			if err != nil && !errors.Is(err, ErrNotFound) {
				t.Fatal(err)
			}
			return err != nil
		})
		if _, rec := mustClaim(t, s, key, lease); rec.State != Absent {
			t.Errorf("Claim after expiry: state %v, want absent", rec.State)
		}
	}},
	{"concurrent claims have one winner", func(t *testing.T, s store, key string) {
		oneWinner(t, 64, "claims", InFlight, func() (bool, Record, error) {
			c, rec, err := s.Claim(context.Background(), key, lease)
			return c != (Claim{}), rec, err
		})
	}},
	{"lookup absent", func(t *testing.T, s store, key string) {
		rec, err := s.Lookup(context.Background(), key)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("Lookup = %+v, %v; want ErrNotFound", rec, err)
		}
	}},
	{"lookup in flight and completed", func(t *testing.T, s store, key string) {
		before := time.Now()
		c, _ := mustClaim(t, s, key, lease)
		after := time.Now()
		checkInFlight(t, mustLookup(t, s, key), before, after, lease)
		before = time.Now()
		if err := s.Complete(context.Background(), c, replayed, keep); err != nil {
			t.Fatal(err)
		}
		after = time.Now()
		checkCompleted(t, mustLookup(t, s, key), replayed, before, after, keep)
	}},
	{"forget", func(t *testing.T, s store, key string) {
		forget := func(want bool) {
			t.Helper()
			if had, err := s.Forget(context.Background(), key); err != nil || had != want {
				t.Errorf("Forget = %v, %v; want %v", had, err, want)
			}
		}
		forget(false)
		c, _ := mustClaim(t, s, key, lease)
		forget(true)
		if _, err := s.Lookup(context.Background(), key); !errors.Is(err, ErrNotFound) {
			t.Errorf("Lookup after Forget = %v, want ErrNotFound", err)
		}
		if err := s.Complete(context.Background(), c, replayed, keep); !errors.Is(err, ErrNotOwner) {
			t.Errorf("Complete after Forget = %v, want ErrNotOwner", err)
		}
		c, _ = mustClaim(t, s, key, lease)
		if err := s.Complete(context.Background(), c, replayed, keep); err != nil {
			t.Fatal(err)
		}
		forget(true)
		if _, rec := mustClaim(t, s, key, lease); rec.State != Absent {
			t.Errorf("Claim after forgetting a completed record: state %v, want absent", rec.State)
		}
	}},
	{"cancelled context", func(t *testing.T, s store, key string) {
		owner, _ := mustClaim(t, s, key, lease)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for _, tc := range []struct {
			name string
			call func() error
		}{
			{"Claim", func() error { _, _, err := s.Claim(ctx, key+"/free", lease); return err }},
			{"Complete", func() error { return s.Complete(ctx, owner, replayed, keep) }},
			{"Release", func() error { return s.Release(ctx, owner) }},
			{"Lookup", func() error { _, err := s.Lookup(ctx, key); return err }},
			{"Forget", func() error { _, err := s.Forget(ctx, key); return err }},
			{"Ping", func() error { return s.Ping(ctx) }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if err := tc.call(); !errors.Is(err, context.Canceled) {
					t.Errorf("%s with a cancelled context = %v, want context.Canceled", tc.name, err)
				}
			})
		}
		if _, err := s.Lookup(context.Background(), key+"/free"); !errors.Is(err, ErrNotFound) {
			t.Errorf("a cancelled Claim took the key: Lookup = %v", err)
		}
		if rec := mustLookup(t, s, key); rec.State != InFlight {
			t.Errorf("after cancelled calls: state %v, want in-flight", rec.State)
		}
	}},
	{"bad arguments change nothing", func(t *testing.T, s store, key string) {
		for _, d := range []time.Duration{0, -time.Second} {
			if _, _, err := s.Claim(context.Background(), key, d); err == nil {
				t.Errorf("Claim with lease %s succeeded", d)
			}
		}
		if _, err := s.Lookup(context.Background(), key); !errors.Is(err, ErrNotFound) {
			t.Errorf("a rejected Claim took the key: Lookup = %v", err)
		}
		c, _ := mustClaim(t, s, key, lease)
		for _, tc := range []struct {
			name string
			res  Result
			ttl  time.Duration
		}{
			{"zero ttl", replayed, 0},
			{"negative ttl", replayed, -time.Second},
			{"status too large", Result{Status: 70000}, keep},
			{"negative status", Result{Status: -1}, keep},
		} {
			err := s.Complete(context.Background(), c, tc.res, tc.ttl)
			if err == nil || errors.Is(err, ErrNotOwner) {
				t.Errorf("Complete with %s = %v, want an argument error", tc.name, err)
			}
		}
		if rec := mustLookup(t, s, key); rec.State != InFlight {
			t.Errorf("after rejected Completes: state %v, want in-flight", rec.State)
		}
	}},
	{"sub-millisecond lease still claims", func(t *testing.T, s store, key string) {
		if _, _, err := s.Claim(context.Background(), key, time.Microsecond); err != nil {
			t.Errorf("Claim with a 1µs lease: %v", err)
		}
	}},
	{"body is not shared with the caller", func(t *testing.T, s store, key string) {
		c, _ := mustClaim(t, s, key, lease)
		res := replayed
		res.Body = bytes.Clone(replayed.Body)
		if err := s.Complete(context.Background(), c, res, keep); err != nil {
			t.Fatal(err)
		}
		res.Body[0] = 'X'
		got := mustLookup(t, s, key)
		if !bytes.Equal(got.Result.Body, replayed.Body) {
			t.Fatalf("stored body %q changed with the caller's slice", got.Result.Body)
		}
		got.Result.Body[0] = 'Y'
		if again := mustLookup(t, s, key); !bytes.Equal(again.Result.Body, replayed.Body) {
			t.Errorf("stored body %q changed with a returned slice", again.Result.Body)
		}
	}},
	{"ping", func(t *testing.T, s store, key string) {
		if err := s.Ping(context.Background()); err != nil {
			t.Error(err)
		}
	}},
}

// testStore runs the conformance suite against s, in parallel, each case
// on its own key, which is deleted when the case ends.
func testStore(t *testing.T, s store) {
	for _, tt := range storeTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := "dedup-test:" + t.Name()
			t.Cleanup(func() { _, _ = s.Forget(context.Background(), key) })
			tt.run(t, s, key)
		})
	}
}

func mustClaim(t *testing.T, s store, key string, lease time.Duration) (Claim, Record) {
	t.Helper()
	c, rec, err := s.Claim(context.Background(), key, lease)
	if err != nil {
		t.Fatal(err)
	}
	if c == (Claim{}) {
		t.Fatalf("Claim %s: taken (%v), want free", key, rec.State)
	}
	return c, rec
}

func mustLookup(t *testing.T, s store, key string) Record {
	t.Helper()
	rec, err := s.Lookup(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// checkInFlight checks rec is a claim taken between before and after with
// a lease of at most lease.
func checkInFlight(t *testing.T, rec Record, before, after time.Time, lease time.Duration) {
	t.Helper()
	if rec.State != InFlight {
		t.Fatalf("state %v, want in-flight", rec.State)
	}
	if rec.Result.Status != 0 || rec.Result.Fingerprint != ([32]byte{}) || rec.Result.ContentType != "" || rec.Result.Body != nil {
		t.Errorf("in-flight record has a Result: %+v", rec.Result)
	}
	checkTimes(t, rec, before, after, lease)
}

// checkCompleted checks rec holds want, completed between before and after
// and kept for at most ttl.
func checkCompleted(t *testing.T, rec Record, want Result, before, after time.Time, ttl time.Duration) {
	t.Helper()
	if rec.State != Completed {
		t.Fatalf("state %v, want completed", rec.State)
	}
	got := rec.Result
	if got.Status != want.Status || !got.SameBody(want.Fingerprint) || got.KnownBody() != want.KnownBody() || got.ContentType != want.ContentType || !bytes.Equal(got.Body, want.Body) {
		t.Errorf("Result = %+v, want %+v", got, want)
	}
	if want.FullFingerprint && (!got.FullFingerprint || got.Fingerprint != want.Fingerprint) {
		t.Errorf("Fingerprint = %x (whole: %v), want the whole %x kept", got.Fingerprint, got.FullFingerprint, want.Fingerprint)
	}
	if len(want.Body) == 0 && got.Body != nil {
		t.Errorf("Body = %#v, want nil", got.Body)
	}
	checkTimes(t, rec, before, after, ttl)
}

func checkTimes(t *testing.T, rec Record, before, after time.Time, ttl time.Duration) {
	t.Helper()
	// Since has millisecond precision (an in-flight record) or whole
	// seconds (a completed one in Redis).
	if rec.Since.Before(before.Truncate(time.Second)) || rec.Since.After(after) {
		t.Errorf("Since = %s, want between %s and %s", rec.Since, before, after)
	}
	if rec.TTL <= 0 || rec.TTL > ttl {
		t.Errorf("TTL = %s, want in (0, %s]", rec.TTL, ttl)
	}
}

// oneWinner runs try n times at once and fails the test unless exactly one
// of them won (and none failed); each loser must have seen loser's state.
// what names the calls for the failure message.
func oneWinner(t *testing.T, n int, what string, loser State, try func() (won bool, rec Record, err error)) {
	t.Helper()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners int
		start   = make(chan struct{})
	)
	for range n {
		wg.Go(func() {
			<-start
			won, rec, err := try()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Error(err)
			case won:
				winners++
			case rec.State != loser:
				t.Errorf("loser saw state %v, want %v", rec.State, loser)
			}
		})
	}
	close(start)
	wg.Wait()
	if winners != 1 {
		t.Errorf("%d of %d concurrent %s won, want exactly 1", winners, n, what)
	}
}

// eventually polls cond until it holds, failing the test after a deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		<-tick.C
	}
}
