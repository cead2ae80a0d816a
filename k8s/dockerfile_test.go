package k8s

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The values the test passes as --build-arg; `webhook-dedup version` must
// print them.
const (
	buildVersion = "v9.8.7-k8s-test"
	buildCommit  = "c0ffee1"
)

// workDir holds what the tests build; TestMain removes it.
var workDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "webhook-dedup-k8s-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// imageBuild is the outcome of running the Dockerfile's build stage here.
type imageBuild struct {
	binary  string // the built webhook-dedup
	context string // the build context, as .dockerignore leaves it
}

// built runs the Dockerfile's go build once per test binary; every test that
// needs the binary shares it.
var built struct {
	once   sync.Once
	result *imageBuild
	err    error
}

// builtBinary returns the binary the Dockerfile's build stage makes.
func builtBinary(t *testing.T) *imageBuild {
	t.Helper()
	built.once.Do(func() { built.result, built.err = buildLikeDockerfile(workDir) })
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.result
}

// repoRoot is the build context: the repository root, above k8s/.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func readDockerfile(root string) ([]stage, error) {
	f, err := os.Open(filepath.Join(root, "Dockerfile"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseDockerfile(f)
}

func readDockerignore(root string) ([]ignoreRule, error) {
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseDockerignore(f)
}

// goBuild finds the stage and the RUN instruction that run go build.
func goBuild(stages []stage) (stage, instruction, error) {
	for _, s := range stages {
		for _, in := range s.all("RUN") {
			if strings.Contains(in.args, "go build") {
				return s, in, nil
			}
		}
	}
	return stage{}, instruction{}, errors.New("Dockerfile: no RUN instruction runs go build")
}

var outputFlag = regexp.MustCompile(`(?:^|\s)-o\s+(\S+)`)

// buildLikeDockerfile runs the Dockerfile's go build command, word for word,
// in a copy of the build context that .dockerignore leaves, with the build
// arguments set as Docker sets them: as environment variables of the RUN
// shell. Only the output path moves into dir.
func buildLikeDockerfile(dir string) (*imageBuild, error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return nil, err
	}
	stages, err := readDockerfile(root)
	if err != nil {
		return nil, err
	}
	buildStage, run, err := goBuild(stages)
	if err != nil {
		return nil, err
	}
	rules, err := readDockerignore(root)
	if err != nil {
		return nil, err
	}
	contextDir := filepath.Join(dir, "context")
	if err := copyContext(root, contextDir, rules); err != nil {
		return nil, fmt.Errorf("copy the build context: %w", err)
	}
	script, _ := stripFlags(run.args) // --mount=type=cache,…: BuildKit's, not the shell's
	out := outputFlag.FindStringSubmatch(script)
	if out == nil {
		return nil, fmt.Errorf("Dockerfile line %d: go build without -o", run.line)
	}
	binary := filepath.Join(dir, "out", filepath.Base(out[1]))
	script = strings.ReplaceAll(script, out[1], binary)

	buildArgs := map[string]string{
		"VERSION":    buildVersion,
		"COMMIT":     buildCommit,
		"TARGETOS":   runtime.GOOS,
		"TARGETARCH": runtime.GOARCH,
	}
	env := append(os.Environ(), "GOTOOLCHAIN=local") // as the golang image sets it
	for _, arg := range buildStage.all("ARG") {
		name, def, _ := strings.Cut(arg.args, "=")
		if v, ok := buildArgs[name]; ok {
			def = v
		}
		env = append(env, name+"="+def)
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = contextDir
	cmd.Env = env
	if output, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("the Dockerfile's build (line %d) failed in the context .dockerignore leaves:\n%s\n%v\n%s", run.line, script, err, output)
	}
	return &imageBuild{binary: binary, context: contextDir}, nil
}

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

func TestImageBinaryIsStatic(t *testing.T) {
	b := builtBinary(t)
	f, err := elf.Open(b.binary)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_INTERP:
			t.Error("the binary has a PT_INTERP program header: it needs a dynamic loader, which distroless static lacks")
		case elf.PT_DYNAMIC:
			t.Error("the binary has a PT_DYNAMIC program header: it links shared libraries")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("imported libraries: %v (%v), want none", libs, err)
	}

	info, err := buildinfo.ReadFile(b.binary)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings CGO_ENABLED=%q -trimpath=%q, want 0 and true", settings["CGO_ENABLED"], settings["-trimpath"])
	}
	data, err := os.ReadFile(b.binary)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(b.context)) {
		t.Errorf("the binary contains the build directory %s: -trimpath did not apply", b.context)
	}
}

func TestImageBinaryVersionIsStamped(t *testing.T) {
	b := builtBinary(t)
	info, err := buildinfo.ReadFile(b.binary)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(b.binary, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("webhook-dedup version: %v\n%s", err, out)
	}
	for _, want := range []string{buildVersion, buildCommit, info.GoVersion} {
		if !strings.Contains(string(out), want) {
			t.Errorf("webhook-dedup version printed %q, want it to contain %q", out, want)
		}
	}
}

// The image's HEALTHCHECK command, run as Docker would: it fails while
// nothing serves, passes once webhook-dedup is ready, and fails again after
// it stopped.
func TestImageHealthcheck(t *testing.T) {
	b := builtBinary(t)
	stages, err := readDockerfile(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	hc, _ := stages[len(stages)-1].last("HEALTHCHECK")
	rest, _ := stripFlags(hc.args)
	argv, ok := execForm(strings.TrimSpace(strings.TrimPrefix(rest, "CMD")))
	if !ok {
		t.Fatalf("HEALTHCHECK %q is not in exec form", hc.args)
	}
	adminAddr := freeAddr(t)
	healthcheck := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, b.binary, argv[1:]...)
		cmd.Env = []string{"ADMIN_ADDR=" + adminAddr}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	if err := healthcheck(); err == nil {
		t.Fatal("healthcheck passed with nothing listening on ADMIN_ADDR")
	}

	serve := exec.Command(b.binary)
	serve.Env = []string{
		"UPSTREAM_URL=http://" + freeAddr(t),
		"LISTEN_ADDR=" + freeAddr(t),
		"ADMIN_ADDR=" + adminAddr,
		"LOG_LEVEL=error",
	}
	// A file, not a buffer: the process writes it directly, so reading it
	// while the process runs is no data race.
	logPath := filepath.Join(t.TempDir(), "webhook-dedup.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	logs := func() string { data, _ := os.ReadFile(logPath); return string(data) }
	serve.Stdout, serve.Stderr = logFile, logFile
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = serve.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = serve.Process.Kill() // fails harmlessly if it already exited
		<-exited
	})

	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for err := healthcheck(); err != nil; err = healthcheck() {
		select {
		case <-exited:
			t.Fatalf("webhook-dedup exited before it was ready: %v\n%s", waitErr, logs())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthcheck still failing after 15s: %v\nlogs:\n%s", err, logs())
		}
	}

	if err := serve.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("webhook-dedup after SIGINT: %v\n%s", waitErr, logs())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("webhook-dedup did not exit within 30s of SIGINT")
	}
	if err := healthcheck(); err == nil {
		t.Error("healthcheck passed after webhook-dedup exited")
	}
}

// freeAddr returns a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
