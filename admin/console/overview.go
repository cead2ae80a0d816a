package console

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// The metrics the overview reads from the Prometheus gatherer, by name:
// the counters per route (read into the window), and the gauges of
// delivery's state per route. A gauge no sample of which names a route
// shows as "—" (a version that does not export it).
const (
	requestsMetric   = "webhook_dedup_requests_total"
	deliveriesMetric = "webhook_dedup_deliveries_total"
	// pausedMetric is 1 while a route's new attempts are held back
	// (breaker, the app's 429/503 Retry-After, its rate=); its reason
	// label, if it has one, says which.
	pausedMetric = "webhook_dedup_route_paused"
	// depthMetric, when its samples carry a route label, is each route's
	// queue depth; otherwise the depth is counted from the store.
	depthMetric = "webhook_dedup_queue_depth"
)

// Window bounds: the counters are kept as read once a minute (Run, or a
// page view a minute after the last), the last windowLen of them.
const (
	sampleEvery = time.Minute
	windowLen   = 15 * time.Minute
	// countBound bounds what the overview counts of one route's queued
	// events and dead letters from the store: past it, it shows "500+".
	countBound = 500
)

// counts are one route's counters.
type counts struct {
	Requests, Delivered float64
	// Failed counts the attempts that failed: retried or dead-lettered.
	Failed float64
}

type snapshot struct {
	at     time.Time
	routes map[string]counts
}

// window keeps the counters as read over the last windowLen, oldest
// first, so that the overview shows what happened lately, not since start.
type window struct {
	mu    sync.Mutex
	snaps []snapshot
}

// add keeps s if the newest kept is sampleEvery old or more, and drops
// those older than windowLen before s but the newest of them: the base
// the counts are taken from.
func (w *window) add(s snapshot) snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.snaps); n == 0 || s.at.Sub(w.snaps[n-1].at) >= sampleEvery {
		w.snaps = append(w.snaps, s)
	}
	for len(w.snaps) > 1 && s.at.Sub(w.snaps[1].at) >= windowLen {
		w.snaps = w.snaps[1:]
	}
	return w.snaps[0]
}

// Run reads the counters once a minute until ctx ends, so that the
// overview's window holds what happened between two page views.
func (c *Console) Run(ctx context.Context) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if s, _, err := c.read(); err == nil {
				c.window.add(s)
			}
		}
	}
}

// gauges are what the overview reads of a route's gauges; nil: no sample.
type gauges struct {
	paused, depth *float64
	reason        string
}

// read gathers the metrics once: the counters per route, and the gauges.
func (c *Console) read() (snapshot, map[string]gauges, error) {
	s := snapshot{at: c.cfg.Now(), routes: map[string]counts{}}
	g := map[string]gauges{}
	if c.cfg.Gatherer == nil {
		return s, g, nil
	}
	fams, err := c.cfg.Gatherer.Gather()
	for _, fam := range fams {
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			route, ok := labels["route"]
			if !ok {
				continue
			}
			read(s.routes, g, fam.GetName(), route, labels, m)
		}
	}
	return s, g, err
}

func read(cs map[string]counts, g map[string]gauges, name, route string, labels map[string]string, m *dto.Metric) {
	rc, rg := cs[route], g[route]
	switch v := m.GetCounter().GetValue(); name {
	case requestsMetric:
		rc.Requests += v
	case deliveriesMetric:
		switch labels["result"] {
		case "succeeded":
			rc.Delivered += v
		case "retry", "dead-lettered":
			rc.Failed += v
		}
	case pausedMetric:
		v := m.GetGauge().GetValue()
		rg.paused, rg.reason = &v, labels["reason"]
	case depthMetric:
		v := m.GetGauge().GetValue()
		rg.depth = &v
	}
	cs[route], g[route] = rc, rg
}

