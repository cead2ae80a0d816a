package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// A request's deadline still bounds its Redis call, alone (through the
// plain client) or waiting for a batch, and an abandoned wait leaves the
// store working.
func TestRedisDeadlineWhileRedisIsPaused(t *testing.T) {
	ctx := context.Background()
	// Past both claims' deadlines however slow the machine.
	s, _, unpause := pausedRedis(t)
	claimBefore := func(what string, d time.Duration) {
		t.Helper()
		short, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		start := time.Now()
		_, _, err := s.Claim(short, "paused-"+what, storetest.Lease)
		// The deadline, as the context reports it or as the read it cut
		// short does (go-redis does not send the call again, which made
		// it report the context's error).
		var ne net.Error
		if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
			t.Fatalf("%s claim while Redis is paused = %v, want its deadline's error", what, err)
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
	storetest.Eventually(t, "the lone claim to be in flight", pl.busy)
	// ...so this one waits to lead the next batch.
	claimBefore("batched", 100*time.Millisecond)
	<-lone
	unpause()
	storetest.Eventually(t, "a claim to succeed once Redis resumes", func() bool {
		_, rec, err := s.Claim(ctx, "after-pause", storetest.Lease)
		return err == nil && rec.State == dedup.Absent
	})
}

// Concurrent calls share batches; each still gets its own answer.
func TestRedisConcurrentCallsGetTheirOwnAnswers(t *testing.T) {
	s := openRedis(t, redistest.New(t))
	ctx := context.Background()
	wait := inParallel(64, func(i int) error {
		key := fmt.Sprintf("concurrent-%d", i)
		c, err := claimFree(ctx, s, key)
		if err != nil {
			return err
		}
		res := dedup.Result{Status: 200 + i}
		if err := s.Complete(ctx, c, res, storetest.Keep); err != nil {
			return fmt.Errorf("complete %s: %v", key, err)
		}
		got, err := s.Lookup(ctx, key)
		if err != nil || got.State != dedup.Completed || got.Result.Status != res.Status {
			return fmt.Errorf("lookup %s = %v %d, %v; want completed %d", key, got.State, got.Result.Status, err, res.Status)
		}
		return nil
	})
	for _, err := range wait() {
		t.Error(err)
	}
}

// busy reports whether a call or a batch is on its way to Redis.
func (p pipelined) busy() bool {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	return p.b.busy
}

// Calls made while one is on its way to Redis wait for it and go as one
// batch, each with its own answer; a call whose deadline passes before
// its batch is sent is left out of it, never to run.
func TestRedisCallsWaitingGoAsOneBatch(t *testing.T) {
	ctx := context.Background()
	s, raw, unpause := pausedRedis(t)
	pl := s.scripts.(pipelined)
	// The lone call, held by the pause...
	lone := make(chan error, 1)
	set := func(ctx context.Context, key string) error {
		return pl.Eval(ctx, "return redis.call('SET', KEYS[1], '1')", []string{key}).Err()
	}
	go func() { lone <- set(ctx, "batch:lone") }()
	storetest.Eventually(t, "the lone call to be on its way", pl.busy)
	// ...and the batch waiting for it: claims, and a call that gives up.
	const n = 8
	wait := inParallel(n, func(i int) error {
		_, err := claimFree(ctx, s, fmt.Sprintf("batch:%d", i))
		return err
	})
	waiting := func() int {
		pl.b.mu.Lock()
		defer pl.b.mu.Unlock()
		if pl.b.next == nil {
			return 0
		}
		return len(pl.b.next.calls)
	}
	storetest.Eventually(t, "the claims to wait for the next batch", func() bool { return waiting() == n })
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := set(short, "batch:gave-up"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a call whose deadline passed while it waited = %v, want context.DeadlineExceeded", err)
	}
	unpause()
	if err := <-lone; err != nil {
		t.Errorf("the lone call: %v", err)
	}
	for _, err := range wait() {
		t.Error(err)
	}
	storetest.Eventually(t, "the way to Redis to be free", func() bool { return !pl.busy() })
	if n, err := raw.Exists(ctx, "batch:gave-up").Result(); err != nil || n != 0 {
		t.Errorf("the call that gave up before its batch was sent ran (EXISTS = %d, %v)", n, err)
	}
}

// pausedRedis opens a store on a Redis of its own and pauses it: Redis
// holds every client's writes, scripts included, until unpause (which the
// test's cleanup calls too). raw is a client of that Redis beside the
// store's. (Not ALL: Redis would hold the UNPAUSE too, for the whole
// pause.)
func pausedRedis(t *testing.T) (s *Store, raw *redis.Client, unpause func()) {
	t.Helper()
	srv := redistest.New(t)
	s = openRedis(t, srv)
	raw = redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = raw.Close() })
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := raw.Do(ctx, "CLIENT", "PAUSE", "10000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unpause = func() {
		once.Do(func() {
			if err := raw.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(unpause)
	return s, raw, unpause
}

// claimFree claims key, which no record holds, and says what went wrong.
func claimFree(ctx context.Context, s *Store, key string) (dedup.Claim, error) {
	c, rec, err := s.Claim(ctx, key, storetest.Lease)
	if err != nil || c.Key != key || rec.State != dedup.Absent {
		return c, fmt.Errorf("claim %s = %+v, %v, %v", key, c, rec.State, err)
	}
	return c, nil
}

// inParallel starts f(0) … f(n-1), each on a goroutine of its own; wait
// waits for them all and returns their errors.
func inParallel(n int, f func(i int) error) (wait func() []error) {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	return func() []error {
		wg.Wait()
		return slices.DeleteFunc(errs, func(err error) bool { return err == nil })
	}
}
