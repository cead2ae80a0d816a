package cli

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// holdPort listens on a loopback port for the test's length, so that
// anything binding it or connecting to it can be told.
func holdPort(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// expectNoConnection fails if anything connected to ln: a connection made
// earlier waits in the backlog, and Accept returns it at once.
func expectNoConnection(t *testing.T, ln net.Listener, what string) {
	t.Helper()
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
	if c, err := ln.Accept(); err == nil {
		c.Close()
		t.Errorf("check connected to %s", what)
	} else if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("accept on %s: %v", what, err)
	}
}

func runCheck(env map[string]string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = run(context.Background(), []string{"check"}, env, &out, &errOut)
	return out.String(), errOut.String(), err
}

// TestCheckGoodConfiguration: a configuration serve would start with
// passes, on ports this test holds (check binds nothing) and with a store
// this test holds too (check does not reach it); the line says what would
// run.
func TestCheckGoodConfiguration(t *testing.T) {
	listen, adm, redis := holdPort(t), holdPort(t), holdPort(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"redis, one async route", map[string]string{
			"REDIS_URL": "redis://" + redis.Addr().String(),
			"ROUTES":    "/gh=github;async,/acme=header:X-Acme-Id", "GITHUB_WEBHOOK_SECRET": "s",
		}, "configuration OK: store redis (REDIS_URL), 2 routes (1 async)\n"},
		{"postgres", map[string]string{"DATABASE_URL": "postgres://u:p@" + redis.Addr().String() + "/db"},
			"configuration OK: store postgres (DATABASE_URL), 1 route (sync)\n"},
		{"nothing configured", map[string]string{}, "configuration OK: store memory (no store configured: one replica only), 1 route (sync)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"UPSTREAM_URL": "http://127.0.0.1:3000", "LISTEN_ADDR": listen.Addr().String(), "ADMIN_ADDR": adm.Addr().String()}
			for k, v := range tc.env {
				env[k] = v
			}
			stdout, stderr, err := runCheck(env)
			if err != nil {
				t.Fatalf("check: %v (exit %d)\n%s", err, ExitCode(err), stderr)
			}
			if stdout != tc.want {
				t.Errorf("check printed %q, want %q", stdout, tc.want)
			}
			if stderr != "" {
				t.Errorf("check warned of a configuration without a mistake: %q", stderr)
			}
		})
	}
	expectNoConnection(t, redis, "the store")
}

// TestCheckWarnings: what serve would log at warn is printed to stderr, and
// does not fail the check.
func TestCheckWarnings(t *testing.T) {
	stdout, stderr, err := runCheck(map[string]string{
		"UPSTREAM_URL": "http://127.0.0.1:3000", "UPSTREAM_TIMOUT": "10s",
		"ROUTES": "/gh=github", "STRIPE_WEBHOOK_SECRET": "whsec_x",
	})
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	if !strings.HasPrefix(stdout, "configuration OK") {
		t.Errorf("stdout %q, want the OK line", stdout)
	}
	for _, want := range []string{
		"warning: UPSTREAM_TIMOUT: unknown variable, ignored: is it misspelt? (did you mean UPSTREAM_TIMEOUT?)\n",
		"warning: STRIPE_WEBHOOK_SECRET: a secret is set for a preset that no route uses\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q does not say %q", stderr, want)
		}
	}
}

// TestCheckBadConfiguration: each kind of mistake serve would stop at is
// exit status 2 with a message naming the variable, and every mistake is
// named at once.
func TestCheckBadConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"no upstream", map[string]string{"UPSTREAM_URL": ""}, []string{"UPSTREAM_URL"}},
		{"a value that does not parse", map[string]string{"UPSTREAM_TIMEOUT": "soon"}, []string{"UPSTREAM_TIMEOUT"}},
		{"an unknown preset", map[string]string{"ROUTES": "/a=nosuchpreset"}, []string{"ROUTES"}},
		{"a log level", map[string]string{"LOG_LEVEL": "loud"}, []string{"LOG_LEVEL"}},
		{"an address that is not host:port", map[string]string{"LISTEN_ADDR": "8080"}, []string{"LISTEN_ADDR"}},
		{"both ports on one", map[string]string{"LISTEN_ADDR": ":8080", "ADMIN_ADDR": "127.0.0.1:8080"}, []string{"ADMIN_ADDR", "LISTEN_ADDR"}},
		{"two stores", map[string]string{"REDIS_URL": "redis://redis:6379", "DATABASE_URL": "postgres://db/x"}, []string{"DATABASE_URL", "REDIS_URL"}},
		{"async without a store that keeps a queue", map[string]string{"DELIVERY": "async", "ROUTES": "/acme=header:X-Acme-Id", "DYNAMODB_TABLE": "webhooks"}, []string{"DELIVERY"}},
		{"two mistakes", map[string]string{"UPSTREAM_TIMEOUT": "soon", "LOG_FORMAT": "xml"}, []string{"UPSTREAM_TIMEOUT", "LOG_FORMAT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"UPSTREAM_URL": "http://127.0.0.1:3000"}
			for k, v := range tc.env {
				env[k] = v
			}
			stdout, _, err := runCheck(env)
			if code := ExitCode(err); code != 2 {
				t.Fatalf("check: %v, exit status %d, want 2", err, code)
			}
			for _, v := range tc.want {
				if !strings.Contains(err.Error(), v) {
					t.Errorf("error %q does not name %s", err, v)
				}
			}
			if stdout != "" {
				t.Errorf("a failed check printed %q", stdout)
			}
		})
	}
}

func TestCheckTakesNoArguments(t *testing.T) {
	err := run(context.Background(), []string{"check", "extra"}, nil, &bytes.Buffer{}, &bytes.Buffer{})
	if code := ExitCode(err); code != 2 {
		t.Fatalf("check extra: %v, exit status %d, want 2", err, code)
	}
}
