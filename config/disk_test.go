package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDataDirChoosesTheDiskStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing", "data")
	cfg, err := Load(map[string]string{"UPSTREAM_URL": "http://127.0.0.1:3000", "DATA_DIR": dir})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Store{Kind: StoreDisk, Variable: "DATA_DIR"}); cfg.Store != want {
		t.Errorf("Store = %+v, want %+v", cfg.Store, want)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Errorf("DATA_DIR was not created: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the write test left files behind: %v", entries)
	}
}

func TestDataDirErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	readOnly := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(readOnly, 0o500); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"a file", map[string]string{"DATA_DIR": file}, "DATA_DIR: " + file + " is not a directory"},
		{"and Redis", map[string]string{"DATA_DIR": t.TempDir(), "REDIS_URL": "redis://r:6379"}, "DATA_DIR: set together with REDIS_URL"},
	}
	if os.Geteuid() != 0 { // root writes anywhere
		cases = append(cases, struct {
			name string
			env  map[string]string
			want string
		}{"read-only", map[string]string{"DATA_DIR": readOnly}, "DATA_DIR: " + readOnly + " is not a directory this process can write in"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.env["UPSTREAM_URL"] = "http://127.0.0.1:3000"
			_, err := Load(tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
