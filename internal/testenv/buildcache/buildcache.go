// Package buildcache keeps executables the tests build from sources that
// do not change between runs (a tool at a pinned version, a past release
// from git history) in the user's cache directory, so that a second run
// finds them instead of building them again. The Go build cache does not
// do this: it keeps compiled packages, not linked executables, and not at
// all those of a tree extracted to a new temporary directory each run.
package buildcache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// Binary returns the path of the executable name cached under key, and on
// a miss builds it first: build writes it to out. key must name everything
// the executable is built from (a version, a commit); the toolchain that
// built this test binary is added to it. A failed build caches nothing.
// Concurrent callers, in one process or several, may both build; the last
// rename wins and both results are the same executable.
func Binary(name, key string, build func(out string) error) (string, error) {
	root, err := os.UserCacheDir()
	if err != nil {
		// No home directory (a bare CI container): the temporary
		// directory still outlives the run.
		root = os.TempDir()
	}
	sum := sha256.Sum256([]byte(key + "\x00" + runtime.Version() + "\x00" + runtime.GOOS + "/" + runtime.GOARCH))
	dir := filepath.Join(root, "webhook-dedup-test", name+"-"+hex.EncodeToString(sum[:8]))
	path := filepath.Join(dir, name)
	if info, err := os.Stat(path); err == nil && info.Mode().IsRegular() {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("buildcache: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", fmt.Errorf("buildcache: %w", err)
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, name)
	if err := build(out); err != nil {
		return "", err
	}
	// The rename makes the executable appear whole or not at all: a run
	// killed mid-build leaves only its build- directory behind.
	if err := os.Rename(out, path); err != nil {
		return "", fmt.Errorf("buildcache: %w", err)
	}
	return path, nil
}
