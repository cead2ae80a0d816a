// Package memlimit finds the memory limit of the container this process
// runs in (its cgroup, v1 or v2) and sizes MAX_BUFFERED_BYTES from it, so
// that request bodies cannot take the process past the limit.
package memlimit

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// Sizing of MAX_BUFFERED_BYTES when it is not set.
const (
	// bufferedShare is the share of the memory limit request bodies may
	// take: the rest is the process itself (about 20 MiB), its
	// connections, the garbage collector's headroom over the live heap,
	// and the copy made while a body's buffer grows.
	bufferedShare = 4
	// bufferedFallback is the budget when no memory limit is found (no
	// cgroup limit: a bare machine, or a container run without one):
	// room for 25 bodies of the default MAX_BODY_BYTES at once.
	bufferedFallback = 256 << 20
	// unlimited is where cgroup v1 writes "no limit" (about 2^63, page
	// aligned); no real limit comes close to it.
	unlimited = 1 << 60
)

// BufferBudget is MAX_BUFFERED_BYTES: the value set, or else a quarter of
// the container's memory limit, or bufferedFallback when there is none;
// never less than maxBody, so that one body of the largest size allowed
// can always be read. how says which, for the start-up log line.
func BufferBudget(set, maxBody int64, root fs.FS) (budget int64, how string) {
	if set > 0 {
		return set, "MAX_BUFFERED_BYTES"
	}
	limit, file := memoryLimit(root)
	if limit == 0 {
		return max(bufferedFallback, maxBody), "no memory limit found: the default"
	}
	budget = limit / bufferedShare
	how = fmt.Sprintf("a quarter of the memory limit in %s (%d bytes)", file, limit)
	if budget < maxBody {
		return maxBody, how + ", raised to MAX_BODY_BYTES"
	}
	return budget, how
}

// memoryLimit is the memory limit of the process's cgroup, or 0 when it
// has none: the lowest limit set on its cgroup or any cgroup above it (a
// Kubernetes container's own, or its pod's), under cgroup v2 (memory.max)
// or v1 (memory.limit_in_bytes). Inside a container the cgroup file
// system shows the container's cgroup as its root, so the walk up from the
// path /proc/self/cgroup names ends there. file is where the limit was
// read. root is the file system's root (os.DirFS("/")).
func memoryLimit(root fs.FS) (limit int64, file string) {
	cgroups, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return 0, ""
	}
	sc := bufio.NewScanner(bytes.NewReader(cgroups))
	for sc.Scan() {
		// hierarchy-ID:controllers:path; v2's line is "0::path".
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, name string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, name = "sys/fs/cgroup", "memory.max"
		case hasController(parts[1], "memory"):
			dir, name = "sys/fs/cgroup/memory", "memory.limit_in_bytes"
		default:
			continue
		}
		if l, f := lowestLimit(root, dir, parts[2], name); l > 0 && (limit == 0 || l < limit) {
			limit, file = l, f
		}
	}
	return limit, file
}

func hasController(list, want string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == want {
			return true
		}
	}
	return false
}

// lowestLimit reads name in dir/cgroup and in every directory above it up
// to dir, and returns the lowest limit found (0: none).
func lowestLimit(root fs.FS, dir, cgroup, name string) (limit int64, file string) {
	p := path.Clean("/" + cgroup)
	for {
		f := path.Join(dir, p, name)
		if l := readLimit(root, f); l > 0 && (limit == 0 || l < limit) {
			limit, file = l, "/"+f
		}
		if p == "/" {
			return limit, file
		}
		p = path.Dir(p)
	}
}

// readLimit reads one limit file: a byte count, or "max" (v2) or a huge
// number (v1) for none, which is 0 here, as is a file that is missing.
func readLimit(root fs.FS, file string) int64 {
	b, err := fs.ReadFile(root, file)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= unlimited {
		return 0
	}
	return n
}
