package test

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

const dashboardPath = "../deploy/grafana/webhook-dedup.json"

// grafanaDashboard is the part of Grafana's dashboard JSON the test reads.
type grafanaDashboard struct {
	UID        string         `json:"uid"`
	Title      string         `json:"title"`
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	ID      int            `json:"id"`
	Type    string         `json:"type"`
	Title   string         `json:"title"`
	Panels  []grafanaPanel `json:"panels"` // a collapsed row's
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
}

// promQuery is one PromQL expression of the dashboard and where it is.
type promQuery struct{ where, expr string }

// dashboardQueries reads the dashboard and returns every PromQL expression
// in it: the panels' targets and the template variables' label_values.
func dashboardQueries(t *testing.T) []promQuery {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s is not valid JSON: %v", dashboardPath, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("%s has no uid or title", dashboardPath)
	}
	var qs []promQuery
	ids := map[int]string{}
	var walk func(ps []grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if other, dup := ids[p.ID]; dup || p.ID == 0 {
				t.Errorf("panel %q has id %d, also %q's (or zero)", p.Title, p.ID, other)
			}
			ids[p.ID] = p.Title
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q does not use the $datasource variable", p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" {
					t.Errorf("panel %q has a target without expr or refId", p.Title)
				}
				qs = append(qs, promQuery{"panel " + p.Title + " " + tg.RefID, tg.Expr})
			}
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_]\w*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Errorf("variable %s: query %s: %v", v.Name, v.Query, err)
			continue
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, q.Query)
			continue
		}
		qs = append(qs, promQuery{"variable " + v.Name, m[1]})
	}
	return qs
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promNumber   = regexp.MustCompile(`\b[0-9][0-9a-zA-Z_.]*`) // 0.99, 1e3, 5m (no identifier starts with a digit)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	// promKeywords are identifiers in PromQL that name no metric.
	promKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
		"group_right": true, "bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true}
)

// metricNames returns the metric names a PromQL expression reads: what is
// left once strings, label matchers, ranges, groupings, numbers, function
// calls and keywords are taken out.
func metricNames(expr string) []string {
	s := promString.ReplaceAllString(expr, `""`)
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRange.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	s = promNumber.ReplaceAllString(s, " ")
	var names []string
	for _, m := range promIdent.FindAllStringSubmatch(s, -1) {
		name := strings.TrimRight(strings.TrimSuffix(strings.TrimSpace(m[0]), "("), " ")
		if m[1] != "" || promKeywords[strings.ToLower(name)] {
			continue // a function, or a keyword
		}
		names = append(names, name)
	}
	return names
}

// exported reports whether the scrape has the series name reads: a family
// of that name, or a histogram's _bucket, _sum or _count (a summary's _sum
// or _count).
func exported(fams map[string]*dto.MetricFamily, name string) bool {
	if _, ok := fams[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if fam, ok := fams[base]; ok {
			switch fam.GetType() {
			case dto.MetricType_HISTOGRAM:
				return true
			case dto.MetricType_SUMMARY:
				return suffix != "_bucket"
			}
		}
	}
	return false
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string]string{
		`sum by (le, op) (rate(webhook_dedup_store_duration_seconds_bucket{job=~"$job", op="claim"}[$__rate_interval]))`: "webhook_dedup_store_duration_seconds_bucket",
		`histogram_quantile(0.99, sum without (instance) (rate(a_bucket[5m]))) / on (job) group_left b`:                  "a_bucket b",
		`sum(rate(x_total{outcome=~"duplicate|in-flight"}[1m] offset 5m)) > bool 0 and y or z unless w`:                  "x_total y z w",
		`process_resident_memory_bytes{job=~"$job"}`:                                                                     "process_resident_memory_bytes",
		`label_replace(up, "a", "$1", "b", "(.*)")`:                                                                      "up",
	} {
		if got := strings.Join(metricNames(expr), " "); got != want {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// TestDashboardQueriesNameExportedMetrics: every query of the Grafana
// dashboard in deploy/ reads metrics a running webhook-dedup exports (after
// traffic of every kind, so that labelled families have series), and every
// webhook_dedup_ metric the binary exports is on the dashboard.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	t.Parallel()
	queries := dashboardQueries(t)

	srv := redistest.New(t)
	app := newUpstream(t)
	px := startProxy(t, proxyEnv(app, map[string]string{"REDIS_URL": srv.URL()}))
	ctx, client := testContext(t), newClient(t)
	ev := stripe.Event(1)
	expect(t, "first delivery", mustSend(t, ctx, client, px, stripe, ev), 200, "forwarded")
	changed := ev
	changed.Body = []byte(strings.Replace(string(ev.Body), `"invoice.paid"`, `"invoice.updated"`, 1))
	expect(t, "same ID, other body", settledSend(t, ctx, client, px, stripe, changed), 200, "duplicate")
	px.awaitMetric(t, "webhook_dedup_payload_mismatch_total", nil, 1)
	srv.Stop()
	expect(t, "delivery with Redis down", mustSend(t, ctx, client, px, acme, acme.Event(1)), 503, "store-unavailable")
	px.awaitMetric(t, "webhook_dedup_store_errors_total", nil, 1)
	fams := px.metrics(t)

	// The async delivery metrics, from a proxy delivering in the
	// background: one event that succeeds after a failed attempt.
	asyncApp := newUpstream(t)
	asyncApp.FailWhen(func(_ string, attempt int) bool { return attempt == 1 })
	apx := startProxy(t, asyncEnv(asyncApp.URL, map[string]string{"DATA_DIR": t.TempDir()}))
	expect(t, "async delivery", mustSend(t, ctx, client, apx, stripe, stripe.Event(2)), 202, "queued")
	apx.awaitMetric(t, "webhook_dedup_deliveries_total", map[string]string{"result": "succeeded"}, 1)
	for name, fam := range apx.metrics(t) {
		if _, ok := fams[name]; !ok {
			fams[name] = fam
		}
	}

	onDashboard := map[string]bool{}
	for _, q := range queries {
		names := metricNames(q.expr)
		if len(names) == 0 {
			t.Errorf("%s: %q reads no metric", q.where, q.expr)
		}
		for _, name := range names {
			onDashboard[name] = true
			if !exported(fams, name) {
				t.Errorf("%s reads %s, which webhook-dedup does not export: %q", q.where, name, q.expr)
			}
		}
	}
	var missing []string
	for name, fam := range fams {
		if !strings.HasPrefix(name, "webhook_dedup_") {
			continue
		}
		shown := onDashboard[name]
		if fam.GetType() == dto.MetricType_HISTOGRAM {
			shown = shown || onDashboard[name+"_bucket"] || onDashboard[name+"_sum"] || onDashboard[name+"_count"]
		}
		if !shown {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("exported but on no panel of the dashboard: %s", strings.Join(missing, ", "))
	}
	t.Logf("%d dashboard queries over %d metric names, checked against %d exported families", len(queries), len(onDashboard), len(fams))
}
