package cli

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/internal/app/serve"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// commandPaths lists every command's arguments from the root, hidden ones
// (cobra's __complete) left out.
func commandPaths(t *testing.T) [][]string {
	t.Helper()
	root := newRoot(&env{build: serve.Build{Version: "dev", Commit: "unknown"}})
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			if !sub.Hidden {
				walk(sub, append(append([]string(nil), path...), sub.Name()))
			}
		}
	}
	walk(root, nil)
	paths = append(paths, []string{"help"}) // added as the root runs
	if len(paths) < 13 {
		t.Fatalf("the command tree has %d commands: %v", len(paths), paths)
	}
	return paths
}

// TestEveryCommandHelp: -h on every command exits 0 and shows its usage
// and an example; the root's and serve's list every variable too.
func TestEveryCommandHelp(t *testing.T) {
	for _, path := range commandPaths(t) {
		for _, flag := range []string{"-h", "--help"} {
			var out, errOut bytes.Buffer
			err := run(context.Background(), append(append([]string(nil), path...), flag), nil, &out, &errOut)
			name := strings.Join(append([]string{"webhook-dedup"}, path...), " ")
			if err != nil || errOut.Len() != 0 {
				t.Errorf("%s %s: %v %q; want exit 0, nothing on stderr", name, flag, err, errOut.String())
			}
			if !strings.Contains(out.String(), "Usage:\n  "+name) || !regexp.MustCompile(`Examples:\n  \S`).MatchString(out.String()) {
				t.Errorf("%s %s printed no usage or no example:\n%s", name, flag, out.String())
			}
			wantVariables := len(path) == 0 || path[0] == "serve"
			for _, v := range config.Variables() {
				if listed := regexp.MustCompile(`(?m)^` + v.Name + `\s`).MatchString(out.String()); listed != wantVariables {
					t.Errorf("%s %s: lists %s: %v, want %v", name, flag, v.Name, listed, wantVariables)
				}
			}
		}
	}
}

// TestCommandLineMistakes: every mistake on the command line is exit
// status 2 with one line that says what is wrong, then where to read the
// usage, and nothing done: no store reached (REDIS_URL points at nothing,
// which would be exit 1), nothing printed on stdout, no serving.
func TestCommandLineMistakes(t *testing.T) {
	env := map[string]string{
		"UPSTREAM_URL": "http://127.0.0.1:1", "REDIS_URL": "redis://" + redistest.FreeAddr(t),
		"LISTEN_ADDR": redistest.FreeAddr(t), "ADMIN_ADDR": redistest.FreeAddr(t),
		"ROUTES": "/hooks=github;async", "GITHUB_WEBHOOK_SECRET": "s",
	}
	type mistake struct {
		args []string
		want string // the first line, after nothing else
		help string // the command whose -h it points at
	}
	var cases []mistake
	// An unknown flag, on every command.
	for _, path := range commandPaths(t) {
		cases = append(cases, mistake{append(append([]string(nil), path...), "--no-such-flag"), "unknown flag: --no-such-flag", strings.Join(path, " ")})
	}
	cases = append(cases,
		mistake{[]string{"bogus"}, `unknown command "bogus"`, ""},
		mistake{[]string{"inpsect", "stripe", "evt_1"}, `unknown command "inpsect" (did you mean inspect?)`, ""},
		mistake{[]string{"-x"}, "unknown shorthand flag: 'x' in -x", ""},
		mistake{[]string{"serve", "now"}, `serve takes no arguments, got ["now"]`, "serve"},
		mistake{[]string{"check", "extra"}, `check takes no arguments, got ["extra"]`, "check"},
		mistake{[]string{"inspect"}, "inspect wants NAMESPACE ID, got 0 arguments", "inspect"},
		mistake{[]string{"forget", "stripe"}, "forget wants NAMESPACE ID, got 1 argument", "forget"},
		mistake{[]string{"retry", "stripe"}, "retry wants NAMESPACE ID, got 1 argument", "retry"},
		mistake{[]string{"retry", "--all", "stripe", "evt_1"}, `--all takes no NAMESPACE ID, got ["stripe" "evt_1"]`, "retry"},
		mistake{[]string{"retry", "--namespace", "stripe", "stripe", "evt_1"}, "--namespace, --failed-before and --failed-after choose among dead letters for --all", "retry"},
		mistake{[]string{"retry", "--all", "--failed-before", "yesterday"}, `--failed-before "yesterday": neither an RFC 3339 time`, "retry"},
		mistake{[]string{"dead-letters", "--since", "yesterday"}, `--since "yesterday": neither an RFC 3339 time`, "dead-letters"},
		mistake{[]string{"dead-letters", "--until", "-2h"}, `--until "-2h": neither an RFC 3339 time`, "dead-letters"},
		mistake{[]string{"dead-letters", "--limit", "many"}, `invalid argument "many" for "--limit" flag`, "dead-letters"},
		mistake{[]string{"dead-letters", "--limit", "-1"}, "--limit -1: 0 (all) or more", "dead-letters"},
		mistake{[]string{"dead-letters", "-o", "yaml"}, `-o "yaml": table or json`, "dead-letters"},
		mistake{[]string{"dead-letters", "-o"}, "flag needs an argument: 'o' in -o", "dead-letters"},
		mistake{[]string{"dead-letters", "stripe"}, `dead-letters takes no arguments, got ["stripe"]`, "dead-letters"},
		mistake{[]string{"migrate", "--print=maybe"}, `invalid argument "maybe" for "--print" flag`, "migrate"},
		mistake{[]string{"send"}, "send wants ROUTE, got 0 arguments", "send"},
		mistake{[]string{"send", "/nowhere"}, `route "/nowhere" is not in ROUTES (/hooks)`, "send"},
		mistake{[]string{"send", "/hooks", "--to", "ftp://x"}, `--to "ftp://x": not an http or https URL`, "send"},
		mistake{[]string{"completion"}, "completion wants SHELL, got 0 arguments", "completion"},
		mistake{[]string{"completion", "powershell"}, `shell "powershell": bash, zsh or fish`, "completion"},
		mistake{[]string{"help", "bogus"}, `no help topic ["bogus"]`, ""},
	)
	for _, tc := range cases {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, env, &out, &errOut)
		if code := ExitCode(err); code != 2 {
			t.Errorf("%q: %v, exit %d; want 2", tc.args, err, code)
			continue
		}
		lines := strings.Split(err.Error(), "\n")
		help := strings.TrimSpace("webhook-dedup " + tc.help)
		if len(lines) != 2 || !strings.HasPrefix(lines[0], tc.want) || lines[1] != "Run '"+help+" -h' for usage and examples." {
			t.Errorf("%q: %q; want %q, then the pointer at %s -h", tc.args, err.Error(), tc.want, help)
		}
		if out.Len() != 0 || errOut.Len() != 0 {
			t.Errorf("%q printed %q %q; want the error alone", tc.args, out.String(), errOut.String())
		}
	}
}
