// Package storetest is the conformance suite every store passes: one
// table of store cases and one of queue cases, run by Run against a store
// as its Backend declares it, so that every store (and every topology of
// one, a Redis Cluster or Sentinel) behaves the same. Its helpers serve the
// store packages' own tests too.
package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/timing"
)

// store is what the store cases exercise: every store's records.
type store = dedup.Store

// Durations the cases use, for store packages' own tests too.
const (
	// Lease is long enough never to expire during a test.
	Lease = 30 * time.Second
	// Keep is a completed record's TTL that never expires during a test.
	Keep = time.Hour
	// Short is a lease that a case waits to see expire.
	Short = 150 * time.Millisecond
	// Expiring is the TTL of a completed record a case waits to see
	// expire: the record must still be there when looked up right after
	// Complete, so it outlives a write and a read on a loaded machine.
	Expiring = time.Second
)

// Replayed is a Result with every field set.
var Replayed = dedup.Result{
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
		c, rec := MustClaim(t, s, key, Lease)
		if c.Key != key {
			t.Errorf("Claim.Key = %q, want %q", c.Key, key)
		}
		if tok, err := hex.DecodeString(c.Token); err != nil || len(tok) != 16 {
			t.Errorf("Claim.Token = %q, want 32 hex digits", c.Token)
		}
		if !reflect.DeepEqual(rec, dedup.Record{State: dedup.Absent}) {
			t.Errorf("Record = %+v, want Absent", rec)
		}
		other, _ := MustClaim(t, s, key+"/other", Lease)
		t.Cleanup(func() { _, _ = s.Forget(context.Background(), key+"/other") })
		if other.Token == c.Token {
			t.Errorf("two claims share token %q", c.Token)
		}
	}},
	{"claim taken in flight", func(t *testing.T, s store, key string) {
		before := time.Now()
		MustClaim(t, s, key, Lease)
		after := time.Now()
		c, rec, err := s.Claim(context.Background(), key, Lease)
		if err != nil {
			t.Fatal(err)
		}
		if c != (dedup.Claim{}) {
			t.Errorf("second Claim = %+v, want zero", c)
		}
		checkInFlight(t, rec, before, after, Lease)
	}},
	{"complete then claim", func(t *testing.T, s store, key string) {
		for _, tc := range []struct {
			name string
			res  dedup.Result
		}{
			{"status and fingerprint", dedup.Result{Status: 200, Fingerprint: sha256.Sum256([]byte("x"))}},
			{"whole fingerprint", dedup.Result{Status: 200, Fingerprint: sha256.Sum256([]byte("x")), FullFingerprint: true}},
			{"unknown fingerprint", dedup.Result{Status: 204}},
			{"replayed", Replayed},
			{"content type without body", dedup.Result{Status: 202, ContentType: "text/plain"}},
			{"body without content type", dedup.Result{Status: 200, Body: []byte{0, 1, 2, 0xff}}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				key := key + "/" + tc.name
				t.Cleanup(func() { _, _ = s.Forget(context.Background(), key) })
				c, _ := MustClaim(t, s, key, Lease)
				before := time.Now()
				if err := s.Complete(context.Background(), c, tc.res, Keep); err != nil {
					t.Fatal(err)
				}
				after := time.Now()
				c2, rec, err := s.Claim(context.Background(), key, Lease)
				if err != nil {
					t.Fatal(err)
				}
				if c2 != (dedup.Claim{}) {
					t.Errorf("Claim after Complete = %+v, want zero", c2)
				}
				checkCompleted(t, rec, tc.res, before, after, Keep)
			})
		}
	}},
	{"release then claim", func(t *testing.T, s store, key string) {
		c1, _ := MustClaim(t, s, key, Lease)
		if err := s.Release(context.Background(), c1); err != nil {
			t.Fatal(err)
		}
		c2, rec := MustClaim(t, s, key, Lease)
		if rec.State != dedup.Absent {
			t.Errorf("Claim after Release: state %v, want absent", rec.State)
		}
		if c2.Token == c1.Token {
			t.Error("a new claim reused the released token")
		}
	}},
	{"wrong token", func(t *testing.T, s store, key string) {
		before := time.Now()
		owner, _ := MustClaim(t, s, key, Lease)
		after := time.Now()
		stranger, _ := MustClaim(t, s, key+"/stranger", Lease)
		t.Cleanup(func() { _, _ = s.Forget(context.Background(), key+"/stranger") })
		for _, tc := range []struct {
			name string
			c    dedup.Claim
		}{
			{"never issued", dedup.Claim{Key: key, Token: hex.EncodeToString(make([]byte, 16))}},
			{"another key's", dedup.Claim{Key: key, Token: stranger.Token}},
			{"malformed", dedup.Claim{Key: key, Token: "not a token"}},
			{"empty", dedup.Claim{Key: key}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if err := s.Complete(context.Background(), tc.c, Replayed, Keep); !errors.Is(err, dedup.ErrNotOwner) {
					t.Errorf("Complete = %v, want ErrNotOwner", err)
				}
				if err := s.Release(context.Background(), tc.c); !errors.Is(err, dedup.ErrNotOwner) {
					t.Errorf("Release = %v, want ErrNotOwner", err)
				}
				checkInFlight(t, MustLookup(t, s, key), before, after, Lease)
			})
		}
		if err := s.Complete(context.Background(), owner, Replayed, Keep); err != nil {
			t.Errorf("owner's Complete after the strangers: %v", err)
		}
	}},
	{"stale token after release and reclaim", func(t *testing.T, s store, key string) {
		old, _ := MustClaim(t, s, key, Lease)
		if err := s.Release(context.Background(), old); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		owner, _ := MustClaim(t, s, key, Lease)
		after := time.Now()
		if err := s.Complete(context.Background(), old, Replayed, Keep); !errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("stale Complete = %v, want ErrNotOwner", err)
		}
		if err := s.Release(context.Background(), old); !errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("stale Release = %v, want ErrNotOwner", err)
		}
		checkInFlight(t, MustLookup(t, s, key), before, after, Lease)
		if err := s.Release(context.Background(), owner); err != nil {
			t.Errorf("owner's Release: %v", err)
		}
	}},
	{"complete or release after complete", func(t *testing.T, s store, key string) {
		c, _ := MustClaim(t, s, key, Lease)
		before := time.Now()
		if err := s.Complete(context.Background(), c, Replayed, Keep); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		if err := s.Complete(context.Background(), c, dedup.Result{Status: 299}, Keep); !errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("second Complete = %v, want ErrNotOwner", err)
		}
		if err := s.Release(context.Background(), c); !errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("Release after Complete = %v, want ErrNotOwner", err)
		}
		checkCompleted(t, MustLookup(t, s, key), Replayed, before, after, Keep)
	}},
	{"lease expiry", func(t *testing.T, s store, key string) {
		old, _ := MustClaim(t, s, key, Short)
		var owner dedup.Claim
		var before, after time.Time
		Eventually(t, "the expired lease to free the key", func() bool {
			before = time.Now()
			c, _, err := s.Claim(context.Background(), key, Lease)
			after = time.Now()
			if err != nil {
				t.Fatal(err)
			}
			owner = c
			return c != (dedup.Claim{})
		})
		if err := s.Complete(context.Background(), old, Replayed, Keep); !errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("expired owner's Complete = %v, want ErrNotOwner", err)
		}
		if err := s.Release(context.Background(), old); !errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("expired owner's Release = %v, want ErrNotOwner", err)
		}
		checkInFlight(t, MustLookup(t, s, key), before, after, Lease)
		if err := s.Complete(context.Background(), owner, Replayed, Keep); err != nil {
			t.Errorf("new owner's Complete: %v", err)
		}
	}},
	{"completed record expires", func(t *testing.T, s store, key string) {
		c, _ := MustClaim(t, s, key, Lease)
		if err := s.Complete(context.Background(), c, Replayed, Expiring); err != nil {
			t.Fatal(err)
		}
		if rec := MustLookup(t, s, key); rec.State != dedup.Completed || rec.TTL > Expiring {
			t.Errorf("just completed: %v with TTL %s, want completed with TTL ≤ %s", rec.State, rec.TTL, Expiring)
		}
		Eventually(t, "the completed record to expire", func() bool {
			_, err := s.Lookup(context.Background(), key)
			if err != nil && !errors.Is(err, dedup.ErrNotFound) {
				t.Fatal(err)
			}
			return err != nil
		})
		if _, rec := MustClaim(t, s, key, Lease); rec.State != dedup.Absent {
			t.Errorf("Claim after expiry: state %v, want absent", rec.State)
		}
	}},
	{"concurrent claims have one winner", func(t *testing.T, s store, key string) {
		warm := func() error { return s.Ping(context.Background()) }
		oneWinner(t, 64, "claims", dedup.InFlight, warm, func(round int) (bool, dedup.Record, error) {
			key := fmt.Sprint(key, "/", round)
			t.Cleanup(func() { _, _ = s.Forget(context.Background(), key) })
			c, rec, err := s.Claim(context.Background(), key, Lease)
			return c != (dedup.Claim{}), rec, err
		})
	}},
	{"lookup absent", func(t *testing.T, s store, key string) {
		rec, err := s.Lookup(context.Background(), key)
		if !errors.Is(err, dedup.ErrNotFound) {
			t.Errorf("Lookup = %+v, %v; want ErrNotFound", rec, err)
		}
	}},
	{"lookup in flight and completed", func(t *testing.T, s store, key string) {
		before := time.Now()
		c, _ := MustClaim(t, s, key, Lease)
		after := time.Now()
		checkInFlight(t, MustLookup(t, s, key), before, after, Lease)
		before = time.Now()
		if err := s.Complete(context.Background(), c, Replayed, Keep); err != nil {
			t.Fatal(err)
		}
		after = time.Now()
		checkCompleted(t, MustLookup(t, s, key), Replayed, before, after, Keep)
	}},
	{"forget", func(t *testing.T, s store, key string) {
		forget := func(want bool) {
			t.Helper()
			if had, err := s.Forget(context.Background(), key); err != nil || had != want {
				t.Errorf("Forget = %v, %v; want %v", had, err, want)
			}
		}
		forget(false)
		c, _ := MustClaim(t, s, key, Lease)
		forget(true)
		if _, err := s.Lookup(context.Background(), key); !errors.Is(err, dedup.ErrNotFound) {
			t.Errorf("Lookup after Forget = %v, want ErrNotFound", err)
		}
		if err := s.Complete(context.Background(), c, Replayed, Keep); !errors.Is(err, dedup.ErrNotOwner) {
			t.Errorf("Complete after Forget = %v, want ErrNotOwner", err)
		}
		c, _ = MustClaim(t, s, key, Lease)
		if err := s.Complete(context.Background(), c, Replayed, Keep); err != nil {
			t.Fatal(err)
		}
		forget(true)
		if _, rec := MustClaim(t, s, key, Lease); rec.State != dedup.Absent {
			t.Errorf("Claim after forgetting a completed record: state %v, want absent", rec.State)
		}
	}},
	{"cancelled context", func(t *testing.T, s store, key string) {
		owner, _ := MustClaim(t, s, key, Lease)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for _, tc := range []struct {
			name string
			call func() error
		}{
			{"Claim", func() error { _, _, err := s.Claim(ctx, key+"/free", Lease); return err }},
			{"Complete", func() error { return s.Complete(ctx, owner, Replayed, Keep) }},
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
		if _, err := s.Lookup(context.Background(), key+"/free"); !errors.Is(err, dedup.ErrNotFound) {
			t.Errorf("a cancelled Claim took the key: Lookup = %v", err)
		}
		if rec := MustLookup(t, s, key); rec.State != dedup.InFlight {
			t.Errorf("after cancelled calls: state %v, want in-flight", rec.State)
		}
	}},
	{"bad arguments change nothing", func(t *testing.T, s store, key string) {
		for _, d := range []time.Duration{0, -time.Second} {
			if _, _, err := s.Claim(context.Background(), key, d); err == nil {
				t.Errorf("Claim with lease %s succeeded", d)
			}
		}
		if _, err := s.Lookup(context.Background(), key); !errors.Is(err, dedup.ErrNotFound) {
			t.Errorf("a rejected Claim took the key: Lookup = %v", err)
		}
		c, _ := MustClaim(t, s, key, Lease)
		for _, tc := range []struct {
			name string
			res  dedup.Result
			ttl  time.Duration
		}{
			{"zero ttl", Replayed, 0},
			{"negative ttl", Replayed, -time.Second},
			{"status too large", dedup.Result{Status: 70000}, Keep},
			{"negative status", dedup.Result{Status: -1}, Keep},
		} {
			err := s.Complete(context.Background(), c, tc.res, tc.ttl)
			if err == nil || errors.Is(err, dedup.ErrNotOwner) {
				t.Errorf("Complete with %s = %v, want an argument error", tc.name, err)
			}
		}
		if rec := MustLookup(t, s, key); rec.State != dedup.InFlight {
			t.Errorf("after rejected Completes: state %v, want in-flight", rec.State)
		}
	}},
	{"sub-millisecond lease still claims", func(t *testing.T, s store, key string) {
		if _, _, err := s.Claim(context.Background(), key, time.Microsecond); err != nil {
			t.Errorf("Claim with a 1µs lease: %v", err)
		}
	}},
	{"body is not shared with the caller", func(t *testing.T, s store, key string) {
		c, _ := MustClaim(t, s, key, Lease)
		res := Replayed
		res.Body = bytes.Clone(Replayed.Body)
		if err := s.Complete(context.Background(), c, res, Keep); err != nil {
			t.Fatal(err)
		}
		res.Body[0] = 'X'
		got := MustLookup(t, s, key)
		if !bytes.Equal(got.Result.Body, Replayed.Body) {
			t.Fatalf("stored body %q changed with the caller's slice", got.Result.Body)
		}
		got.Result.Body[0] = 'Y'
		if again := MustLookup(t, s, key); !bytes.Equal(again.Result.Body, Replayed.Body) {
			t.Errorf("stored body %q changed with a returned slice", again.Result.Body)
		}
	}},
	{"ping", func(t *testing.T, s store, key string) {
		if err := s.Ping(context.Background()); err != nil {
			t.Error(err)
		}
	}},
}

