package diskconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/setting"
)

func TestComplete(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing", "data")
	for _, tc := range []struct {
		name   string
		dir    string
		chosen bool
		want   string // empty: no problem
	}{
		{"missing: created", missing, true, ""},
		{"a file", file, true, "DATA_DIR: " + file + " is not a directory this process can write in"},
		{"under a file", filepath.Join(file, "x"), true, "DATA_DIR: " + filepath.Join(file, "x") + " is not a directory"},
		// Another store was chosen, and that is config's to report.
		{"a file, not chosen", file, false, ""},
	} {
		s := Settings{Dir: tc.dir}
		problems := s.Complete(setting.Scope{Chosen: tc.chosen})
		switch {
		case tc.want == "" && len(problems) > 0:
			t.Errorf("%s: %v, want none", tc.name, problems)
		case tc.want != "" && (len(problems) != 1 || !strings.HasPrefix(problems[0].Error(), tc.want)):
			t.Errorf("%s: %v, want one problem starting %q", tc.name, problems, tc.want)
		}
	}
	if fi, err := os.Stat(missing); err != nil || !fi.IsDir() {
		t.Errorf("DATA_DIR was not created: %v", err)
	}
	if entries, _ := os.ReadDir(missing); len(entries) != 0 {
		t.Errorf("the write test left files behind: %v", entries)
	}
}
