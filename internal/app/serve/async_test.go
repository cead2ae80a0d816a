package serve

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup/diskstore"
)

// TestAsyncDeliveryLogsDurations: the start-up line of async delivery
// gives RETRY_MAX_AGE as it is configured ("72h0m0s"), not as a number
// of seconds (259200) a reader has to work back.
func TestAsyncDeliveryLogsDurations(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Load(map[string]string{"UPSTREAM_URL": "http://127.0.0.1:3000", "DELIVERY": "async", "DATA_DIR": dir, "ROUTES": "/=header:X-Id"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := diskstore.Open(diskstore.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	core, logs := observer.New(zap.InfoLevel)
	if q, _, _ := asyncDelivery(context.Background(), cfg, st.Backend(), nil, prometheus.NewRegistry(), zap.New(core), nil, nil, nil); q == nil {
		t.Fatal("no async delivery for DELIVERY=async")
	}
	lines := logs.FilterMessage("async delivery").All()
	if len(lines) != 1 {
		t.Fatalf("%d start-up lines of async delivery, want 1", len(lines))
	}
	if got := lines[0].ContextMap()["max_age"]; got != "72h0m0s" {
		t.Errorf("max_age = %v (%T), want the string 72h0m0s", got, got)
	}
}
