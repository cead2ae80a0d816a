package k8s

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// imagePin is the file that says which webhook-dedup image and tag the
// manifests run, for every variant.
const imagePin = "image/webhook-dedup.yaml"

// TestImageTagInOnePlace: no manifest but imagePin writes a tag for the
// webhook-dedup image, so changing the version is one edit, and every
// variant renders the tag imagePin sets.
func TestImageTagInOnePlace(t *testing.T) {
	tag := pinnedTag(t)
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.ToSlash(path) == imagePin || (!strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".yml")) {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			code, _, _ := strings.Cut(line, "#")
			if strings.Contains(code, "webhook-dedup/webhook-dedup:") || strings.Contains(code, "webhook-dedup/webhook-dedup-echo:") {
				t.Errorf("%s:%d: %s: the tag belongs in %s only", path, i+1, strings.TrimSpace(line), imagePin)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range variants {
		m := render(t, v.dir)
		for _, d := range m.deployments {
			for _, c := range append(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers...) {
				released := c.Name == sidecarName || strings.HasPrefix(c.Image, "ghcr.io/webhook-dedup/")
				if released && !strings.HasSuffix(c.Image, ":"+tag) {
					t.Errorf("%s: Deployment %s runs %s, not the tag %s sets (%s)", v.dir, d.Name, c.Image, imagePin, tag)
				}
			}
		}
	}
}

// pinnedTag is the tag imagePin sets, the same for every image it names:
// one release builds them all.
func pinnedTag(t *testing.T) string {
	t.Helper()
	pin, err := os.ReadFile(imagePin)
	if err != nil {
		t.Fatal(err)
	}
	tags := regexp.MustCompile(`(?m)^\s*newTag:\s*(\S+)`).FindAllSubmatch(pin, -1)
	if len(tags) == 0 {
		t.Fatalf("%s sets no newTag", imagePin)
	}
	for _, tag := range tags[1:] {
		if string(tag[1]) != string(tags[0][1]) {
			t.Errorf("%s sets the tags %s and %s: one release builds every image, with one tag", imagePin, tags[0][1], tag[1])
		}
	}
	return string(tags[0][1])
}

// pinned is the value imagePin gives field (newTag, newName); empty if
// none.
func pinned(t *testing.T, field string) string {
	t.Helper()
	pin, err := os.ReadFile(imagePin)
	if err != nil {
		t.Fatal(err)
	}
	var value string
	for _, line := range strings.Split(string(pin), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			value = strings.TrimSpace(v)
		}
	}
	return value
}

// TestImageTagIsTheLatestRelease: the manifests run the project's latest
// release in CHANGELOG.md, so that a release (VERSION, CHANGELOG.md, this
// pin: the root package's TestVersionFile ties the first two) cannot leave
// them on the previous one, nor point them at a development version. An
// image of your own registry (newName) is tagged as you built it.
func TestImageTagIsTheLatestRelease(t *testing.T) {
	if name := pinned(t, "newName"); name != "" {
		t.Logf("%s runs %s, an image of your own: any tag goes", imagePin, name)
		return
	}
	changelog, err := os.ReadFile(filepath.Join(repoRoot(t), "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\]`).FindSubmatch(changelog)
	if m == nil {
		t.Fatal("CHANGELOG.md has no release section (## [X.Y.Z])")
	}
	if tag := pinnedTag(t); tag != string(m[1]) {
		t.Errorf("%s pins the tag %s; CHANGELOG.md's latest release is %s", imagePin, tag, m[1])
	}
}
