package stores

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

func load(t *testing.T, env map[string]string) (*config.Config, error) {
	t.Helper()
	// A Stripe secret, so that async routes (auto, stripe) verify what
	// they queue, as configuration requires.
	base := map[string]string{"UPSTREAM_URL": "http://127.0.0.1:3000", "STRIPE_WEBHOOK_SECRET": "whsec_x"}
	for k, v := range env {
		base[k] = v
	}
	return Load(base)
}

// TestCheckAsyncStore: async delivery is refused, naming DELIVERY, the
// routes and the stores that could, on each store whose package does not
// declare a queue, and accepted on each that does.
func TestCheckAsyncStore(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // empty: accepted
	}{
		{"Redis", map[string]string{"REDIS_URL": "redis://r:6379", "DELIVERY": "async"}, ""},
		{"disk", map[string]string{"DATA_DIR": t.TempDir(), "DELIVERY": "async"}, ""},
		{"PostgreSQL", map[string]string{"DATABASE_URL": "postgres://h/db", "DELIVERY": "async"}, ""},
		{"DynamoDB", map[string]string{"DYNAMODB_TABLE": "t-1", "DELIVERY": "async"},
			"DELIVERY: async delivery needs a store that keeps its queue: REDIS_URL (or REDIS_CLUSTER_ADDRS, REDIS_SENTINEL_ADDRS), DATA_DIR or DATABASE_URL; DYNAMODB_TABLE supports sync delivery only (async routes: /)"},
		{"memory", map[string]string{"DELIVERY": "async"}, "the embedded in-memory store (no store configured) supports sync delivery only"},
		{"one route on DynamoDB", map[string]string{"DYNAMODB_TABLE": "t-1", "ROUTES": "/a=stripe;async,/b=github"}, "DYNAMODB_TABLE supports sync delivery only (async routes: /a)"},
		{"sync on DynamoDB", map[string]string{"DYNAMODB_TABLE": "t-1"}, ""},
		{"every route sync under DELIVERY=async, in memory", map[string]string{"DELIVERY": "async", "ROUTES": "/a=github;sync"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.env)
			var cerr *config.Error
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Load = %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Load = %v, want an error containing %q", err, tc.want)
			case tc.want != "" && !errors.As(err, &cerr):
				t.Errorf("Load = %T, want a *config.Error (exit status 2)", err)
			}
		})
	}
}

// TestCheckBesideOtherProblems: the store check runs beside every other
// check, not once they pass: its line comes in the same error as the
// others, one line each; and where what it reads did not parse it names
// only what is known (DELIVERY unparsed: the routes that name their own
// mode; a route that did not parse: none), saying nothing false.
func TestCheckBesideOtherProblems(t *testing.T) {
	const needs = "async delivery needs a store that keeps its queue: REDIS_URL (or REDIS_CLUSTER_ADDRS, REDIS_SENTINEL_ADDRS), DATA_DIR or DATABASE_URL; "
	const memory = "the embedded in-memory store (no store configured)"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string // every line of the error, in order
	}{
		{"DELIVERY=async on DynamoDB, a bad duration, a bad entry", map[string]string{
			"DELIVERY": "async", "DYNAMODB_TABLE": "t-1", "UPSTREAM_TIMEOUT": "soon", "ROUTES": "x=github,/a=header:X-Id",
		}, []string{
			`UPSTREAM_TIMEOUT: unable to parse duration: time: invalid duration "soon"`,
			`ROUTES: "x=github": path "x" must start with /`,
			"DELIVERY: " + needs + "DYNAMODB_TABLE supports sync delivery only (async routes: /a)",
		}},
		{"a route's ;async in memory beside bad entries", map[string]string{
			"ROUTES": "/a=header:X-Id;async,/b=stripe;later,/a=github", "LOG_LEVEL": "loud",
		}, []string{
			`LOG_LEVEL: must be debug, info, warn or error, got "loud"`,
			`ROUTES: "/b=stripe;later": the delivery mode after ';' must be sync or async, got "later"`,
			`ROUTES: "/a=github": path "/a" appears twice`,
			"ROUTES: " + needs + memory + " supports sync delivery only (async routes: /a)",
		}},
		{"two stores, the first without a queue", map[string]string{
			"DELIVERY": "async", "DYNAMODB_TABLE": "t-1", "DATA_DIR": t.TempDir(),
		}, []string{
			"DATA_DIR: set together with DYNAMODB_TABLE: configure exactly one store",
			"DELIVERY: " + needs + "DYNAMODB_TABLE supports sync delivery only (async routes: /)",
		}},
		{"DELIVERY unparsed: only the routes that name their mode", map[string]string{
			"DELIVERY": "asynk", "ROUTES": "/a=header:X-Id;async,/b=header:X-Id",
		}, []string{
			`DELIVERY: must be sync or async, got "asynk"`,
			"ROUTES: " + needs + memory + " supports sync delivery only (async routes: /a)",
		}},
		{"DELIVERY unparsed, no route names its mode: nothing known to check", map[string]string{
			"DELIVERY": "asynk",
		}, []string{`DELIVERY: must be sync or async, got "asynk"`}},
		{"the only async route did not parse", map[string]string{
			"ROUTES": "/a=header:X-Id;asink",
		}, []string{`ROUTES: "/a=header:X-Id;asink": the delivery mode after ';' must be sync or async, got "asink"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.env)
			if err == nil {
				t.Fatal("Load accepted it")
			}
			if got, want := err.Error(), strings.Join(tc.want, "\n"); got != want {
				t.Errorf("Load's error:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestOpenDeclares: each store opens as a Backend that declares its
// package's features, and the cache in front (CACHE_SIZE) keeps the queue
// and the wake-ups of the store behind it. Nothing is reached: the stores
// connect lazily.
func TestOpenDeclares(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"memory", nil},
		{"disk", map[string]string{"DATA_DIR": t.TempDir()}},
		{"Redis", map[string]string{"REDIS_URL": "redis://" + redistest.FreeAddr(t)}},
		{"PostgreSQL", map[string]string{"DATABASE_URL": "postgres://" + redistest.FreeAddr(t) + "/x", "DATABASE_AUTO_MIGRATE": "false"}},
	} {
		for _, cache := range []string{"0", "10"} {
			t.Run(tc.name+"/CACHE_SIZE="+cache, func(t *testing.T) {
				env := map[string]string{"CACHE_SIZE": cache}
				for k, v := range tc.env {
					env[k] = v
				}
				cfg, err := load(t, env)
				if err != nil {
					t.Fatal(err)
				}
				b, err := Open(context.Background(), cfg, Env{Log: zap.NewNop(), Registerer: prometheus.NewRegistry()})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = b.Close() })
				if want := Features(cfg.Store.Kind); b.Features != want {
					t.Errorf("Backend.Features = %+v, want %+v, as the package declares", b.Features, want)
				}
				if (b.Queue != nil) != b.Features.Queue || (b.Wake != nil) != b.Features.Wake {
					t.Errorf("Backend has a queue: %v, a wake-up: %v; its features say %+v", b.Queue != nil, b.Wake != nil, b.Features)
				}
			})
		}
	}
}
