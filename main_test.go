package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
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

var update = flag.Bool("update", false, "rewrite README.md's configuration table from the code")

// configTable renders config.Variables as the README's Markdown table.
func configTable() []byte {
	var b bytes.Buffer
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	for _, v := range config.Variables() {
		def := "empty"
		if v.Default != "" {
			def = "`" + v.Default + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.Name, def, strings.ReplaceAll(v.Description, "|", "\\|"))
	}
	return b.Bytes()
}

// The README documents every variable the code reads, and no other.
// `go test -run README -update .` regenerates its table.
func TestREADMEDocumentsEveryVariableAndNoOther(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		const startMark, endMark = "<!-- config-table:start -->\n", "<!-- config-table:end -->"
		i, j := bytes.Index(readme, []byte(startMark)), bytes.Index(readme, []byte(endMark))
		if i < 0 || j < i {
			t.Fatal("README.md has no config table markers")
		}
		readme = append(append(append([]byte{}, readme[:i+len(startMark)]...), configTable()...), readme[j:]...)
		if err := os.WriteFile("README.md", readme, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	known := map[string]bool{}
	for _, v := range config.Variables() {
		known[v.Name] = true
		if !bytes.Contains(readme, []byte("`"+v.Name+"`")) {
			t.Errorf("README.md does not document %s", v.Name)
		}
	}
	start := bytes.Index(readme, []byte("<!-- config-table:start -->"))
	end := bytes.Index(readme, []byte("<!-- config-table:end -->"))
	if start < 0 || end < start {
		t.Fatal("README.md has no config table markers")
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z][A-Z0-9_]+)`").FindAllSubmatch(readme[start:end], -1) {
		if !known[string(m[1])] {
			t.Errorf("README.md's configuration table lists %s, which the code does not read", m[1])
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
