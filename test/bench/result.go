package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// result is one configuration's measurements in one repeat.
type result struct {
	Config string    `json:"config"`
	Repeat int       `json:"repeat"`
	Load   wrkResult `json:"load"`   // the -c32 run
	Single wrkResult `json:"single"` // the -c1 run
	// CPU used during the -c32 run, by the server wrk talks to (and its
	// children), by the store's server (redis-server; PostgreSQL's
	// postmaster and every backend), and by the upstream behind a proxy.
	ServerCPU   time.Duration `json:"server_cpu_ns"`
	StoreCPU    time.Duration `json:"store_cpu_ns"`
	UpstreamCPU time.Duration `json:"upstream_cpu_ns"`
	// PeakRSS is the server's VmHWM at the end (its whole life: warm-up
	// and both measurements).
	PeakRSS int64 `json:"peak_rss"`
	// Outcomes counts webhook-dedup's X-Webhook-Dedup outcomes over the
	// server's life, from /metrics: a check that the load did what it says.
	Outcomes map[string]int64 `json:"outcomes,omitempty"`
	// Settled is how long the disk took to quieten before the run
	// (waitQuietDisk).
	Settled time.Duration `json:"settled_ns,omitempty"`
	// Drained is how long a queueing run's backlog took to be delivered
	// after the 32-connection run, before the one-connection run.
	Drained time.Duration `json:"drained_ns,omitempty"`
	// Delivered is how many requests the app received during the
	// 32-connection run: on a queueing row, the deliveries made while
	// the intake went on.
	Delivered int64 `json:"delivered,omitempty"`
	// Paced is the run at half the accept rate, on a queueing row.
	Paced *paceResult `json:"paced,omitempty"`
	// On the rows that send each event 3×, once the backlog is
	// delivered: how many events the 32-connection run certainly sent 3×
	// (those of its whole blocks of 3 × copySpread requests), how many of
	// them the app received, and its requests for them.
	Thrice        int64 `json:"thrice,omitempty"`
	ThriceReached int64 `json:"thrice_reached,omitempty"`
	ThriceCopies  int64 `json:"thrice_copies,omitempty"`
	// Backlog is the delivery of the backlog the 32-connection run
	// queued behind the held app, on the ordered-delivery rows.
	Backlog *backlogResult `json:"backlog,omitempty"`
	// Peer is the version of Hookaido, on its rows.
	Peer string `json:"peer,omitempty"`
}

// backlogResult is the delivery of a backlog queued behind a held app,
// from the app's release to its last delivery.
type backlogResult struct {
	Events  int64         `json:"events"` // the app's requests meanwhile
	Drained time.Duration `json:"drained_ns"`
}

// rate is the backlog's deliveries per second.
func (b backlogResult) rate() float64 {
	if b.Drained <= 0 {
		return 0
	}
	return float64(b.Events) / b.Drained.Seconds()
}

// copies is the app's requests per event sent 3× that it received.
func (r result) copies() float64 {
	if r.ThriceReached == 0 {
		return 0
	}
	return float64(r.ThriceCopies) / float64(r.ThriceReached)
}

// deliveredRate is the app's requests per second during the 32-connection run.
func (r result) deliveredRate() float64 {
	if r.Load.DurationUS == 0 {
		return 0
	}
	return float64(r.Delivered) / (float64(r.Load.DurationUS) / 1e6)
}

// UnmarshalJSON also reads the -raw files of older runs, which named the
// store's CPU redis_cpu_ns (Redis was the only store server then).
func (r *result) UnmarshalJSON(b []byte) error {
	type plain result // without this method
	var v struct {
		plain
		RedisCPU time.Duration `json:"redis_cpu_ns"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = result(v.plain)
	if r.StoreCPU == 0 {
		r.StoreCPU = v.RedisCPU
	}
	return nil
}

func (r result) note() string {
	var parts []string
	if n := r.Load.errors() + r.Single.errors(); n > 0 {
		parts = append(parts, fmt.Sprintf("%d errors", n))
	}
	for _, k := range sortedKeys(r.Outcomes) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, r.Outcomes[k]))
	}
	if r.Drained > 0 {
		parts = append(parts, fmt.Sprintf("%.0f delivered/s during intake, drained in %s", r.deliveredRate(), seconds(r.Drained)))
	}
	if p := r.Paced; p != nil {
		parts = append(parts, fmt.Sprintf("paced at %.0f/s: %.0f accepted/s, %.0f delivered/s, drained in %s", p.Rate, p.acceptedRate(), p.deliveredRate(), seconds(p.Drained)))
	}
	if b := r.Backlog; b != nil {
		parts = append(parts, fmt.Sprintf("backlog of %d delivered in %s: %.0f/s", b.Events, seconds(b.Drained), b.rate()))
	}
	if r.Thrice > 0 {
		parts = append(parts, fmt.Sprintf("%.2f copies at the app per event sent 3× (%d of %d events reached it)", r.copies(), r.ThriceReached, r.Thrice))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
