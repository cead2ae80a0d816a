package test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// TestFailoverCluster: three proxies share a Redis Cluster (three masters,
// a replica each) while a provider delivers thousands of events with
// copies and retries; a master is killed (SIGKILL) and its replica takes
// over. No event is lost: while the store cannot answer the proxies say
// 503 and the provider retries. With REDIS_WAIT_REPLICAS=1 no event is
// processed twice either; with 0, the count is measured and reported.
func TestFailoverCluster(t *testing.T) {
	t.Parallel()
	for _, wait := range []int{0, 1} {
		t.Run(fmt.Sprintf("REDIS_WAIT_REPLICAS=%d", wait), func(t *testing.T) {
			cl := redistest.NewCluster(t, redistest.ClusterConfig{ReplicasPerMaster: 1, NodeTimeout: time.Second})
			res := runFailover(t, failoverSetup{
				name:         "cluster",
				env:          map[string]string{"REDIS_CLUSTER_ADDRS": strings.Join(cl.Addrs(), ",")},
				waitReplicas: wait,
				fail: func(ctx context.Context) (failoverTimes, error) {
					var ft failoverTimes
					// The victim: the master of some key, a third of the events'.
					const probe = "failover-victim"
					victim, err := cl.MasterOf(ctx, probe)
					if err != nil {
						return ft, err
					}
					ft.killed = time.Now()
					victim.Stop()
					if _, err := cl.WaitPromoted(ctx, victim, redistest.Slot(probe)); err != nil {
						return ft, fmt.Errorf("no replica took over from %s: %w", victim.Addr, err)
					}
					ft.promoted = time.Now()
					// Restarted, it finds in nodes.conf that it was failed
					// over and joins as the new master's replica.
					victim.Start()
					if err := cl.WaitHealthy(ctx); err != nil {
						return ft, fmt.Errorf("%s did not rejoin: %w", victim.Addr, err)
					}
					ft.rejoined = time.Now()
					return ft, nil
				},
			})
			checkFailover(t, res, wait)
		})
	}
}

// TestFailoverSentinel is TestFailoverCluster on a master and a replica
// watched by three Sentinels.
func TestFailoverSentinel(t *testing.T) {
	t.Parallel()
	for _, wait := range []int{0, 1} {
		t.Run(fmt.Sprintf("REDIS_WAIT_REPLICAS=%d", wait), func(t *testing.T) {
			sn := redistest.NewSentinel(t, redistest.SentinelConfig{DownAfter: time.Second})
			res := runFailover(t, failoverSetup{
				name: "sentinel",
				env: map[string]string{
					"REDIS_SENTINEL_ADDRS":  strings.Join(sn.Addrs(), ","),
					"REDIS_SENTINEL_MASTER": sn.MasterName,
				},
				waitReplicas: wait,
				fail: func(ctx context.Context) (failoverTimes, error) {
					var ft failoverTimes
					victim, err := sn.Master(ctx)
					if err != nil {
						return ft, err
					}
					ft.killed = time.Now()
					victim.Stop()
					if _, err := sn.WaitFailover(ctx, victim); err != nil {
						return ft, fmt.Errorf("the Sentinels did not fail over from %s: %w", victim.Addr, err)
					}
					ft.promoted = time.Now()
					if err := sn.Rejoin(ctx, victim); err != nil {
						return ft, fmt.Errorf("%s did not rejoin: %w", victim.Addr, err)
					}
					ft.rejoined = time.Now()
					return ft, nil
				},
			})
			checkFailover(t, res, wait)
		})
	}
}

// checkFailover asserts what the run must show: a failover the proxies
// noticed, and, when replicas acknowledge every record, no event
// processed twice. (Lost events already failed the run.)
func checkFailover(t *testing.T, res failoverResult, wait int) {
	t.Helper()
	if _, _, _, early := res.window(); len(res.unavailable) == early {
		t.Errorf("no proxy answered 503 after the kill: the run did not exercise the failover")
	}
	if wait > 0 && res.twice > 0 {
		t.Errorf("%d events were processed twice with REDIS_WAIT_REPLICAS=%d, want none", res.twice, wait)
	}
}
