package proxy_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/webhook-dedup/webhook-dedup/proxy"
)

// TestMain fails the package if any test leaves a goroutine running: a
// handler stuck on a hostile client, a claim's release never run, a
// connection never closed. Tests close their servers, clients and stores
// in t.Cleanup, so nothing needs to be ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
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
