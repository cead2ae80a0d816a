package k8s

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	stages, err := readDockerfile(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and a runtime stage", len(stages))
	}
	build, run, err := goBuild(stages)
	if err != nil {
		t.Fatal(err)
	}
	final := stages[len(stages)-1]

	t.Run("builder matches go.mod", func(t *testing.T) {
		gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
		if goLine == nil {
			t.Fatal("go.mod has no go directive")
		}
		want := "golang:" + string(goLine[1])
		if build.from != want && !strings.HasPrefix(build.from, want+".") && !strings.HasPrefix(build.from, want+"-") {
			t.Errorf("build stage FROM %s, want %s (go.mod says go %s)", build.from, want, goLine[1])
		}
	})

	t.Run("static, trimmed, stamped build", func(t *testing.T) {
		script, _ := stripFlags(run.args)
		for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-ldflags", "-X main.version=${VERSION}", "-X main.commit=${COMMIT}"} {
			if !strings.Contains(script, want) {
				t.Errorf("Dockerfile line %d: go build lacks %q:\n%s", run.line, want, script)
			}
		}
		var args []string
		for _, in := range build.all("ARG") {
			name, _, _ := strings.Cut(in.args, "=")
			args = append(args, name)
		}
		for _, want := range []string{"VERSION", "COMMIT"} {
			if !slices.Contains(args, want) {
				t.Errorf("build stage declares no ARG %s, so --build-arg %s=… would be ignored", want, want)
			}
		}
		if !slices.ContainsFunc(build.all("COPY"), func(in instruction) bool { return in.args == ". ." }) {
			t.Error("build stage has no `COPY . .`: the build would not see the sources")
		}
	})

	t.Run("non-root runtime", func(t *testing.T) {
		if final.from != "scratch" && !strings.HasPrefix(final.from, "gcr.io/distroless/static") {
			t.Errorf("runtime stage FROM %s, want distroless static or scratch (a static binary needs no more)", final.from)
		}
		user, ok := final.last("USER")
		if !ok {
			t.Fatal("runtime stage has no USER: it would run as root")
		}
		uid, _, _ := strings.Cut(user.args, ":")
		if n, err := strconv.Atoi(uid); err != nil || n == 0 {
			t.Errorf("USER %s: want a numeric non-zero uid, which the kubelet can check against runAsNonRoot", user.args)
		}
	})

	t.Run("entrypoint and healthcheck run the binary", func(t *testing.T) {
		entry, ok := final.last("ENTRYPOINT")
		if !ok {
			t.Fatal("runtime stage has no ENTRYPOINT")
		}
		argv, ok := execForm(entry.args)
		if !ok {
			t.Fatalf("ENTRYPOINT %s: want the exec form; the image has no shell", entry.args)
		}
		out := outputFlag.FindStringSubmatch(run.args)
		copied := slices.ContainsFunc(final.all("COPY"), func(in instruction) bool {
			rest, flags := stripFlags(in.args)
			return slices.Contains(flags, "--from="+build.name) && out != nil && rest == out[1]+" "+argv[0]
		})
		if !copied {
			t.Errorf("runtime stage does not COPY --from=%s the built binary to %s", build.name, argv[0])
		}
		hc, ok := final.last("HEALTHCHECK")
		if !ok {
			t.Fatal("runtime stage has no HEALTHCHECK")
		}
		rest, _ := stripFlags(hc.args)
		cmd, ok := strings.CutPrefix(rest, "CMD ")
		hcArgv, exec := execForm(strings.TrimSpace(cmd))
		if !ok || !exec || !slices.Equal(hcArgv, []string{argv[0], "healthcheck"}) {
			t.Errorf("HEALTHCHECK %s: want CMD [%q, \"healthcheck\"] (exec form: no shell, no curl in the image)", hc.args, argv[0])
		}
	})
}

