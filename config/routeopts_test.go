package config

import (
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/policy"
)

// TestRouteOptions: every shape of a route's options, accepted or refused
// with a problem naming the route and saying what is wrong.
func TestRouteOptions(t *testing.T) {
	type want struct {
		order string
		rate  Rate
		mode  policy.DeliveryMode
	}
	for _, tc := range []struct {
		name, delivery, routes string
		want                   want
		problems               []string // each a line of the error, in order; none: accepted
	}{
		{name: "both options, as in the docs", routes: "/webhooks/shop=header:X-Id;async;order=json:customer.id;rate=20/s",
			want: want{order: "json:customer.id", rate: Rate{20, time.Second}, mode: policy.AsyncDelivery}},
		{name: "per minute, spaces around", routes: "/a=header:X-Id ; async ; rate = 90/m ",
			want: want{rate: Rate{90, time.Minute}, mode: policy.AsyncDelivery}},
		{name: "composite key", routes: "/a=header:X-Id;async;order=header:X-Shop+json:customer.id",
			want: want{order: "header:X-Shop+json:customer.id", mode: policy.AsyncDelivery}},
		{name: "options without a mode under DELIVERY=async", delivery: "async", routes: "/a=header:X-Id;rate=1/s;order=header:X-Shop",
			want: want{order: "header:X-Shop", rate: Rate{1, time.Second}, mode: policy.AsyncDelivery}},
		{name: "the largest rate", routes: "/a=header:X-Id;async;rate=10000/s", want: want{rate: Rate{10000, time.Second}, mode: policy.AsyncDelivery}},
		{name: "the largest rate per minute", routes: "/a=header:X-Id;async;rate=600000/m", want: want{rate: Rate{600000, time.Minute}, mode: policy.AsyncDelivery}},

		{name: "options on a route sync by default", routes: "/a=header:X-Id;rate=1/s",
			problems: []string{"ROUTES: /a: rate=: options are for async routes"}},
		{name: "options on a route sync by ;sync", delivery: "async", routes: "/a=header:X-Id;sync;order=header:X-Shop;rate=1/s",
			problems: []string{"ROUTES: /a: order= and rate=: options are for async routes"}},
		{name: "unknown option", routes: "/a=header:X-Id;async;burst=3",
			problems: []string{`ROUTES: "/a=header:X-Id;async;burst=3": unknown option "burst="`}},
		{name: "repeated option", routes: "/a=header:X-Id;async;rate=1/s;rate=2/s",
			problems: []string{`ROUTES: "/a=header:X-Id;async;rate=1/s;rate=2/s": option rate= given twice`}},
		{name: "mode after an option", routes: "/a=header:X-Id;rate=1/s;async",
			problems: []string{`ROUTES: "/a=header:X-Id;rate=1/s;async": "async": the delivery mode is named once, right after the source`}},
		{name: "empty item", routes: "/a=header:X-Id;async;",
			problems: []string{`ROUTES: "/a=header:X-Id;async;": config: nothing after ';'`}},
		{name: "every rate mistake at once", routes: "/a=header:X-Id;async;rate=0/s,/b=header:X-Id;async;rate=-1/s,/c=header:X-Id;async;rate=5/h,/d=header:X-Id;async;rate=5," +
			"/e=header:X-Id;async;rate=1.5/s,/f=header:X-Id;async;rate=/s,/g=header:X-Id;async;rate=+5/s,/h=header:X-Id;async;rate=10001/s,/i=header:X-Id;async;rate=600001/m,/j=header:X-Id;async;rate=99999999999999999999/s",
			problems: []string{
				`ROUTES: "/a=header:X-Id;async;rate=0/s": option rate=: want N/s or N/m`,
				`ROUTES: "/b=header:X-Id;async;rate=-1/s": option rate=: want N/s or N/m`,
				`ROUTES: "/c=header:X-Id;async;rate=5/h": option rate=: want N/s or N/m`,
				`ROUTES: "/d=header:X-Id;async;rate=5": option rate=: want N/s or N/m`,
				`ROUTES: "/e=header:X-Id;async;rate=1.5/s": option rate=: want N/s or N/m`,
				`ROUTES: "/f=header:X-Id;async;rate=/s": option rate=: want N/s or N/m`,
				`ROUTES: "/g=header:X-Id;async;rate=+5/s": option rate=: want N/s or N/m`,
				`ROUTES: "/h=header:X-Id;async;rate=10001/s": option rate=: "10001/s" is more than the most allowed, 10000/s (600000/m)`,
				`ROUTES: "/i=header:X-Id;async;rate=600001/m": option rate=: "600001/m" is more than the most allowed`,
				`ROUTES: "/j=header:X-Id;async;rate=99999999999999999999/s": option rate=: want N/s or N/m`,
			}},
		{name: "every key mistake at once", routes: "/a=header:X-Id;async;order=,/b=header:X-Id;async;order=stripe,/c=header:X-Id;async;order=json:a..b,/d=header:X-Id;async;order=header:X Y,/e=header:X-Id;async;order=json:a+auto",
			problems: []string{
				`ROUTES: "/a=header:X-Id;async;order=": option order=: providers: key "": unknown source`,
				`ROUTES: "/b=header:X-Id;async;order=stripe": option order=: providers: key "stripe": unknown source`,
				`ROUTES: "/c=header:X-Id;async;order=json:a..b": option order=: providers: key "json:a..b": want a dotted path`,
				`ROUTES: "/d=header:X-Id;async;order=header:X Y": option order=: providers: key "header:X Y": want a header name`,
				`ROUTES: "/e=header:X-Id;async;order=json:a+auto": option order=: providers: key "json:a+auto": part 2 of the composite`,
			}},
		{name: "several mistakes in one entry, and a bad path beside them", routes: "/a=header:X-Id;async;rate=fast;speed=1;order=json:",
			problems: []string{
				`ROUTES: "/a=header:X-Id;async;rate=fast;speed=1;order=json:": option rate=: want N/s or N/m`,
				`ROUTES: "/a=header:X-Id;async;rate=fast;speed=1;order=json:": unknown option "speed="`,
				`ROUTES: "/a=header:X-Id;async;rate=fast;speed=1;order=json:": option order=: providers: key "json:": want a dotted path`,
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := base()
			env["ROUTES"], env["DATA_DIR"] = tc.routes, t.TempDir()
			if tc.delivery != "" {
				env["DELIVERY"] = tc.delivery
			}
			cfg, err := Load(env)
			if tc.problems == nil {
				if err != nil {
					t.Fatal(err)
				}
				got := cfg.RouteSpecs[0]
				order := ""
				if got.Order != nil {
					order = got.Order.String()
				}
				if order != tc.want.order || got.Rate != tc.want.rate || got.Delivery != tc.want.mode || strings.Contains(got.Source, ";") {
					t.Errorf("got %+v (order %q), want %+v", got, order, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.problems) {
				t.Fatalf("%d problems, want %d:\n%v", len(lines), len(tc.problems), err)
			}
			for i, want := range tc.problems {
				if !strings.HasPrefix(lines[i], want) {
					t.Errorf("problem %d:\n%s\nwant it to start with\n%s", i, lines[i], want)
				}
			}
		})
	}
}

func TestOrderOnFailure(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  OrderOnFailure
	}{{"", OrderSkip}, {"skip", OrderSkip}, {"block", OrderBlock}} {
		env := base()
		if tc.value != "" {
			env["ORDER_ON_FAILURE"] = tc.value
		}
		cfg, err := Load(env)
		if err != nil || cfg.OrderOnFailure != tc.want {
			t.Errorf("ORDER_ON_FAILURE=%q: %v, %v; want %v", tc.value, cfg, err, tc.want)
		}
	}
	env := base()
	env["ORDER_ON_FAILURE"] = "halt"
	if _, err := Load(env); err == nil || !strings.Contains(err.Error(), "ORDER_ON_FAILURE") || !strings.Contains(err.Error(), "must be skip or block") {
		t.Errorf("ORDER_ON_FAILURE=halt: %v", err)
	}
}

func TestRateInterval(t *testing.T) {
	for _, tc := range []struct {
		r    Rate
		want time.Duration
	}{{Rate{}, 0}, {Rate{20, time.Second}, 50 * time.Millisecond}, {Rate{2, time.Minute}, 30 * time.Second}} {
		if got := tc.r.Interval(); got != tc.want {
			t.Errorf("%v.Interval() = %s, want %s", tc.r, got, tc.want)
		}
	}
}
