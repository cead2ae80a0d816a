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

// The README's configuration table is exactly the one the code generates
// (every variable, its default and its description, and no other), and
// every variable is named in it. `go test -run README -update .`
// regenerates it.
func TestREADMEDocumentsEveryVariableAndNoOther(t *testing.T) {
	const startMark, endMark = "<!-- config-table:start -->\n", "<!-- config-table:end -->"
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(readme, []byte(startMark)), bytes.Index(readme, []byte(endMark))
	if i < 0 || j < i {
		t.Fatal("README.md has no config table markers")
	}
	want := configTable()
	if *update {
		readme = append(append(append([]byte{}, readme[:i+len(startMark)]...), want...), readme[j:]...)
		if err := os.WriteFile("README.md", readme, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got := readme[i+len(startMark) : j]; !bytes.Equal(got, want) {
		gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for n := range max(len(gotLines), len(wantLines)) {
			var g, w string
			if n < len(gotLines) {
				g = gotLines[n]
			}
			if n < len(wantLines) {
				w = wantLines[n]
			}
			if g != w {
				t.Errorf("README.md's configuration table, line %d:\n got: %s\nwant: %s", n+1, g, w)
			}
		}
		t.Errorf("README.md's configuration table is not the generated one; run: go test -run README -update .")
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
