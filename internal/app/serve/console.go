package serve

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/admin/console"
	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/delivery"
	"github.com/webhook-dedup/webhook-dedup/policy"
	"github.com/webhook-dedup/webhook-dedup/proxy"
)

// operatorConsole is the console the admin port serves at /ui/: the
// store's records, the queue (nil: no async delivery) and its stats as
// the backlog last read them, and the routes as configured.
func operatorConsole(cfg *config.Config, routes []proxy.Route, st dedup.Store, queue dedup.Queue, backlog *delivery.Backlog, reg prometheus.Gatherer, log *zap.Logger) *console.Console {
	c := console.Config{Token: cfg.AdminToken, Records: st, Gatherer: reg, KeyPrefix: cfg.KeyPrefix, Logger: log}
	if queue != nil {
		c.Queue = queue
	}
	if backlog != nil {
		c.Stats = backlog
	}
	for _, r := range routes {
		ns := r.Source.PresetNames()
		if len(ns) == 0 {
			// A generic source keeps its IDs under the route's path.
			ns = []string{r.Path}
		}
		c.Routes = append(c.Routes, console.Route{Path: r.Path, Async: r.Delivery == policy.AsyncDelivery, Namespaces: ns})
	}
	return console.New(c)
}
