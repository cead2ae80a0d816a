package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// requestCases: Operator.Request, what an operator reads of an event's
// request, in every state an event goes through: kept while queued,
// delivered, retried, dead-lettered and requeued, and across a restart;
// gone once completed, forgotten or expired; never for a sync record.
var requestCases = []queueCase{
	{"request kept until completion", func(t *testing.T, s queueStore, again func() queueStore) {
		ctx := context.Background()
		keys := make([]string, len(Requests))
		for i, r := range Requests {
			keys[i] = fmt.Sprint("k", i)
			if won, _, err := s.Enqueue(ctx, keys[i], r, 0); err != nil || !won {
				t.Fatalf("Enqueue %s = %v, %v", keys[i], won, err)
			}
		}
		check := func(when string, s queueStore) {
			t.Helper()
			for i, key := range keys {
				if got, err := s.Request(ctx, key); err != nil || !reflect.DeepEqual(got, Requests[i]) {
					t.Errorf("%s: Request(%s) = %+v, %v; want %+v", when, key, got, err, Requests[i])
				}
			}
		}
		check("queued", s)
		ds := byKey(Take(t, s, len(keys), Lease))
		check("being delivered", s)
		if err := s.Retry(ctx, ds["k0"], time.Now(), 503, "the app answered 503"); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys[1:] {
			if err := s.Fail(ctx, ds[k], 500, "the app answered 500", Keep); err != nil {
				t.Fatal(err)
			}
		}
		check("retried and dead-lettered", s)
		if err := s.Requeue(ctx, "k1"); err != nil {
			t.Fatal(err)
		}
		check("requeued", s)
		s = again()
		check("after a restart", s)
		for _, d := range Take(t, s, len(keys), Lease) {
			if err := s.Succeed(ctx, d, Replayed, Keep); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Request(ctx, d.Claim.Key); !errors.Is(err, dedup.ErrNoRequest) {
				t.Errorf("Request(%s) once completed = %v, want ErrNoRequest", d.Claim.Key, err)
			}
		}
	}},
	{"request of no queued event", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		c, _ := MustClaim(t, s, "sync-in-flight", Lease)
		done, _ := MustClaim(t, s, "sync-done", Lease)
		if err := s.Complete(ctx, done, Replayed, Keep); err != nil {
			t.Fatal(err)
		}
		MustEnqueue(t, s, "forgotten")
		if _, err := s.Forget(ctx, "forgotten"); err != nil {
			t.Fatal(err)
		}
		MustEnqueue(t, s, "expired")
		if err := s.Fail(ctx, TakeOne(t, s, Lease), 0, "timeout", Short); err != nil {
			t.Fatal(err)
		}
		Eventually(t, "the dead letter to expire", func() bool {
			_, err := s.Lookup(ctx, "expired")
			return errors.Is(err, dedup.ErrNotFound)
		})
		for _, tc := range []struct {
			key  string
			want error
		}{
			{"never-seen", dedup.ErrNotFound},
			{"forgotten", dedup.ErrNotFound},
			{"expired", dedup.ErrNotFound},
			{c.Key, dedup.ErrNoRequest},
			{"sync-done", dedup.ErrNoRequest},
		} {
			if _, err := s.Request(ctx, tc.key); !errors.Is(err, tc.want) {
				t.Errorf("Request(%s) = %v, want %v", tc.key, err, tc.want)
			}
		}
	}},
}
