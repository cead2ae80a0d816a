package config

import (
	"reflect"
	"testing"
)

func TestUnknownVariables(t *testing.T) {
	environ := map[string]string{
		"ROUTE":                     "/=stripe",       // ROUTES
		"REDIS_ULR":                 "redis://r:6379", // REDIS_URL
		"REDIS_TIMEOUTS":            "1s",             // REDIS_TIMEOUT
		"REDIS_FLAVOUR":             "x",              // our prefix, nothing close
		"ACME_WEBHOOK_SECRET":       "s",              // no such preset
		"UPSTREAM_URL":              "http://a:1",     // known
		"STRIPE_WEBHOOK_SECRET":     "whsec_x",        // known
		"HOME":                      "/root",          // not ours
		"KUBERNETES_SERVICE_HOST":   "10.0.0.1",       // not ours
		"REDIS_SERVICE_HOST":        "10.0.0.2",       // a Service named redis
		"REDIS_PORT":                "tcp://10.0.0.2:6379",
		"REDIS_PORT_6379_TCP_ADDR":  "10.0.0.2",
		"REDIS_SERVICE_PORT_CLIENT": "6379",
	}
	got := UnknownVariables(environ)
	want := []Unknown{
		{Name: "ACME_WEBHOOK_SECRET", Suggestion: ""},
		{Name: "REDIS_FLAVOUR", Suggestion: ""},
		{Name: "REDIS_TIMEOUTS", Suggestion: "REDIS_TIMEOUT"},
		{Name: "REDIS_ULR", Suggestion: "REDIS_URL"},
		{Name: "ROUTE", Suggestion: "ROUTES"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("UnknownVariables = %+v\nwant %+v", got, want)
	}
}
