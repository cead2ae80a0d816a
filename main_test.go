package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/config"
)

func TestHelpListsEveryVariable(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, v := range config.Variables() {
		if !regexp.MustCompile(`(?m)^` + v.Name + `\s`).MatchString(out.String()) {
			t.Errorf("-h does not list %s", v.Name)
		}
	}
}

func TestConfigErrorsExitTwo(t *testing.T) {
	for _, env := range []map[string]string{
		{},
		{"UPSTREAM_URL": "http://127.0.0.1:1", "UPSTREAM_TIMEOUT": "x"},
		{"UPSTREAM_URL": "http://127.0.0.1:1", "ROUTES": "/a=nosuchpreset"},
	} {
		var stderr bytes.Buffer
		err := run(context.Background(), nil, env, &stderr, &stderr)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("run with %v: %v, want exit status 2", env, err)
		}
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "webhook-dedup dev (commit unknown, go") {
		t.Fatalf("version printed %q", out.String())
	}
}

func TestDescribeRoutes(t *testing.T) {
	cfg, err := config.Load(map[string]string{
		"UPSTREAM_URL": "http://127.0.0.1:3000", "GITHUB_WEBHOOK_SECRET": "s",
		"ROUTES": "/gh=github,/stripe=stripe,/acme=header:X-Acme-Id",
	})
	if err != nil {
		t.Fatal(err)
	}
	routes, err := buildRoutes(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/gh=github (signatures verified: github)",
		"/stripe=stripe (signatures not verified)",
		"/acme=header:X-Acme-Id (signatures not verified)",
	}
	if got := describeRoutes(cfg, routes); !slices.Equal(got, want) {
		t.Errorf("describeRoutes = %q\nwant %q", got, want)
	}
}
