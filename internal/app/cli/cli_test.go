package cli

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"runtime"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/internal/app/serve"
)

// run is Run as a binary built without version stamps runs it.
func run(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) error {
	return Run(ctx, args, environ, stdout, stderr, serve.Build{Version: "dev", Commit: "unknown"})
}

func TestHelpListsEveryVariable(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"serve", "check", "dead-letters", "send", "completion"} {
		if !regexp.MustCompile(`(?m)^  ` + cmd + `\s`).MatchString(out.String()) {
			t.Errorf("-h does not name the %s command", cmd)
		}
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
		if code := ExitCode(err); code != 2 {
			t.Errorf("run with %v: %v, exit status %d, want 2", env, err, code)
		}
	}
}

// TestVersion: one line, the semantic version then the commit and the Go
// release, each once.
func TestVersion(t *testing.T) {
	var out bytes.Buffer
	build := serve.Build{Version: "0.4.0-dev", Commit: "abc1234"}
	if err := Run(context.Background(), []string{"version"}, nil, &out, &out, build); err != nil {
		t.Fatal(err)
	}
	if want := "webhook-dedup 0.4.0-dev (commit abc1234, " + runtime.Version() + ")\n"; out.String() != want {
		t.Fatalf("version printed %q, want %q", out.String(), want)
	}
}
