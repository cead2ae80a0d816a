package proxy

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

func gauge(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestLeaseSettlesOnce: a lease is settled by its first Complete or
// Release, with no request or ResponseWriter in sight (as a background
// delivery settles one); later calls, concurrent ones included, do nothing.
func TestLeaseSettlesOnce(t *testing.T) {
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	m := NewMetrics(prometheus.NewRegistry())
	ls := &leases{store: st, lease: time.Minute, m: m}
	ctx := context.Background()

	l, _, err := ls.claim(ctx, "k1", time.Hour, "")
	if err != nil || l == nil || l.Key() != "k1" {
		t.Fatalf("claim: %v, %v", l, err)
	}
	if _, rec, _ := ls.claim(ctx, "k1", time.Hour, ""); rec.State != dedup.InFlight {
		t.Fatalf("a second claim found %v, want in-flight", rec.State)
	}
	if err := l.Complete(ctx, dedup.Result{Status: 201}); err != nil || !l.Settled() {
		t.Fatalf("Complete: %v, settled %t", err, l.Settled())
	}
	if err := l.Complete(ctx, dedup.Result{Status: 500}); err != nil {
		t.Fatalf("Complete again: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release after Complete: %v", err)
	}
	if rec, err := st.Lookup(ctx, "k1"); err != nil || rec.State != dedup.Completed || rec.Result.Status != 201 {
		t.Fatalf("after Complete, Complete, Release: %v %d %v; want completed with the first's 201", rec.State, rec.Result.Status, err)
	}

	l, _, err = ls.claim(ctx, "k2", time.Hour, "")
	if err != nil || l == nil {
		t.Fatalf("claim: %v, %v", l, err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
		}()
	}
	wg.Wait()
	if err := l.Complete(ctx, dedup.Result{Status: 200}); err != nil {
		t.Fatalf("Complete after Release: %v", err)
	}
	if _, err := st.Lookup(ctx, "k2"); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("after eight Releases and a Complete: %v, want released", err)
	}
	if n := gauge(t, m.inflight); n != 0 {
		t.Errorf("webhook_dedup_inflight_claims is %v with every lease settled, want 0", n)
	}
}
