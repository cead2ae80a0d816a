package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/redistest"
)

// A request's deadline still bounds its Redis call, alone (through the
// plain client) or batched (through the autopipeliner), and an abandoned
// wait leaves the store working.
func TestRedisDeadlineWhileRedisIsPaused(t *testing.T) {
	srv := redistest.New(t)
	s := openRedis(t, srv)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = raw.Close() })
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	// Redis holds every client's writes, scripts included, until it is
	// told to go on: past both claims' deadlines however slow the machine.
	// (Not ALL: Redis would hold the UNPAUSE too, for the whole pause.)
	if err := raw.Do(ctx, "CLIENT", "PAUSE", "10000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	claimBefore := func(what string, d time.Duration) {
		t.Helper()
		short, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		start := time.Now()
		_, _, err := s.Claim(short, "paused-"+what, storetest.Lease)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s claim while Redis is paused = %v, want context.DeadlineExceeded", what, err)
		}
		if waited := time.Since(start); waited > d+900*time.Millisecond {
			t.Errorf("%s claim returned after %s, past its %s deadline", what, waited.Round(time.Millisecond), d)
		}
	}
	// The lone claim takes the plain client, and stays in flight (long
	// enough to be seen, and to outlast the next claim's start, on a
	// loaded machine)...
	lone := make(chan struct{})
	go func() {
		defer close(lone)
		claimBefore("lone", time.Second)
	}()
	pl := s.scripts.(pipelined)
	storetest.Eventually(t, "the lone claim to be in flight", func() bool { return pl.inFlight.Load() > 0 })
	// ...so this one goes through the autopipeliner.
	claimBefore("batched", 100*time.Millisecond)
	<-lone
	if err := raw.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, "a claim to succeed once Redis resumes", func() bool {
		_, rec, err := s.Claim(ctx, "after-pause", storetest.Lease)
		return err == nil && rec.State == dedup.Absent
	})
}

// Concurrent calls share batches; each still gets its own answer.
func TestRedisConcurrentCallsGetTheirOwnAnswers(t *testing.T) {
	s := openRedis(t, redistest.New(t))
	ctx := context.Background()
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("concurrent-%d", i)
			c, rec, err := s.Claim(ctx, key, storetest.Lease)
			if err != nil || c.Key != key || rec.State != dedup.Absent {
				errs <- fmt.Errorf("claim %s = %+v, %v, %v", key, c, rec.State, err)
				return
			}
			res := dedup.Result{Status: 200 + i}
			if err := s.Complete(ctx, c, res, storetest.Keep); err != nil {
				errs <- fmt.Errorf("complete %s: %v", key, err)
				return
			}
			got, err := s.Lookup(ctx, key)
			if err != nil || got.State != dedup.Completed || got.Result.Status != res.Status {
				errs <- fmt.Errorf("lookup %s = %v %d, %v; want completed %d", key, got.State, got.Result.Status, err, res.Status)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
