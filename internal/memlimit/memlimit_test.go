package memlimit

import (
	"os"
	"strings"
	"testing"
	"testing/fstest"
)

func cgroupFS(files map[string]string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for name, data := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(data)}
	}
	return fsys
}

func TestMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"cgroup v2, in a container", map[string]string{
			"proc/self/cgroup":          "0::/\n",
			"sys/fs/cgroup/memory.max":  "268435456\n",
			"sys/fs/cgroup/cgroup.type": "domain\n",
		}, 256 << 20},
		{"cgroup v2, no limit", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "max\n",
		}, 0},
		{"cgroup v2, the pod's limit above the container's", map[string]string{
			"proc/self/cgroup":                           "0::/kubepods/pod1/ctr\n",
			"sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "max\n",
			"sys/fs/cgroup/kubepods/pod1/memory.max":     "536870912\n",
			"sys/fs/cgroup/kubepods/memory.max":          "max\n",
		}, 512 << 20},
		{"cgroup v2, the lowest of several", map[string]string{
			"proc/self/cgroup":                     "0::/a/b\n",
			"sys/fs/cgroup/a/b/memory.max":         "1073741824\n",
			"sys/fs/cgroup/a/memory.max":           "134217728\n",
			"sys/fs/cgroup/memory.max":             "max\n",
			"sys/fs/cgroup/a/b/memory.swap.max":    "0\n",
			"sys/fs/cgroup/a/b/memory.current":     "1\n",
			"sys/fs/cgroup/a/b/cgroup.controllers": "memory\n",
		}, 128 << 20},
		{"cgroup v1, in a container (host path absent)", map[string]string{
			"proc/self/cgroup":                           "12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "268435456\n",
		}, 256 << 20},
		{"cgroup v1, no limit", map[string]string{
			"proc/self/cgroup":                                         "4:memory:/process_api/x\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":               "9223372036854771712\n",
			"sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes": "9223372036854771712\n",
		}, 0},
		{"cgroup v1, controllers joined", map[string]string{
			"proc/self/cgroup":                           "3:cpuacct,memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "104857600",
		}, 100 << 20},
		{"no /proc", map[string]string{}, 0},
		{"garbage", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "lots\n",
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, file := memoryLimit(cgroupFS(tc.files)); got != tc.want {
				t.Errorf("memoryLimit = %d (from %q), want %d", got, file, tc.want)
			}
		})
	}
}

// TestDerive: MAX_BUFFERED_BYTES and the soft memory limit, from what is
// set and the container's memory limit.
func TestDerive(t *testing.T) {
	limited := func(bytes string) fstest.MapFS {
		return cgroupFS(map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": bytes + "\n"})
	}
	const MiB = 1 << 20
	for _, tc := range []struct {
		name         string
		s            Settings
		root         fstest.MapFS
		buffered     int64
		soft         int64
		softFromSays string
	}{
		{"no limit found", Settings{MaxBody: 10 * MiB}, cgroupFS(nil),
			256 * MiB, (256 + 64 + 32) * MiB, "MAX_BUFFERED_BYTES"},
		{"no limit found, larger bodies", Settings{MaxBody: 512 * MiB}, cgroupFS(nil),
			512 * MiB, (512 + 128 + 32) * MiB, "MAX_BUFFERED_BYTES"},
		{"MAX_BUFFERED_BYTES set, no limit found (a plain docker run)", Settings{MaxBuffered: 64 * MiB, MaxBody: 10 * MiB}, cgroupFS(nil),
			64 * MiB, (64 + 16 + 32) * MiB, "MAX_BUFFERED_BYTES (67108864 bytes)"},
		{"container limit", Settings{MaxBody: 10 * MiB}, limited("268435456"),
			64 * MiB, (64 + 16 + 32) * MiB, "MAX_BUFFERED_BYTES"},
		{"container limit too small for a quarter to hold one body", Settings{MaxBody: 10 * MiB}, limited("20971520"),
			10 * MiB, 20971520 / 10 * 9, "nine tenths of the memory limit in /sys/fs/cgroup/memory.max (20971520 bytes)"},
		{"MAX_BUFFERED_BYTES set, container limit", Settings{MaxBuffered: 64 * MiB, MaxBody: 10 * MiB}, limited("1073741824"),
			64 * MiB, (64 + 16 + 32) * MiB, "MAX_BUFFERED_BYTES"},
		{"MAX_BUFFERED_BYTES set past the container limit", Settings{MaxBuffered: 1024 * MiB, MaxBody: 10 * MiB}, limited("268435456"),
			1024 * MiB, 268435456 / 10 * 9, "nine tenths of the memory limit"},
		{"GOMEMLIMIT set", Settings{MaxBuffered: 64 * MiB, MaxBody: 10 * MiB, GoMemLimit: "100MiB"}, cgroupFS(nil),
			64 * MiB, 0, "GOMEMLIMIT"},
		{"GOMEMLIMIT set, container limit", Settings{MaxBody: 10 * MiB, GoMemLimit: "256MiB"}, limited("268435456"),
			64 * MiB, 0, "GOMEMLIMIT"},
		{"GOMEMLIMIT=off", Settings{MaxBody: 10 * MiB, GoMemLimit: "off"}, limited("268435456"),
			64 * MiB, 0, "GOMEMLIMIT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Derive(tc.s, tc.root)
			if p.Buffered != tc.buffered || p.BufferedFrom == "" {
				t.Errorf("MAX_BUFFERED_BYTES %d (%q), want %d", p.Buffered, p.BufferedFrom, tc.buffered)
			}
			if p.SoftLimit != tc.soft || !strings.Contains(p.SoftLimitFrom, tc.softFromSays) {
				t.Errorf("soft limit %d (%q), want %d (%q)", p.SoftLimit, p.SoftLimitFrom, tc.soft, tc.softFromSays)
			}
		})
	}
}

// On this machine: whatever it finds, it reads without failing.
func TestMemoryLimitHere(t *testing.T) {
	limit, file := memoryLimit(os.DirFS("/"))
	t.Logf("memory limit here: %d bytes (%s)", limit, file)
	if limit < 0 || (limit > 0 && file == "") {
		t.Errorf("memoryLimit = %d, %q", limit, file)
	}
}
