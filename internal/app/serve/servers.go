package serve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// exitGrace is how long past SHUTDOWN_DELAY + SHUTDOWN_TIMEOUT a shutdown
// may go on settling with the store: releasing the claims of abandoned
// requests, writing the outcome of deliveries or giving them back to the
// queue, stopping the store's background jobs and closing it. The process
// promises to exit within 2 s of that whatever the store does; the rest is
// for flushing the log and exiting.
const exitGrace = 1500 * time.Millisecond

// deadlines are a shutdown's one clock, fixed when it begins: every wait
// of the process's stop ends by one of them, whatever the store does.
type deadlines struct {
	// finish ends SHUTDOWN_DELAY + SHUTDOWN_TIMEOUT after the shutdown
	// began: requests and deliveries under way may finish until then, and
	// those still running are abandoned then.
	finish context.Context
	// exit ends exitGrace after finish. What still waits on the store then
	// (a claim's release, a delivery's outcome or its return to the
	// queue, a background job, the store's close) is left as the store
	// has it, for the next process, and the log says so.
	exit   context.Context
	cancel context.CancelFunc
}

// newDeadlines starts the clock of a shutdown that keeps serving for
// delay and then drains for timeout.
func newDeadlines(delay, timeout time.Duration) deadlines {
	finishAt := time.Now().Add(delay + timeout)
	finish, cancelFinish := context.WithDeadline(context.Background(), finishAt)
	exit, cancelExit := context.WithDeadline(context.Background(), finishAt.Add(exitGrace))
	return deadlines{finish: finish, exit: exit, cancel: func() { cancelFinish(); cancelExit() }}
}

// errLeft is within's answer when its call was still running at the
// deadline.
var errLeft = errors.New("serve: still running at the shutdown deadline")

// within calls f and waits for it until ctx ends: it returns f's error, or
// errLeft when ctx ended first, leaving f to finish without anyone waiting
// (or to be cut short by the process's exit).
func within(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return awaitBy(ctx, done)
}

// awaitBy waits for the outcome on done until ctx ends; then errLeft,
// unless the outcome is there.
func awaitBy(ctx context.Context, done <-chan error) error {
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-done: // there at the deadline itself
		return err
	default:
		return errLeft
	}
}

// servers are the public and admin servers of one process, what runs
// beside them, and what draining them needs.
type servers struct {
	public, admin     *http.Server
	publicLn, adminLn net.Listener
	// unready turns /readyz to 503.
	unready func()
	// abandon makes the requests still in progress give up and release
	// their claims (proxy.Handler.Abandon); requests counts the requests
	// in progress.
	abandon  func()
	requests *inflight
	// delay is SHUTDOWN_DELAY, timeout SHUTDOWN_TIMEOUT.
	delay, timeout time.Duration
	log            *zap.Logger
	// background run beside the servers until they stop (the store's
	// jobs: the Redis monitor; the queue's stats).
	background []func(context.Context)
	// deliver, if not nil, takes the async routes' deliveries until its
	// context ends (delivery.Workers.Run): at SIGTERM it stops taking.
	// settle then lets the attempts it started finish until finish ends
	// and settle with the store until exit ends (delivery.Workers.Drain),
	// beside the drain, and returns how many it left unsettled. Both nil
	// without async delivery.
	deliver func(context.Context) error
	settle  func(finish, exit context.Context) int
	// closeStore closes the store once the rest has stopped
	// (dedup.Backend.Close). Nil: nothing to close.
	closeStore func() error
}