// exposedPorts returns the runtime stage's EXPOSE ports.
func exposedPorts(t *testing.T) []string {
	t.Helper()
	stages, err := readDockerfile(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	var ports []string
	for _, in := range stages[len(stages)-1].all("EXPOSE") {
		for _, p := range strings.Fields(in.args) {
			ports = append(ports, strings.TrimSuffix(p, "/tcp"))
		}
	}
	return ports
}

func TestDockerfileExposesTheConfiguredPorts(t *testing.T) {
	vars := binaryVariables(t, builtBinary(t).binary)
	var want []string
	for _, name := range []string{"LISTEN_ADDR", "ADMIN_ADDR"} {
		_, port, err := net.SplitHostPort(vars[name])
		if err != nil {
			t.Fatalf("%s default %q: %v", name, vars[name], err)
		}
		want = append(want, port)
	}
	got := exposedPorts(t)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("EXPOSE %v, want the default LISTEN_ADDR and ADMIN_ADDR ports %v", got, want)
	}
}

func TestDockerignore(t *testing.T) {
	rules, err := readDockerignore(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path     string
		excluded bool
	}{
		{"go.mod", false},
		{"go.sum", false},
		{"main.go", false},
		{"config/config.go", false},
		{"dedup/complete.lua", false}, // embedded files stay
		{".git", true},
		{".git/HEAD", true},
		{"k8s/base/deployment.yaml", true},
		{"test/e2e_test.go", true},
		{"config/config_test.go", true},
		{"proxy/testdata/fuzz/FuzzX/1", true},
		{"README.md", true},
		{"docs/guide.md", true},
		{"webhook-dedup", true}, // a binary built locally
		{"cmd/webhook-dedup/main.go", false},
	}
	for _, tt := range tests {
		if got := excluded(rules, tt.path); got != tt.excluded {
			t.Errorf("%s: excluded = %v, want %v", tt.path, got, tt.excluded)
		}
	}
}

func TestDockerignoreMatcher(t *testing.T) {
	const ignore = "# comment\n*.md\n**/*.log\n/bin\ndocs\n!docs/keep.md\nsrc/*/gen\n"
	rules, err := parseDockerignore(strings.NewReader(ignore))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path     string
		excluded bool
	}{
		{"README.md", true},
		{"sub/README.md", false}, // no implicit **/, unlike .gitignore
		{"a.log", true},
		{"a/b/c.log", true},
		{"bin", true},
		{"bin/tool", true},
		{"sub/bin", false},
		{"docs/x.txt", true},
		{"docs/keep.md", false}, // the exception, last match wins
		{"src/x/gen/a.go", true},
		{"src/x/y/gen", false},
		{"main.go", false},
	}
	for _, tt := range tests {
		if got := excluded(rules, tt.path); got != tt.excluded {
			t.Errorf("%s: excluded = %v, want %v", tt.path, got, tt.excluded)
		}
	}
}

func TestDockerfileParser(t *testing.T) {
	const dockerfile = `# syntax=docker/dockerfile:1
ARG BASE=golang
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
RUN --mount=type=cache,target=/x \
    # a comment inside a continuation
    echo one \
    two
FROM scratch
COPY --from=build /out/app /app
ENTRYPOINT ["/app"]
`
	stages, err := parseDockerfile(strings.NewReader(dockerfile))
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 || stages[0].name != "build" || stages[0].from != "golang:1.26" || stages[1].from != "scratch" {
		t.Fatalf("stages = %+v", stages)
	}
	run, _ := stages[0].last("RUN")
	script, flags := stripFlags(run.args)
	if script != "echo one     two" || !slices.Equal(flags, []string{"--mount=type=cache,target=/x"}) || run.line != 4 {
		t.Errorf("RUN = %q, flags %q, line %d", script, flags, run.line)
	}
	entry, _ := stages[1].last("ENTRYPOINT")
	if argv, ok := execForm(entry.args); !ok || !slices.Equal(argv, []string{"/app"}) {
		t.Errorf("ENTRYPOINT = %q", entry.args)
	}
	if _, ok := execForm("/app serve"); ok {
		t.Error("the shell form was taken for the exec form")
	}
	if _, err := parseDockerfile(strings.NewReader("RUN true\n")); err == nil {
		t.Error("RUN before FROM was accepted")
	}
}
