package config

import (
	"fmt"
	"strings"
	"testing"
)

// TestEveryProblemOneLineEach: an environment with several mistakes is
// refused in one Load, every mistake on a line of its own, and nothing
// else: not ROUTES stopping at its first bad entry, not a rule waiting
// for the rest to pass, and not a check run on the zero value of a
// variable that did not parse. Each case is one shape of the class.
func TestEveryProblemOneLineEach(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		rules []Rule
		want  []string // the start of each line, in any order
	}{
		{"every bad ROUTES entry, and the sources of the good ones", map[string]string{
			"ROUTES": "/a=github,hooks=stripe,/b=stripe;later,/c,/a/=github,/d//e=github,/f=nosuchpreset,/g=stripe /h=github,/i?x=github,/j=header:",
		}, nil, []string{
			`ROUTES: "hooks=stripe": path "hooks" must start with /`,
			`ROUTES: "/b=stripe;later": the delivery mode after ';' must be sync or async, got "later"`,
			`ROUTES: "/c" is not PATH=SOURCE`,
			`ROUTES: "/a/=github": path "/a" appears twice`,
			`ROUTES: "/d//e=github": path "/d//e" has an empty segment`,
			"ROUTES: /f=nosuchpreset: ",
			`ROUTES: routes are separated by commas, not spaces: "/g=stripe /h=github"`,
			`ROUTES: "/i?x=github": path "/i?x" may not contain`,
			"ROUTES: /j=header:: ",
		}},
		{"ROUTES beside other variables and two stores", map[string]string{
			"UPSTREAM_TIMEOUT": "soon", "LOG_FORMAT": "xml", "INFLIGHT_STATUS": "200",
			"REDIS_URL": "redis://127.0.0.1:6379", "DATABASE_URL": "postgres://db/x",
			"ROUTES": "/a=nosuchpreset,/b=stripe;sometimes",
		}, nil, []string{
			"UPSTREAM_TIMEOUT: ",
			"LOG_FORMAT: ",
			"INFLIGHT_STATUS: ",
			"DATABASE_URL: set together with REDIS_URL",
			"ROUTES: /a=nosuchpreset: ",
			`ROUTES: "/b=stripe;sometimes": the delivery mode`,
		}},
		{"an async route's missing secret behind a bad entry", map[string]string{
			"REDIS_URL": "redis://127.0.0.1:6379", "ROUTES": "x=github,/s=stripe;async",
		}, nil, []string{
			`ROUTES: "x=github": path "x" must start with /`,
			"STRIPE_WEBHOOK_SECRET: required for the async route /s",
		}},
		{"what depends on a value that did not parse is not checked against its zero", map[string]string{
			// Each of these would be refused against the zero value of
			// the variable before it, which did not parse.
			"UPSTREAM_TIMEOUT": "soon", "LEASE_TTL": "1s", "STORE_TIMEOUT": "1h", "REDIS_TIMEOUT": "1h",
			"MAX_BODY_BYTES": "lots", "MAX_BUFFERED_BYTES": "100",
			"RETRY_INITIAL_INTERVAL": "often", "RETRY_MAX_INTERVAL": "1ms",
			"DELIVERY": "asynk", "ROUTES": "/a=github;asynk",
		}, nil, []string{
			"UPSTREAM_TIMEOUT: ",
			"MAX_BODY_BYTES: ",
			"RETRY_INITIAL_INTERVAL: ",
			"DELIVERY: ",
			`ROUTES: "/a=github;asynk": the delivery mode`,
		}},
		{"a rule runs beside the rest, on the entries that parsed", map[string]string{
			"UPSTREAM_TIMEOUT": "soon", "ROUTES": "x=github,/ok=github",
		}, []Rule{func(c *Config, bad func(variable, format string, args ...any)) {
			var paths []string
			for _, r := range c.RouteSpecs {
				paths = append(paths, r.Path)
			}
			bad("DELIVERY", "the rule saw %v", paths)
			bad("UPSTREAM_TIMEOUT", "about a variable that did not parse: dropped")
		}}, []string{
			"UPSTREAM_TIMEOUT: unable to parse",
			`ROUTES: "x=github": path "x" must start with /`,
			"DELIVERY: the rule saw [/ok]",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := base()
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := Load(env, tc.rules...)
			if err == nil {
				t.Fatal("Load accepted it")
			}
			if missing, extra := matchLines(strings.Split(err.Error(), "\n"), tc.want); len(missing)+len(extra) > 0 {
				t.Errorf("missing %q\nnot expected %q\nin:\n%s", missing, extra, err)
			}
		})
	}
}

// matchLines pairs each of want with the one line it starts: missing are
// those of want that start no line or several, extra the lines none of
// want starts.
func matchLines(lines, want []string) (missing, extra []string) {
	matched := make([]bool, len(lines))
	for _, w := range want {
		n := 0
		for i, l := range lines {
			if strings.HasPrefix(l, w) {
				n++
				matched[i] = true
			}
		}
		if n != 1 {
			missing = append(missing, fmt.Sprintf("%s (%d lines)", w, n))
		}
	}
	for i, l := range lines {
		if !matched[i] {
			extra = append(extra, l)
		}
	}
	return missing, extra
}