// run serves until ctx is cancelled (SIGTERM), then drains as
// docs/operations.md's "Graceful shutdown" says, and closes the store. If
// a server fails first, both are drained at once (without SHUTDOWN_DELAY)
// and its error is returned: the other must stop too, or Wait would wait
// for it forever. Once the shutdown has begun, run returns within
// SHUTDOWN_DELAY + SHUTDOWN_TIMEOUT + exitGrace whatever the store does.
func (s *servers) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveUntilClosed(s.public, s.publicLn) })
	g.Go(func() error { return serveUntilClosed(s.admin, s.adminLn) })
	// The rest runs until the shutdown begins, and is not waited for
	// beyond its deadline.
	var rest sync.WaitGroup
	for _, job := range s.background {
		rest.Go(func() { job(gctx) })
	}
	if s.deliver != nil {
		rest.Go(func() { _ = s.deliver(gctx) })
	}
	<-gctx.Done()
	restDone := make(chan error, 1)
	go func() { rest.Wait(); restDone <- nil }()
	delay := s.delay
	if ctx.Err() == nil {
		s.log.Error("a server failed: shutting down")
		delay = 0
	} else {
		s.log.Info("shutting down", zap.Stringer("delay", s.delay), zap.Stringer("timeout", s.timeout))
	}
	d := newDeadlines(delay, s.timeout)
	defer d.cancel()
	s.drain(d, delay)
	err := g.Wait() // both servers are closed: Serve has returned, or is returning
	if errors.Is(awaitBy(d.exit, restDone), errLeft) {
		s.log.Warn("the store's background jobs or the taking of deliveries still wait on the store at the shutdown deadline: exiting without them")
	}
	s.closeWithin(d.exit)
	return err
}

// drain stops both servers: readiness turns 503 at once, the public server
// keeps serving for delay (while load balancers remove the endpoint), then
// lets its requests finish until d.finish, after which it abandons them
// (their claims are released, until d.exit) and closes. The deliveries
// under way drain beside it. It returns by d.exit.
func (s *servers) drain(d deadlines, delay time.Duration) {
	s.unready()
	var deliveries sync.WaitGroup
	if s.settle != nil {
		deliveries.Go(func() {
			if n := s.settle(d.finish, d.exit); n > 0 {
				s.log.Warn("deliveries not settled with the store by the shutdown deadline: exiting without them; their events stay leased until LEASE_TTL runs out, then are delivered again (the app may see them twice)",
					zap.Int("deliveries", n))
			}
		})
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		<-t.C
	}
	if err := s.public.Shutdown(d.finish); err != nil {
		s.log.Warn("drain timed out: abandoning requests still in progress and releasing their claims", zap.Error(err))
		s.abandon()
		if n := s.requests.wait(d.exit); n > 0 {
			s.log.Warn("requests still waiting on the store at the shutdown deadline: exiting without them; their claims stay in flight until LEASE_TTL runs out, then the event is forwarded again",
				zap.Int("requests", n))
		}
		s.public.Close()
	}
	if err := s.admin.Shutdown(d.exit); err != nil {
		s.admin.Close()
	}
	deliveries.Wait() // settle returns by d.exit
}

// closeWithin closes the store, waiting for it until exit at most: a pool
// waits for its connections to close, and on a server that stopped
// answering that can take as long as the driver allows (pgx: 15 s). When
// the shutdown has used all its time already, the store is left as it is:
// the exit closes its connections and its file.
func (s *servers) closeWithin(exit context.Context) {
	if s.closeStore == nil {
		return
	}
	if exit.Err() != nil {
		s.log.Warn("the store is not closed: the shutdown deadline has passed (the exit closes its connections and its file)")
		return
	}
	switch err := within(exit, s.closeStore); {
	case errors.Is(err, errLeft):
		s.log.Warn("the store did not close by the shutdown deadline: exiting without waiting for it (the exit closes its connections and its file)")
	case err != nil:
		s.log.Warn("closing the store failed", zap.Error(err))
	}
}

func serveUntilClosed(s *http.Server, ln net.Listener) error {
	if err := s.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// inflight counts the requests being served, so that the drain can wait
// for them and say how many it left. (A sync.WaitGroup would do, but its
// Wait must not race with an Add from zero, and a request may begin at
// any time before the listener closes.)
type inflight struct {
	mu sync.Mutex
	n  int
	// idle is closed when n falls to zero; nil while nobody waits.
	idle chan struct{}
}

// track is h with its requests counted.
func (f *inflight) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.add(1)
		defer f.add(-1)
		h.ServeHTTP(w, r)
	})
}

func (f *inflight) add(delta int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n += delta
	if f.n == 0 && f.idle != nil {
		close(f.idle)
		f.idle = nil
	}
}

// wait waits until no request is being served or ctx ends, and returns
// how many still are.
func (f *inflight) wait(ctx context.Context) int {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return 0
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
		return 0
	case <-ctx.Done():
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}
