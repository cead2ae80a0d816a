package k8s

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// snapshotVersion is what the snapshot release is stamped with: not the
// VERSION file's, so that a binary that prints it was stamped by make.
const snapshotVersion = "0.0.0-snapshot"

// TestReleaseSnapshot runs `make release` as the tag workflow does, for
// this machine's platform only (the four are the same command), and checks
// what it leaves: the tarball with a binary stamped with the version, the
// chart packaged at that version, and checksums that match both.
func TestReleaseSnapshot(t *testing.T) {
	helm, err := findHelm()
	if err != nil {
		t.Fatal(err)
	}
	dist := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	cmd := exec.Command("make", "-s", "release", "VERSION="+snapshotVersion, "DIST="+dist, "PLATFORMS="+platform, "HELM="+helm)
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}

	name := fmt.Sprintf("webhook-dedup_%s_%s_%s", snapshotVersion, runtime.GOOS, runtime.GOARCH)
	chart := "webhook-dedup-" + snapshotVersion + ".tgz"
	sums := readChecksums(t, filepath.Join(dist, "checksums.txt"))
	if got := slices.Sorted(maps.Keys(sums)); !slices.Equal(got, []string{chart, name + ".tar.gz"}) {
		t.Errorf("checksums.txt lists %v, want %s.tar.gz and %s", got, name, chart)
	}
	for file, sum := range sums {
		data, err := os.ReadFile(filepath.Join(dist, file))
		if err != nil {
			t.Fatal(err)
		}
		if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
			t.Errorf("checksums.txt: %s %s, but the file's sha256 is %x", sum, file, got)
		}
	}

	dir := t.TempDir()
	files := untar(t, filepath.Join(dist, name+".tar.gz"), dir)
	want := []string{name + "/LICENSE", name + "/README.md", name + "/webhook-dedup"}
	if !slices.Equal(files, want) {
		t.Fatalf("%s.tar.gz holds %v, want %v", name, files, want)
	}
	binary := filepath.Join(dir, name, "webhook-dedup")
	out, err := exec.Command(binary, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", name, err, out)
	}
	if !strings.HasPrefix(string(out), "webhook-dedup "+snapshotVersion+" (commit ") {
		t.Errorf("the released binary's version prints %q, want webhook-dedup %s (commit …)", out, snapshotVersion)
	}

	meta := chartMeta(t, filepath.Join(dist, chart))
	if meta.Version != snapshotVersion || meta.AppVersion != snapshotVersion {
		t.Errorf("%s: version %q appVersion %q, want both %s (the image tag the chart runs)", chart, meta.Version, meta.AppVersion, snapshotVersion)
	}
}

// TestReleasePlatforms: `make release` builds linux and darwin, amd64 and
// arm64 when not told otherwise.
func TestReleasePlatforms(t *testing.T) {
	cmd := exec.Command("make", "-n", "-s", "release", "DIST="+t.TempDir(), "HELM=helm")
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n release: %v\n%s", err, out)
	}
	for _, p := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"} {
		if !strings.Contains(string(out), p) {
			t.Errorf("make release does not build %s:\n%s", p, out)
		}
	}
}

// TestReleaseWorkflow: the tag workflow passes actionlint, releases only a
// tag equal to the VERSION file, and does its work through make (release,
// then publish), so that what it runs is what the tests run.
func TestReleaseWorkflow(t *testing.T) {
	const workflow = ".github/workflows/release.yml"
	actionlint, err := exec.LookPath("actionlint")
	if err != nil {
		path, ok := goInstalled("actionlint")
		if !ok {
			t.Fatal("actionlint not found; install it: go install github.com/rhysd/actionlint/cmd/actionlint@v1.7.12, or `make deps`")
		}
		actionlint = path
	}
	cmd := exec.Command(actionlint, workflow)
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("actionlint %s: %v\n%s", workflow, err, out)
	}
	data, err := os.ReadFile(filepath.Join(repoRoot(t), workflow))
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				Run string `json:"run"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal(data, &wf); err != nil {
		t.Fatal(err)
	}
	var runs []string
	for _, job := range wf.Jobs {
		for _, s := range job.Steps {
			runs = append(runs, strings.TrimSpace(s.Run))
		}
	}
	order := []string{"$(cat VERSION)", "make release", "make publish"}
	at := 0
	for _, run := range runs {
		if at < len(order) && strings.Contains(run, order[at]) {
			at++
		}
	}
	if at < len(order) {
		t.Errorf("%s does not compare the tag with VERSION, then run make release, then make publish (found %d of %v in order)", workflow, at, order)
	}
}

func readChecksums(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, file, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("checksums.txt: %q is not `SHA256  FILE`", sc.Text())
		}
		sums[file] = sum
	}
	return sums
}

// walkTar calls fn with each regular file of a .tar.gz.
func walkTar(t *testing.T, archive string, fn func(h *tar.Header, r io.Reader)) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", archive, err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		if h.Typeflag == tar.TypeReg {
			fn(h, tr)
		}
	}
}

// untar extracts the regular files of a .tar.gz into dir, and returns
// their names in the archive, sorted.
func untar(t *testing.T, archive, dir string) []string {
	t.Helper()
	var names []string
	walkTar(t, archive, func(h *tar.Header, r io.Reader) {
		target := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(target, dir+string(filepath.Separator)) {
			t.Fatalf("%s: %s leaves the directory", archive, h.Name)
		}
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(target, data, os.FileMode(h.Mode)&0o755); err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	})
	slices.Sort(names)
	return names
}

// chartMeta reads Chart.yaml out of a packaged chart.
func chartMeta(t *testing.T, tgz string) (meta struct {
	Version    string `json:"version"`
	AppVersion string `json:"appVersion"`
}) {
	t.Helper()
	found := false
	walkTar(t, tgz, func(h *tar.Header, r io.Reader) {
		if h.Name != "webhook-dedup/Chart.yaml" {
			return
		}
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, &meta); err != nil {
			t.Fatalf("%s: Chart.yaml: %v", tgz, err)
		}
		found = true
	})
	if !found {
		t.Fatalf("%s holds no webhook-dedup/Chart.yaml", tgz)
	}
	return meta
}
