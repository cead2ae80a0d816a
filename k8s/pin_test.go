package k8s

import (
	"os"
	"path/filepath"
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
	pin, err := os.ReadFile(imagePin)
	if err != nil {
		t.Fatal(err)
	}
	var tag string
	for _, line := range strings.Split(string(pin), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "newTag:"); ok {
			tag = strings.TrimSpace(v)
		}
	}
	if tag == "" {
		t.Fatalf("%s sets no newTag", imagePin)
	}
	err = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.ToSlash(path) == imagePin || (!strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".yml")) {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			code, _, _ := strings.Cut(line, "#")
			if strings.Contains(code, "webhook-dedup/webhook-dedup:") {
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
				if c.Name == sidecarName && !strings.HasSuffix(c.Image, ":"+tag) {
					t.Errorf("%s: Deployment %s runs %s, not the tag %s sets (%s)", v.dir, d.Name, c.Image, imagePin, tag)
				}
			}
		}
	}
}
