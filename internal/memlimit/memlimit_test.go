package memlimit

import (
	"os"
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

func TestBufferBudget(t *testing.T) {
	limited := cgroupFS(map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "268435456\n"})
	tiny := cgroupFS(map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "20971520\n"})
	for _, tc := range []struct {
		name         string
		set, maxBody int64
		root         fstest.MapFS
		want         int64
	}{
		{"set", 1 << 30, 10 << 20, limited, 1 << 30},
		{"a quarter of the limit", 0, 10 << 20, limited, 64 << 20},
		{"no limit", 0, 10 << 20, cgroupFS(nil), 256 << 20},
		{"no limit, larger bodies", 0, 512 << 20, cgroupFS(nil), 512 << 20},
		{"a limit too small for one body", 0, 10 << 20, tiny, 10 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, how := BufferBudget(tc.set, tc.maxBody, tc.root); got != tc.want || how == "" {
				t.Errorf("BufferBudget = %d (%q), want %d", got, how, tc.want)
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
