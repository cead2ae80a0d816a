package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// What a quiet disk is, before a run: quietRuns flushed 4 KiB writes in
// a row each done within quietWrite. A run waits at most quietWait.
const (
	quietWrite = 2 * time.Millisecond
	quietRuns  = 5
	quietWait  = 60 * time.Second
)

// waitQuietDisk flushes what earlier runs left for the kernel to write
// back, then waits until the disk under dir flushes a small write
// quickly again, and returns how long that took. On a VM's disk an
// earlier run's writes go on costing for a while after it ends: its dirty
// pages are written back, and the blocks of the files it removed are
// discarded (the file system is mounted with discard). A run whose store
// waits for its writes to reach the disk (DATA_DIR, PostgreSQL with
// fsync, Hookaido's SQLite) would otherwise be measured slower for the
// row that ran before it, not for its own work. It gives up after
// quietWait and says so; the run is measured anyway.
func waitQuietDisk(dir string) (time.Duration, error) {
	start := time.Now()
	syscall.Sync()
	f, err := os.OpenFile(filepath.Join(dir, "quiet-probe"), os.O_CREATE|os.O_WRONLY|os.O_SYNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	page := make([]byte, 4096)
	for quick := 0; quick < quietRuns; {
		if time.Since(start) > quietWait {
			return time.Since(start), fmt.Errorf("the disk did not quieten in %v (a flushed 4 KiB write still took over %v)", quietWait, quietWrite)
		}
		t := time.Now()
		if _, err := f.WriteAt(page, 0); err != nil {
			return 0, err
		}
		if time.Since(t) <= quietWrite {
			quick++
		} else {
			quick = 0
			time.Sleep(10 * time.Millisecond)
		}
	}
	return time.Since(start), nil
}
