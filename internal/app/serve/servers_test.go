package serve

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/timing"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// loadMargin is what a wait in these tests allows beyond the bounds the
// servers are given: the time a loaded 2-core machine (the suite under
// the race detector, beside other work) may add to scheduling them and
// the test: timing.LoadMargin, the one guess the module's tests make,
// stated once.
const loadMargin = timing.LoadMargin

// TestServersStopOnTimeWhateverTheStore: once the shutdown has begun, run
// returns within SHUTDOWN_DELAY + SHUTDOWN_TIMEOUT + exitGrace whatever
// waits on the store and never returns (each part that can), and logs
// what it left behind.
func TestServersStopOnTimeWhateverTheStore(t *testing.T) {
	forever := make(chan struct{}) // never closed: what waits on it, waits on a store that never answers
	entered := make(chan struct{}, 1)
	for _, tc := range []struct {
		name string
		// stick makes one part of s wait on the store forever; request,
		// if set, is sent before the shutdown and must reach the handler.
		stick   func(s *servers)
		request bool
		want    string
	}{
		{"a request waiting on the store, deaf to Abandon", func(s *servers) {
			s.public.Handler = s.requests.track(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
				entered <- struct{}{}
				<-forever
			}))
		}, true, "requests still waiting on the store at the shutdown deadline"},
		{"deliveries settling with the store", func(s *servers) {
			s.deliver = func(ctx context.Context) error { <-ctx.Done(); return nil }
			s.settle = func(_, exit context.Context) int { <-exit.Done(); return 3 }
		}, false, "deliveries not settled with the store by the shutdown deadline"},
		{"a background job deaf to its context", func(s *servers) {
			s.background = []func(context.Context){func(context.Context) { <-forever }}
		}, false, "the store's background jobs or the taking of deliveries still wait on the store at the shutdown deadline"},
		{"a store whose close never returns", func(s *servers) {
			s.closeStore = func() error { <-forever; return nil }
		}, false, "the store did not close by the shutdown deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.InfoLevel)
			s := &servers{
				public: &http.Server{}, publicLn: listen(t),
				admin: &http.Server{Handler: http.NotFoundHandler()}, adminLn: listen(t),
				unready: func() {}, abandon: func() {}, requests: &inflight{},
				delay: 100 * time.Millisecond, timeout: 200 * time.Millisecond, log: zap.New(core),
			}
			tc.stick(s)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.run(ctx) }()
			if tc.request {
				go func() {
					resp, err := http.Post("http://"+s.publicLn.Addr().String(), "text/plain", nil)
					if err == nil {
						resp.Body.Close()
					}
				}()
				<-entered
			}
			start := time.Now()
			cancel()
			bound := s.delay + s.timeout + exitGrace
			select {
			case err := <-done:
				took := time.Since(start)
				if err != nil {
					t.Errorf("run = %v, want nil", err)
				}
				if took > bound+500*time.Millisecond {
					t.Errorf("run returned %s after the shutdown began, want within %s", took, bound)
				}
				t.Logf("run returned %s after the shutdown began (bound %s)", took.Round(time.Millisecond), bound)
			case <-time.After(bound + loadMargin): // past the bound, to measure how late a run that overruns it is
				t.Fatalf("run still running %s after the shutdown began, want within %s", bound+loadMargin, bound)
			}
			var said bool
			for _, e := range logs.All() {
				said = said || strings.Contains(e.Message, tc.want)
			}
			if !said {
				t.Errorf("the log does not say %q; it says %v", tc.want, logs.All())
			}
		})
	}
}
