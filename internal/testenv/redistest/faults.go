package redistest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// FillMemory makes the server refuse writes, as a noeviction Redis that
// filled up does: it writes 1 MB of keys without a TTL (filler:0 to
// filler:999), then sets maxmemory-policy noeviction and maxmemory 500 KB
// below what is used, so every write that can grow memory is refused. It
// fails the test unless a SET is then refused with an OOM error. CONFIG SET
// maxmemory 0 gives the room back.
func (s *Server) FillMemory(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: s.TLS, ReadTimeout: 10 * time.Second})
	defer rc.Close()
	p := rc.Pipeline()
	for i := range 1000 {
		p.Set(ctx, "filler:"+strconv.Itoa(i), strings.Repeat("x", 1000), 0)
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := rc.InfoMap(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	usedMemory := info["Memory"]["used_memory"]
	used, err := strconv.ParseInt(usedMemory, 10, 64)
	if err != nil {
		t.Fatalf("INFO memory used_memory %q: %v", usedMemory, err)
	}
	if err := rc.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used-500_000, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.Set(ctx, "filler:more", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("SET on the filled Redis = %v, want an OOM error", err)
	}
}

// StallDeadline bounds how long Stall waits for the server to stop
// answering: a test whose stall must outlast a bound makes it this much
// longer, for the part Stall may spend watching it begin.
const StallDeadline = 5 * time.Second

// stallProbeTimeout is how long Stall's PING may go unanswered before it
// counts as a sign of the stall: well beyond what a loaded machine takes
// to answer one.
const stallProbeTimeout = 200 * time.Millisecond

// Stall makes the server (started with --enable-debug-command yes) sleep
// for d (DEBUG SLEEP, sent in the background) and returns once it has
// stopped answering PING; it fails the test if it still answers after 5s.
func (s *Server) Stall(t testing.TB, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StallDeadline)
	defer cancel()
	sleeper := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: s.TLS, ReadTimeout: d + 5*time.Second})
	t.Cleanup(func() { _ = sleeper.Close() })
	probe := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: s.TLS, ReadTimeout: stallProbeTimeout, MaxRetries: -1})
	defer probe.Close()
	// Both connections are dialled and answering before the sleep is
	// sent: on a loaded machine a first PING can time out on its dial and
	// handshake alone, with the sleep not even sent yet.
	for _, c := range []*redis.Client{sleeper, probe} {
		if err := Poll(ctx, func() error { return c.Ping(ctx).Err() }); err != nil {
			t.Fatalf("redis-server on %s did not answer before the stall: %v", s.Addr, err)
		}
	}
	go sleeper.Do(context.Background(), "DEBUG", "SLEEP", strconv.FormatFloat(d.Seconds(), 'f', 3, 64))
	// One PING unanswered may be the machine's load; two in a row are the
	// stall.
	missed := 0
	err := Poll(ctx, func() error {
		// Not ctx: a PING cut short by the deadline is not a stall.
		if probe.Ping(context.Background()).Err() == nil {
			missed = 0
			return errors.New("PING still answered")
		}
		if missed++; missed < 2 {
			return errors.New("one PING unanswered")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redis-server on %s did not stall: %v", s.Addr, err)
	}
}