// routeRow is one route on the overview.
type routeRow struct {
	Route
	// Recent are the counts over the window (since Window's start).
	Recent counts
	// Depth, Oldest and Dead are the route's queued events, the oldest's
	// age and its dead letters: "—" when not known.
	Depth, Oldest, Dead string
	// Paused is "yes", "no" or "—" (not reported); Why says why.
	Paused, Why string
}

type overviewData struct {
	Routes []routeRow
	// Window is how far back the recent counts go.
	Window string
	// Queue is nil when there is no queue or its stats are not read.
	Queue    *dedup.QueueStats
	Oldest   string
	QueueErr string
	// MetricsErr is set when the counts could not be read.
	MetricsErr string
	// StoreErr is set when a route's queue could not be read.
	StoreErr string
	Async    bool
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	d := overviewData{Async: c.cfg.Queue != nil}
	now, g, err := c.read()
	if err != nil {
		d.MetricsErr = err.Error()
	}
	base := c.window.add(now)
	d.Window = ago(now.at.Sub(base.at))
	for _, rt := range c.cfg.Routes {
		row := routeRow{Route: rt, Depth: "—", Oldest: "—", Dead: "—", Paused: "—"}
		cur, was := now.routes[rt.Path], base.routes[rt.Path]
		row.Recent = counts{Requests: cur.Requests - was.Requests, Delivered: cur.Delivered - was.Delivered, Failed: cur.Failed - was.Failed}
		if p := g[rt.Path].paused; p != nil {
			row.Paused, row.Why = "no", ""
			if *p != 0 {
				row.Paused, row.Why = "yes", g[rt.Path].reason
				if row.Why == "" {
					row.Why = "breaker open, the app's 429/503 Retry-After, or waiting its rate= turn (see the log)"
				}
			}
		}
		if rt.Async && c.cfg.Queue != nil {
			if err := c.routeQueue(r.Context(), &row, now.at); err != nil {
				d.StoreErr = err.Error()
			}
			if dp := g[rt.Path].depth; dp != nil {
				row.Depth = strconv.FormatFloat(*dp, 'f', -1, 64)
			}
		}
		d.Routes = append(d.Routes, row)
	}
	if c.cfg.Stats != nil {
		st, err := c.cfg.Stats.Stats(r.Context())
		if err != nil {
			d.QueueErr = err.Error()
		} else {
			d.Queue, d.Oldest = &st, ago(st.OldestAge)
		}
	}
	c.render(w, r, http.StatusOK, "overview", page{Title: "Overview", Nav: "overview", Data: &d})
}

// routeQueue counts row's queued events and dead letters from the
// store's listing, by the route's namespaces (up to countBound each), and
// the oldest queued event's age (the listing is oldest first).
func (c *Console) routeQueue(ctx context.Context, row *routeRow, now time.Time) error {
	var depth, dead int
	var more bool
	var oldest time.Time
	for _, ns := range row.Namespaces {
		prefix := dedup.EventKey(c.cfg.KeyPrefix, ns, "")
		q, err := c.cfg.Queue.Events(ctx, dedup.EventQuery{State: dedup.Queued, KeyPrefix: prefix, Limit: countBound})
		if err != nil {
			return err
		}
		depth, more = depth+len(q.Events), more || q.Next != ""
		if len(q.Events) > 0 {
			if at := q.Events[0].AcceptedAt; oldest.IsZero() || at.Before(oldest) {
				oldest = at
			}
		}
		f, err := c.cfg.Queue.Events(ctx, dedup.EventQuery{State: dedup.Failed, KeyPrefix: prefix, Limit: countBound})
		if err != nil {
			return err
		}
		dead, more = dead+len(f.Events), more || f.Next != ""
	}
	plus := func(n int) string {
		if more {
			return strconv.Itoa(n) + "+"
		}
		return strconv.Itoa(n)
	}
	row.Depth, row.Dead, row.Oldest = plus(depth), plus(dead), "none waiting"
	if !oldest.IsZero() {
		row.Oldest = ago(now.Sub(oldest))
	}
	return nil
}
