package console_test

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/admin/console"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// cell reads the overview's cell of class class in route's row.
func cell(t *testing.T, body, route, class string) string {
	t.Helper()
	row := regexp.MustCompile(`(?s)<tr data-route="` + regexp.QuoteMeta(route) + `">(.*?)</tr>`).FindStringSubmatch(body)
	if row == nil {
		t.Fatalf("no row for %s", route)
	}
	m := regexp.MustCompile(`<td class="` + class + `">([^<]*)</td>`).FindStringSubmatch(row[1])
	if m == nil {
		t.Fatalf("no %s cell in %s's row", class, route)
	}
	return m[1]
}

// TestOverviewPerRoute: the overview shows, per route, the deliveries and
// failed attempts of the last minutes (not since start), the queued
// events, the oldest one's age and the dead letters from the store, and
// whether the route is paused as webhook_dedup_route_paused says ("—"
// when not reported).
func TestOverviewPerRoute(t *testing.T) {
	reg := prometheus.NewRegistry()
	deliveries := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "webhook_dedup_deliveries_total"}, []string{"route", "result"})
	reg.MustRegister(deliveries)
	deliveries.WithLabelValues("/hooks/github", "succeeded").Add(100) // before the console: never shown
	f := newFixture(t, token, func(c *console.Config) { c.Gatherer = reg })
	start := f.now
	bearer := map[string]string{"Authorization": "Bearer " + token}
	overview := func(at time.Duration) string {
		t.Helper()
		f.now = start.Add(at)
		r := f.do(t, http.MethodGet, "/ui/", nil, bearer)
		if r.status != http.StatusOK {
			t.Fatalf("overview: %d", r.status)
		}
		return r.body
	}

	deliveries.WithLabelValues("/hooks/github", "succeeded").Add(5)
	deliveries.WithLabelValues("/hooks/github", "retry").Add(2)
	deliveries.WithLabelValues("/hooks/github", "dead-lettered").Add(1)
	body := overview(time.Minute)
	if d, fl := cell(t, body, "/hooks/github", "delivered"), cell(t, body, "/hooks/github", "failed"); d != "5" || fl != "3" {
		t.Errorf("after a minute: delivered %s, failed %s; want 5 and 3", d, fl)
	}
	deliveries.WithLabelValues("/hooks/github", "succeeded").Add(2)
	body = overview(20 * time.Minute)
	if d, fl := cell(t, body, "/hooks/github", "delivered"), cell(t, body, "/hooks/github", "failed"); d != "2" || fl != "0" {
		t.Errorf("20 minutes on: delivered %s, failed %s; want 2 and 0 (the last minutes', not since start)", d, fl)
	}

	// The queue per route, from the store.
	storetest.DeadLetter(t, f.st, prefix+"/hooks/acme:d1")
	storetest.MustEnqueue(t, f.st, prefix+"github:q1")
	storetest.MustEnqueue(t, f.st, prefix+"github:q2")
	body = overview(20 * time.Minute)
	for _, c := range []struct{ route, class, want string }{
		{"/hooks/github", "depth", "2"}, {"/hooks/github", "dead", "0"},
		{"/hooks/acme", "depth", "0"}, {"/hooks/acme", "dead", "1"}, {"/hooks/acme", "oldest", "none waiting"},
		{"/hooks/github", "paused", "—"},
	} {
		if got := cell(t, body, c.route, c.class); got != c.want {
			t.Errorf("%s %s = %q, want %q", c.route, c.class, got, c.want)
		}
	}

	// Paused, as the delivery's gauge says; the depth too, once a gauge
	// reports it per route.
	paused := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "webhook_dedup_route_paused"}, []string{"route"})
	depth := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "webhook_dedup_queue_depth"}, []string{"route"})
	reg.MustRegister(paused, depth)
	depth.WithLabelValues("/hooks/github").Set(7)
	paused.WithLabelValues("/hooks/github").Set(1)
	paused.WithLabelValues("/hooks/acme").Set(0)
	body = overview(21 * time.Minute)
	if got := cell(t, body, "/hooks/github", "paused"); got != "yes: breaker open, the app&#39;s 429/503 Retry-After, or waiting its rate= turn (see the log)" {
		t.Errorf("github paused = %q", got)
	}
	if got := cell(t, body, "/hooks/github", "depth"); got != "7" {
		t.Errorf("github depth = %q, want the gauge's 7", got)
	}
	if got := cell(t, body, "/hooks/acme", "paused"); got != "no" {
		t.Errorf("acme paused = %q, want no", got)
	}
}
