package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// TestRedisAcceptOneScript enqueues on one server in each shape an
// enqueue can meet, and checks that each is one script call (one round
// trip: the marker and the enqueue in one step, nothing after it), and
// that the sync key's marker ends as the two steps of a cluster leave it.
func TestRedisAcceptOneScript(t *testing.T) {
	srv := redistest.New(t)
	s := openRedis(t, srv)
	raw := rawClient(t, srv)
	ctx := context.Background()
	// Every script loaded, so that no EVALSHA falls back to EVAL.
	storetest.MustEnqueue(t, s, "warm")

	type marker string
	const (
		none       marker = "no marker"
		persistent marker = "the marker without expiry"
		expiring   marker = "the marker with the record's lifetime"
		other      marker = "the sync record"
	)
	cases := []struct {
		name     string
		setup    func(t *testing.T, key string)
		maxDepth int
		won      bool
		state    dedup.State // of the record that holds the key, when not won
		err      error
		marker   marker
	}{
		{name: "free key", won: true, marker: persistent},
		{name: "marker without its record", setup: func(t *testing.T, key string) {
			if err := raw.Set(ctx, key, asyncMarker, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}, won: true, marker: persistent},
		{name: "claimed by a sync route", setup: func(t *testing.T, key string) {
			storetest.MustClaim(t, s, key, storetest.Lease)
		}, state: dedup.InFlight, marker: other},
		{name: "queued already", setup: func(t *testing.T, key string) {
			storetest.MustEnqueue(t, s, key)
		}, state: dedup.Queued, marker: persistent},
		{name: "delivered, its marker lost", setup: func(t *testing.T, key string) {
			storetest.MustEnqueue(t, s, key)
			for _, d := range storetest.Take(t, s, 10, storetest.Lease) {
				if err := s.Succeed(ctx, d, dedup.Result{Status: 200}, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			if err := raw.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
		}, state: dedup.Completed, marker: expiring},
		{name: "queue full", setup: func(t *testing.T, key string) {
			storetest.MustEnqueue(t, s, key+"/ahead")
		}, maxDepth: 1, err: dedup.ErrQueueFull, marker: none},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := "accept/" + strings.ReplaceAll(c.name, " ", "-")
			if c.setup != nil {
				c.setup(t, key)
			}
			before := scriptCalls(t, raw)
			won, rec, err := s.Enqueue(ctx, key, storetest.Request, c.maxDepth)
			if n := scriptCalls(t, raw) - before; n != 1 {
				t.Errorf("Enqueue ran %d scripts, want 1", n)
			}
			switch {
			case c.err != nil:
				if !errors.Is(err, c.err) {
					t.Errorf("Enqueue = %v, want %v", err, c.err)
				}
			case err != nil:
				t.Fatalf("Enqueue: %v", err)
			case won != c.won:
				t.Errorf("Enqueue won %v, want %v", won, c.won)
			case !won && rec.State != c.state:
				t.Errorf("Enqueue found %v, want %v", rec.State, c.state)
			}
			v, err := raw.Get(ctx, key).Result()
			if errors.Is(err, redis.Nil) {
				v = ""
			} else if err != nil {
				t.Fatal(err)
			}
			ttl := raw.PTTL(ctx, key).Val()
			var got marker
			switch {
			case v == "":
				got = none
			case v != asyncMarker:
				got = other
			case ttl > 0:
				got = expiring
			default:
				got = persistent
			}
			if got != c.marker {
				t.Errorf("sync key holds %q, pttl %v: %s, want %s", v, ttl, got, c.marker)
			}
		})
	}
}

// scriptCalls is how many scripts the server has run: EVALSHA and EVAL
// calls, from INFO commandstats.
func scriptCalls(t *testing.T, raw *redis.Client) int {
	t.Helper()
	info, err := raw.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.SplitSeq(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		c, err := strconv.Atoi(calls)
		if err != nil {
			t.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		n += c
	}
	return n
}

// TestRedisSettleOneScript settles a delivery on one server in each way a
// delivery is settled, and checks that each is one script call (the
// settle and its marker in one step, nothing after it), and that the
// sync key's marker ends with the lifetime of the record the settle left:
// a completed record's, a dead letter's keep, none for a dead letter
// that holds its order key or an event queued again.
func TestRedisSettleOneScript(t *testing.T) {
	srv := redistest.New(t)
	s := openRedis(t, srv)
	raw := rawClient(t, srv)
	ctx := context.Background()
	const ttl, keep = time.Hour, 2 * time.Hour
	// Every script loaded, so that no EVALSHA falls back to EVAL.
	storetest.MustEnqueue(t, s, "warm")
	for _, d := range storetest.Take(t, s, 10, storetest.Lease) {
		if err := s.Succeed(ctx, d, dedup.Result{Status: 200}, ttl); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		order  bool // queued with an order key whose dead letter blocks it
		settle func(d dedup.Delivery) error
		// want is the marker's lifetime afterwards; zero: none.
		want time.Duration
	}{
		{name: "succeed", settle: func(d dedup.Delivery) error {
			return s.Succeed(ctx, d, dedup.Result{Status: 200}, ttl)
		}, want: ttl},
		{name: "fail", settle: func(d dedup.Delivery) error {
			return s.Fail(ctx, d, 500, "failed", keep)
		}, want: keep},
		{name: "fail holding its order key", order: true, settle: func(d dedup.Delivery) error {
			return s.Fail(ctx, d, 500, "failed", keep)
		}},
		{name: "retry", settle: func(d dedup.Delivery) error {
			return s.Retry(ctx, d, time.Now().Add(time.Hour), 500, "failed")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := "settle/" + strings.ReplaceAll(c.name, " ", "-")
			req := storetest.Request
			if c.order {
				req.OrderKey, req.OrderBlock = key, true
			}
			if won, _, err := s.Enqueue(ctx, key, req, 0); err != nil || !won {
				t.Fatalf("Enqueue = %v, %v", won, err)
			}
			ds := storetest.Take(t, s, 10, storetest.Lease)
			if len(ds) != 1 {
				t.Fatalf("Take handed out %d deliveries, want 1", len(ds))
			}
			before := scriptCalls(t, raw)
			if err := c.settle(ds[0]); err != nil {
				t.Fatal(err)
			}
			if n := scriptCalls(t, raw) - before; n != 1 {
				t.Errorf("settling ran %d scripts, want 1", n)
			}
			if v := raw.Get(ctx, key).Val(); v != asyncMarker {
				t.Fatalf("sync key holds %q, want the marker", v)
			}
			got := raw.PTTL(ctx, key).Val()
			if c.want == 0 && got >= 0 || c.want > 0 && (got <= c.want-time.Minute || got > c.want) {
				t.Errorf("marker's pttl %v, want %v", got, c.want)
			}
		})
	}
}
