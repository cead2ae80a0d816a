package proxy_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/webhook-dedup/webhook-dedup/proxy"
)

// TestMain fails the package if any test leaves a goroutine running: a
// handler stuck on a hostile client, a claim's release never run, a
// connection never closed. Tests close their servers, clients and stores
// in t.Cleanup, so nothing needs to be ignored. It is goleak.VerifyTestMain
// with findLeaks's longer wait.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := findLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakDeadline is how long goroutines get to end once everything they
// serve is closed. goleak gives up after about 0.4 s (twenty retries, at
// most 100 ms apart; v1.3.0 has no option to change that), which a
// starved process can take just to run a closed connection's read loop to
// its end. A goroutine that never ends still fails, only later.
const leakDeadline = 10 * time.Second

// findLeaks is goleak.Find, tried again until it finds no leak or
// leakDeadline has passed; it returns the last error.
func findLeaks(options ...goleak.Option) error {
	deadline := time.Now().Add(leakDeadline)
	for {
		err := goleak.Find(options...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		// No sleep: each failing Find already waits about 0.4 s.
	}
}

// newHandler is proxy.New for a configuration the test knows is complete.
func newHandler(tb testing.TB, cfg proxy.Config) *proxy.Handler {
	tb.Helper()
	h, err := proxy.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}
