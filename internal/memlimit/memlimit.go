// Package memlimit bounds the process's memory: it finds the memory limit
// of the container it runs in (its cgroup, v1 or v2), sizes
// MAX_BUFFERED_BYTES from it, and derives from both the soft limit the Go
// runtime collects garbage to, so that request bodies cannot take the
// process past either, GOMEMLIMIT or no GOMEMLIMIT.
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

// The numbers of the plan, in this one place.
const (
	// bufferedShare is the share of the memory limit request bodies may
	// take: the rest is the process itself (about 20 MiB), its
	// connections, and the garbage collector's headroom over the live
	// heap, which the soft limit keeps within the memory limit.
	bufferedShare = 4
	// bufferedFallback is the budget when no memory limit is found (no
	// cgroup limit: a bare machine, or a container run without one):
	// room for 25 bodies of the default MAX_BODY_BYTES at once.
	bufferedFallback = 256 << 20
	// unlimited is where cgroup v1 writes "no limit" (about 2^63, page
	// aligned); no real limit comes close to it.
	unlimited = 1 << 60

	// processBaseline is the memory the process takes besides request
	// bodies: about 15 MiB of the Go runtime's at rest (the binary's own
	// code comes on top and is not counted by the runtime), with room for
	// some thousand connections, the store's client and the garbage of
	// everything that is not a body. What else it keeps for long comes on
	// top (the embedded store's records, CACHE_SIZE, the bodies of async
	// deliveries in flight): where that is large and there is no
	// container limit, GOMEMLIMIT says how much the process may take.
	processBaseline = 32 << 20
	// bodyHeadroom is the garbage collector's room over a full budget of
	// bodies, as a divisor of the budget: with a quarter, a burst that
	// fills the budget is collected every quarter budget allocated (body
	// buffers hold no pointers, so each collection is cheap); with none,
	// the collector would run without a pause while the budget is full.
	bodyHeadroom = 4
	// containerShare is the part of the container's memory limit (in
	// tenths) the soft limit may reach: the rest is what the runtime does
	// not count (the binary's code, the kernel's buffers charged to the
	// container) and the soft limit's own overshoot.
	containerShare = 9
)

// Plan is how the process bounds its memory.
type Plan struct {
	// Buffered is MAX_BUFFERED_BYTES in force, and BufferedFrom where it
	// came from (for the start-up log).
	Buffered     int64
	BufferedFrom string
	// SoftLimit is the soft memory limit to give the Go runtime
	// (debug.SetMemoryLimit), and SoftLimitFrom where it came from. Zero:
	// GOMEMLIMIT is set, and the runtime's own limit stands.
	SoftLimit     int64
	SoftLimitFrom string
}

// Settings are what the plan starts from.
type Settings struct {
	// MaxBuffered is MAX_BUFFERED_BYTES; zero: unset, derived.
	MaxBuffered int64
	// MaxBody is MAX_BODY_BYTES: the budget is never less, so that one
	// body of the largest size allowed can always be read.
	MaxBody int64
	// GoMemLimit is GOMEMLIMIT as the environment has it; empty: unset
	// (as the Go runtime reads it: "off" is set, to no limit).
	GoMemLimit string
}

// Derive makes the plan from s and the memory limit of the process's
// cgroup under root (os.DirFS("/")).
func Derive(s Settings, root fs.FS) Plan {
	limit, file := memoryLimit(root)
	return plan(s, limit, file)
}

// plan is Derive once the container's memory limit is known (0: none,
// file: where it was read).
//
// MAX_BUFFERED_BYTES is the value set, or else a quarter of the
// container's memory limit, or bufferedFallback when there is none; never
// less than MaxBody.
//
// The soft limit, unless GOMEMLIMIT is set, is the budget, a quarter of it
// again for the garbage collector, and processBaseline: what the process
// holds with every body it may hold, and room to collect. Without it the
// runtime lets the heap grow to twice what was live at the last
// collection, and a full budget of bodies, grown by doubling, takes the
// process to three times the budget and more. In a container, it is no
// more than nine tenths of the container's limit.
func plan(s Settings, limit int64, file string) Plan {
	var p Plan
	switch {
	case s.MaxBuffered > 0:
		p.Buffered, p.BufferedFrom = s.MaxBuffered, "MAX_BUFFERED_BYTES"
	case limit == 0:
		p.Buffered, p.BufferedFrom = max(bufferedFallback, s.MaxBody), "no memory limit found: the default"
	default:
		p.Buffered = limit / bufferedShare
		p.BufferedFrom = fmt.Sprintf("a quarter of the memory limit in %s (%d bytes)", file, limit)
		if p.Buffered < s.MaxBody {
			p.Buffered, p.BufferedFrom = s.MaxBody, p.BufferedFrom+", raised to MAX_BODY_BYTES"
		}
	}

	if s.GoMemLimit != "" {
		p.SoftLimitFrom = "GOMEMLIMIT, left to the Go runtime"
		return p
	}
	p.SoftLimit = p.Buffered + p.Buffered/bodyHeadroom + processBaseline
	p.SoftLimitFrom = fmt.Sprintf("MAX_BUFFERED_BYTES (%d bytes), a quarter of it again for the garbage collector, and %d MiB for the process itself", p.Buffered, processBaseline>>20)
	if share := limit / 10 * containerShare; limit > 0 && share < p.SoftLimit {
		p.SoftLimit = share
		p.SoftLimitFrom = fmt.Sprintf("nine tenths of the memory limit in %s (%d bytes)", file, limit)
	}
	return p
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