// runStore runs the store cases against s, in parallel, each case on its
// own key, which is deleted when the case ends.
func runStore(t *testing.T, s dedup.Store) {
	for _, tt := range storeTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := "dedup-test:" + t.Name()
			t.Cleanup(func() { _, _ = s.Forget(context.Background(), key) })
			tt.run(t, s, key)
		})
	}
}

// MustClaim claims key, failing the test unless the claim is won.
func MustClaim(t *testing.T, s dedup.Store, key string, lease time.Duration) (dedup.Claim, dedup.Record) {
	t.Helper()
	c, rec, err := s.Claim(context.Background(), key, lease)
	if err != nil {
		t.Fatal(err)
	}
	if c == (dedup.Claim{}) {
		t.Fatalf("Claim %s: taken (%v), want free", key, rec.State)
	}
	return c, rec
}

// MustLookup returns key's record, failing the test if there is none.
func MustLookup(t *testing.T, s dedup.Store, key string) dedup.Record {
	t.Helper()
	rec, err := s.Lookup(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// checkInFlight checks rec is a claim taken between before and after with
// a lease of at most lease.
func checkInFlight(t *testing.T, rec dedup.Record, before, after time.Time, lease time.Duration) {
	t.Helper()
	if rec.State != dedup.InFlight {
		t.Fatalf("state %v, want in-flight", rec.State)
	}
	if rec.Result.Status != 0 || rec.Result.Fingerprint != ([32]byte{}) || rec.Result.ContentType != "" || rec.Result.Body != nil {
		t.Errorf("in-flight record has a Result: %+v", rec.Result)
	}
	checkTimes(t, rec, before, after, lease)
}

// checkCompleted checks rec holds want, completed between before and after
// and kept for at most ttl.
func checkCompleted(t *testing.T, rec dedup.Record, want dedup.Result, before, after time.Time, ttl time.Duration) {
	t.Helper()
	if rec.State != dedup.Completed {
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

func checkTimes(t *testing.T, rec dedup.Record, before, after time.Time, ttl time.Duration) {
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

// oneWinner races n calls of try and fails the test unless exactly one of
// them won (and none failed); each loser must have seen loser's state.
// what names the calls for the failure message.
//
// A race the store never saw proves nothing (a store whose connections
// open one at a time answers the calls one after another), so each caller
// first warms the store with warm (its own connection in the pool, as on a
// busy proxy), all are then let go at once, and the round counts how many
// calls were in the store at the same time. Two calls under way together
// still need not meet inside the store (a statement's snapshot taken
// before the other's commit), so the race runs for several rounds, each on
// a fresh key (try gets the round's number); no round in which two calls
// were under way together fails the test: it never raced.
func oneWinner(t *testing.T, n int, what string, loser dedup.State, warm func() error, try func(round int) (won bool, rec dedup.Record, err error)) {
	t.Helper()
	// rounds are run at least; on a loaded machine a fast in-process store
	// can finish each call before the next is scheduled, so more rounds
	// follow, up to maxRounds, until two calls were seen to overlap.
	const rounds, maxRounds = 8, 400
	most, round := 0, 0
	for ; round < rounds || (most < 2 && round < maxRounds); round++ {
		most = max(most, race(t, n, what, loser, warm, func() (bool, dedup.Record, error) { return try(round) }))
		if t.Failed() {
			return
		}
	}
	if most < 2 {
		t.Errorf("in %d rounds of %d concurrent %s, no two were in the store at once: the case never raced", round, n, what)
	}
	t.Logf("up to %d of %d %s in the store at once", most, n, what)
}

// race is one round of oneWinner: it returns the most calls that were
// under way at the same time.
func race(t *testing.T, n int, what string, loser dedup.State, warm func() error, try func() (bool, dedup.Record, error)) (overlap int) {
	t.Helper()
	type call struct {
		won        bool
		start, end time.Time
	}
	var (
		wg, warmed sync.WaitGroup
		start      = make(chan struct{})
		calls      = make([]call, n)
	)
	warmed.Add(n)
	for i := range n {
		wg.Go(func() {
			if err := warmUp(warm, n); err != nil {
				t.Error(err)
			}
			warmed.Done()
			<-start
			c := call{start: time.Now()}
			won, rec, err := try()
			c.end, c.won = time.Now(), won
			switch {
			case err != nil:
				t.Error(err)
			case !won && rec.State != loser:
				t.Errorf("loser saw state %v, want %v", rec.State, loser)
			}
			calls[i] = c
		})
	}
	warmed.Wait()
	close(start)
	wg.Wait()
	winners := 0
	for _, c := range calls {
		if c.won {
			winners++
		}
		under := 0 // calls under way when c began
		for _, o := range calls {
			if !o.start.After(c.start) && o.end.After(c.start) {
				under++
			}
		}
		overlap = max(overlap, under)
	}
	if winners != 1 {
		t.Errorf("%d of %d concurrent %s won, want exactly 1", winners, n, what)
	}
	return overlap
}

// warmUp runs warm, a call that gives its caller a connection of its own
// to the store, again while the store's own bound on an operation cuts it
// short, up to n times (n callers' calls served one after another, each
// within that bound): n callers dialling at once, each shaking hands over
// TLS, can take longer than one operation is given on a loaded machine,
// and how long connections take to open is not what the cases test.
func warmUp(warm func() error, n int) error {
	var err error
	for range n {
		if err = warm(); !timedOut(err) {
			return err
		}
	}
	return fmt.Errorf("warming the store: cut short by its bound %d times: %w", n, err)
}

// timedOut reports whether err is a timeout: a context's deadline or a
// connection's, both of which say so (Timeout).
func timedOut(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// LoadMargin is what a wait in the stores' tests allows beyond the
// timeouts the test configures: the time a loaded 2-core machine (the
// suite under the race detector, beside other work) may add to scheduling
// the store, its server and the test: timing.LoadMargin, the one guess
// the module's tests make, stated once.
const LoadMargin = timing.LoadMargin

// Eventually polls cond until it holds, failing the test after
// LoadMargin: for an event with no configured timeout of note in its way.
func Eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(LoadMargin)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s after %s", what, LoadMargin)
		}
		<-tick.C
	}
}
