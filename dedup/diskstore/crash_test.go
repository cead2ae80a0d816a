package diskstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	bolt "go.etcd.io/bbolt"
)

// TestKilledMidWrite kills a process that enqueues, takes and completes
// events as fast as it can, at a random moment, again and again: each time
// the file opens, bbolt's consistency check finds nothing wrong, and every
// event whose Enqueue returned is there. A kill loses nothing the kernel
// was given, so this checks what the store answers and when (never before
// the commit), and that a commit cut off halfway leaves a valid file; the
// fsyncs that keep it so across a power cut are bbolt's.
func TestKilledMidWrite(t *testing.T) {
	if dir := os.Getenv("DISKSTORE_CRASH_DIR"); dir != "" {
		crashChild(t, dir, os.Getenv("DISKSTORE_CRASH_LOG"))
		return
	}
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	dir := t.TempDir()
	logPath := filepath.Join(t.TempDir(), "acked")
	for round := range 6 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKilledMidWrite$")
		cmd.Env = append(os.Environ(), "DISKSTORE_CRASH_DIR="+dir, "DISKSTORE_CRASH_LOG="+logPath)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Until the child has written (the first round creates the
		// file), then a while longer, different each round.
		before := acked(t, logPath)
		for deadline := time.Now().Add(storetest.LoadMargin); acked(t, logPath) == before; {
			if time.Now().After(deadline) {
				t.Fatal("the child acknowledged no enqueue")
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Duration(20+rand.IntN(200)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("round %d: the child ended with %v, not killed", round, err)
		}
		checkAfterKill(t, dir, logPath, round)
	}
}

// acked is the number of keys in the log of acknowledged enqueues.
func acked(t *testing.T, path string) int {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "\n")
}

// checkAfterKill opens the file the killed child left, checks it, and
// looks up every key whose enqueue the child saw succeed.
func checkAfterKill(t *testing.T, dir, logPath string, round int) {
	t.Helper()
	d, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatalf("round %d: open after the kill: %v", round, err)
	}
	defer func() { _ = d.Close() }()
	var errs []error
	_ = d.db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() { // to the end: the check runs until then
			errs = append(errs, err)
		}
		return nil
	})
	if len(errs) > 0 {
		t.Fatalf("round %d: the file after the kill: %v", round, errors.Join(errs...))
	}
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); n++ {
		rec, err := d.Lookup(context.Background(), sc.Text())
		if err != nil {
			t.Fatalf("round %d: %s was acknowledged, then: %v", round, sc.Text(), err)
		}
		if rec.State != dedup.Queued && rec.State != dedup.Delivering && rec.State != dedup.Completed {
			t.Fatalf("round %d: %s was acknowledged, and is %v", round, sc.Text(), rec.State)
		}
	}
	t.Logf("round %d: %d acknowledged enqueues, all there", round, n)
}

// crashChild is the process that is killed: 16 goroutines enqueue, and
// log each key once its Enqueue has returned; a lane's workers take and
// complete the events meanwhile, so that every kind of write is under way
// when the kill comes.
func crashChild(t *testing.T, dir, logPath string) {
	d, err := Open(Config{Dir: dir, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := dedup.Request{Method: "POST", RequestURI: "/stripe", Body: []byte(strings.Repeat("x", 1024)), Route: "/stripe"}
	prefix := fmt.Sprintf("crash:%d:", os.Getpid())
	var mu sync.Mutex
	for g := range 16 {
		go func() {
			for i := 0; ; i++ {
				key := fmt.Sprintf("%s%d:%d", prefix, g, i)
				if won, _, err := d.Enqueue(ctx, key, req, 0); err != nil || !won {
					panic(fmt.Sprint("enqueue: ", won, err))
				}
				mu.Lock()
				_, err := log.WriteString(key + "\n")
				mu.Unlock()
				if err != nil {
					panic(err)
				}
			}
		}()
	}
	for range 4 {
		go func() {
			for {
				ds, err := d.Take(ctx, dedup.RouteLane("/stripe"), 8, time.Minute)
				if err != nil {
					panic(err)
				}
				for _, dl := range ds {
					if err := d.Succeed(ctx, dl, dedup.Result{Status: 200}, time.Hour); err != nil {
						panic(err)
					}
				}
				if len(ds) == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	select {} // until killed
}
