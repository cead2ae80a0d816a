package console

import (
	"net/http"

	dto "github.com/prometheus/client_model/go"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// The metrics the overview reads, and their labels.
const (
	requestsMetric   = "webhook_dedup_requests_total"
	deliveriesMetric = "webhook_dedup_deliveries_total"
)

// routeRow is one route on the overview. The counts are the process's,
// since it started.
type routeRow struct {
	Route
	Requests     float64
	Delivered    float64
	Retried      float64
	DeadLettered float64
}

type overviewData struct {
	Routes []routeRow
	// Queue is nil when there is no queue or its stats are not read.
	Queue    *dedup.QueueStats
	Oldest   string
	QueueErr string
	// MetricsErr is set when the counts could not be read.
	MetricsErr string
	Async      bool
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	d := overviewData{Async: c.cfg.Queue != nil}
	rows := map[string]*routeRow{}
	for _, rt := range c.cfg.Routes {
		d.Routes = append(d.Routes, routeRow{Route: rt})
	}
	for i := range d.Routes {
		rows[d.Routes[i].Path] = &d.Routes[i]
	}
	if c.cfg.Gatherer != nil {
		fams, err := c.cfg.Gatherer.Gather()
		if err != nil {
			d.MetricsErr = err.Error()
		}
		for _, fam := range fams {
			for _, m := range fam.GetMetric() {
				count(rows, fam.GetName(), m)
			}
		}
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

// count adds one series of the request or delivery counters to its
// route's row.
func count(rows map[string]*routeRow, name string, m *dto.Metric) {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	row := rows[labels["route"]]
	if row == nil {
		return
	}
	v := m.GetCounter().GetValue()
	switch name {
	case requestsMetric:
		row.Requests += v
	case deliveriesMetric:
		switch labels["result"] {
		case "succeeded":
			row.Delivered += v
		case "retry":
			row.Retried += v
		case "dead-lettered":
			row.DeadLettered += v
		}
	}
}
