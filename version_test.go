package main

import (
	"os"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/internal/app/serve"
)

// semver is a semantic version: X.Y.Z, with a pre-release after '-'.
var semver = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?$`)

// latestRelease is the newest version CHANGELOG.md has a section for.
var latestRelease = regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\]`)

// TestVersionFile: VERSION is a semantic version that follows CHANGELOG.md:
// the latest release itself, or a pre-release (X.Y.Z-dev) of a later
// version while CHANGELOG.md collects it under [Unreleased].
func TestVersionFile(t *testing.T) {
	v := strings.TrimSpace(versionFile)
	m := semver.FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("VERSION is %q, not a semantic version (X.Y.Z or X.Y.Z-dev)", v)
	}
	changelog, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	rel := latestRelease.FindSubmatch(changelog)
	if rel == nil {
		t.Fatal("CHANGELOG.md has no release section (## [X.Y.Z])")
	}
	latest := string(rel[1])
	if m[4] == "" {
		if v != latest {
			t.Errorf("VERSION is the release %s, but CHANGELOG.md's latest release is %s", v, latest)
		}
		return
	}
	if !newer(m[1:4], strings.Split(latest, ".")) {
		t.Errorf("VERSION %s is not a pre-release of a version after CHANGELOG.md's latest release, %s", v, latest)
	}
	if !strings.Contains(string(changelog), "\n## [Unreleased]\n") {
		t.Errorf("VERSION %s is a pre-release, but CHANGELOG.md has no [Unreleased] section", v)
	}
}

// newer reports whether the version a (major, minor, patch) comes after b.
func newer(a, b []string) bool {
	for i := range 3 {
		x, _ := strconv.Atoi(a[i])
		y, _ := strconv.Atoi(b[i])
		if x != y {
			return x > y
		}
	}
	return false
}

// TestStamp: the version is VERSION's and the commit go build's record of
// the checkout, unless -ldflags stamped them.
func TestStamp(t *testing.T) {
	vcs := func(settings ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{}
		for i := 0; i < len(settings); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return info
	}
	const rev = "abc1234def5678abc1234def5678abc1234def56"
	for _, tc := range []struct {
		name            string
		version, commit string
		info            *debug.BuildInfo
		want            serve.Build
	}{
		{"go build in a checkout", "", "", vcs("vcs.revision", rev, "vcs.modified", "false"), serve.Build{Version: "0.4.0-dev", Commit: "abc1234"}},
		{"uncommitted changes", "", "", vcs("vcs.revision", rev, "vcs.modified", "true"), serve.Build{Version: "0.4.0-dev", Commit: "abc1234-dirty"}},
		{"no VCS information", "", "", vcs(), serve.Build{Version: "0.4.0-dev", Commit: "unknown"}},
		{"no build information", "", "", nil, serve.Build{Version: "0.4.0-dev", Commit: "unknown"}},
		{"stamped", "0.4.0-rc.1", "fedcba9", vcs("vcs.revision", rev), serve.Build{Version: "0.4.0-rc.1", Commit: "fedcba9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stamp(tc.version, tc.commit, "0.4.0-dev\n", tc.info); got != tc.want {
				t.Errorf("stamp = %+v, want %+v", got, tc.want)
			}
		})
	}
}
