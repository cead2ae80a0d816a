package k8s

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// buildCommit is the commit the test passes as --build-arg, as
// docs/kubernetes.md does; `webhook-dedup version` must print it, with the
// VERSION file's version (no VERSION build argument is passed).
const buildCommit = "c0ffee1"

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
	built.once.Do(func() {
		built.result, built.err = buildLikeDockerfile(filepath.Join(workDir, "webhook-dedup"), "Dockerfile")
	})
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
	return readStages(filepath.Join(root, "Dockerfile"))
}

func readStages(path string) ([]stage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseDockerfile(f)
}

func readDockerignore(root string) ([]ignoreRule, error) {
	return readIgnoreFile(filepath.Join(root, ".dockerignore"))
}

// ignoreFileFor is the ignore file BuildKit applies to dockerfile (relative
// to root): <dockerfile>.dockerignore beside it if there is one, else the
// context's .dockerignore.
func ignoreFileFor(root, dockerfile string) string {
	if own := filepath.Join(root, dockerfile+".dockerignore"); isRegular(own) {
		return own
	}
	return filepath.Join(root, ".dockerignore")
}

func isRegular(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular()
}

func readIgnoreFile(path string) ([]ignoreRule, error) {
	f, err := os.Open(path)
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

// buildLikeDockerfile runs the go build command of dockerfile (relative to
// the repository root, the build context), word for word, in a copy of the
// context that its ignore file leaves, with the build arguments set as
// Docker sets them: as environment variables of the RUN shell. Only the
// output path moves into dir.
func buildLikeDockerfile(dir, dockerfile string) (*imageBuild, error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return nil, err
	}
	stages, err := readStages(filepath.Join(root, dockerfile))
	if err != nil {
		return nil, err
	}
	buildStage, run, err := goBuild(stages)
	if err != nil {
		return nil, err
	}
	rules, err := readIgnoreFile(ignoreFileFor(root, dockerfile))
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
