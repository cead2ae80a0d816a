package proxy_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"
	"github.com/webhook-dedup/webhook-dedup/proxy"
)

// heldCompletions is an embedded store whose completions wait until the
// test lets each go, failing it or not, and which reports each claim's
// outcome: the window between the app's 2xx and its record, held open.
type heldCompletions struct {
	*memstore.Store
	completing chan string // the key of each completion as it begins
	proceed    chan error  // what the held completion returns instead of completing (nil: it completes)
	claimed    chan dedup.State
}

func newHeldCompletions(t *testing.T) heldCompletions {
	m := memstore.New()
	t.Cleanup(func() { m.Close() })
	return heldCompletions{Store: m, completing: make(chan string, 4), proceed: make(chan error), claimed: make(chan dedup.State, 16)}
}

func (s heldCompletions) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error) {
	c, rec, err := s.Store.Claim(ctx, key, lease)
	if err == nil {
		s.claimed <- rec.State
	}
	return c, rec, err
}

func (s heldCompletions) Complete(ctx context.Context, c dedup.Claim, res dedup.Result, ttl time.Duration) error {
	s.completing <- c.Key
	select {
	case err := <-s.proceed:
		if err != nil {
			return err
		}
		return s.Store.Complete(ctx, c, res, ttl)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestCompletedAfterTheAnswer: the sender has the app's 2xx before its
// record is completed, and a copy arriving in between is never forwarded:
// on the same process it waits for the completion and is a duplicate (or
// in-flight when the completion failed: the claim stays); on another
// replica it is in-flight.
func TestCompletedAfterTheAnswer(t *testing.T) {
	errDown := errors.New("store down")
	for _, tc := range []struct {
		name string
		// replica sends the copy to a second proxy on the same store.
		replica bool
		// fail is what the held completion returns (nil: it completes).
		fail error
		// want is the copy's answer.
		status  int
		outcome string
	}{
		{"same process, completed: duplicate", false, nil, http.StatusOK, "duplicate"},
		{"same process, completion failed: in-flight", false, errDown, http.StatusConflict, "in-flight"},
		{"another replica: in-flight", true, nil, http.StatusConflict, "in-flight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newHeldCompletions(t)
			f := newFixture(t, "/gh=github", proxy.Config{Store: store})
			copyTo := f
			if tc.replica {
				copyTo = newFixture(t, "/gh=github", proxy.Config{Store: store})
			}
			first := f.postAsync(t, "/gh", gh("a1"), "{}")
			if got := <-store.claimed; got != dedup.Absent {
				t.Fatalf("the first copy's claim found %v, want it absent", got)
			}
			if key := <-store.completing; key != "test:github:a1" {
				t.Fatalf("completing %q, want test:github:a1", key)
			}
			// The completion is held: the sender has its answer all the same.
			select {
			case resp := <-first:
				wantAnswer(t, resp, http.StatusOK, "forwarded")
			case <-time.After(loadMargin):
				t.Fatal("the sender had no answer while its record was being completed")
			}
			// A new connection, as a sender's retry or a concurrent
			// delivery would come: not the first's, whose next request
			// the server reads only once the first's handler is done.
			second := copyTo.postAsync(t, "/gh", gh("a1"), "{}")
			if got := <-store.claimed; got != dedup.InFlight {
				t.Fatalf("the copy's claim found %v, want in flight", got)
			}
			if tc.replica {
				wantAnswer(t, <-second, tc.status, tc.outcome)
				store.proceed <- tc.fail
			} else {
				store.proceed <- tc.fail
				resp := <-second
				wantAnswer(t, resp, tc.status, tc.outcome)
			}
			if n := f.up.calls.Load() + copyTo.up.calls.Load()*btoi(tc.replica); n != 1 {
				t.Errorf("the app was called %d times, want once", n)
			}
		})
	}
}

func btoi(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
