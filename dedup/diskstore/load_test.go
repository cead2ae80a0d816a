package diskstore

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	bolt "go.etcd.io/bbolt"
)

// TestLoad drives the store as a busy async proxy on DATA_DIR does, for
// profiling its write path: enqueuers accept unique 1 KB events as fast as
// the store lets them (the proxy's enqueue gate's width of them at once),
// while a lane's workers take, deliver (a short wait) and complete them.
// It prints the accepted events per second, second by second, the
// enqueue's latency, the write transactions committed and the calls each
// held, and the file's size and free pages. Skipped unless
// DISKSTORE_LOAD is a duration:
//
//	DISKSTORE_LOAD=10s go test -run TestLoad -v -cpuprofile cpu.out ./dedup/diskstore/
//
// DISKSTORE_LOAD_CONNS sets the enqueuers (16), DISKSTORE_LOAD_WORKERS the
// delivery slots (16, 0: no delivery), DISKSTORE_LOAD_PREFILL the events
// written and completed before the run (0), to start from a grown file,
// DISKSTORE_LOAD_BACKLOG the events queued before it (0), whose delivery
// frees their pages, and DISKSTORE_LOAD_DIR the directory of the file (a
// temporary one).
func TestLoad(t *testing.T) {
	dur, err := time.ParseDuration(os.Getenv("DISKSTORE_LOAD"))
	if err != nil {
		t.Skip("DISKSTORE_LOAD is not a duration")
	}
	conns := envInt(t, "DISKSTORE_LOAD_CONNS", 16)
	workers := envInt(t, "DISKSTORE_LOAD_WORKERS", 16)
	prefill := envInt(t, "DISKSTORE_LOAD_PREFILL", 0)
	backlog := envInt(t, "DISKSTORE_LOAD_BACKLOG", 0)
	dir := os.Getenv("DISKSTORE_LOAD_DIR")
	if dir == "" {
		dir = t.TempDir()
	}

	var (
		txMu  sync.Mutex
		calls = map[int]int{} // write transaction → calls of fn it ran
	)
	onWrite := func(tx *bolt.Tx) {
		txMu.Lock()
		calls[tx.ID()]++
		txMu.Unlock()
	}
	var (
		commitMu  sync.Mutex
		commitDur []time.Duration
		slow      []string
		start     time.Time // of the run, once the store is filled
	)
	var (
		d         *Store
		lastWrite time.Duration // bbolt's time writing and syncing, so far
	)
	onCommit := func(writes int, took time.Duration) {
		// Only the committer writes here, and it calls this after each
		// commit: the change in bbolt's write time is this commit's.
		st := d.db.Stats()
		w := st.TxStats.GetWriteTime()
		commitMu.Lock()
		commitDur = append(commitDur, took)
		if took > 20*time.Millisecond {
			slow = append(slow, fmt.Sprintf("%.2fs: %d writes in %s (writing and syncing %s)", time.Since(start).Seconds(), writes,
				took.Round(100*time.Microsecond), (w-lastWrite).Round(100*time.Microsecond)))
		}
		lastWrite = w
		commitMu.Unlock()
	}

	opening := time.Now()
	d, err = Open(Config{Dir: dir, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("opened the file (%d MB) in %s", fileSize(t, dir)>>20, time.Since(opening).Round(time.Millisecond))
	t.Cleanup(func() { _ = d.Close() })
	ctx := context.Background()
	body := []byte(strings.Repeat("x", 1024))
	req := func() dedup.Request {
		return dedup.Request{
			Method: http.MethodPost, RequestURI: "/stripe", Host: "127.0.0.1:8080",
			Header: http.Header{
				"Content-Type": {"application/json"}, "User-Agent": {"Stripe/1.0 (+https://stripe.com/docs/webhooks)"},
				"Content-Length": {"1100"}, "Stripe-Signature": {"t=1724160000,v1=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
			},
			RemoteAddr: "127.0.0.1:41234", Body: body, Route: "/stripe", Namespace: "stripe", TTL: 24 * time.Hour,
		}
	}()
	nonce := strconv.FormatInt(time.Now().UnixNano(), 36)
	if prefill > 0 {
		start := time.Now()
		loadPrefill(t, d, nonce+"_pre", req, prefill, true)
		t.Logf("prefill: %d events written and completed in %s", prefill, time.Since(start).Round(time.Millisecond))
	}
	if backlog > 0 {
		start := time.Now()
		loadPrefill(t, d, nonce+"_backlog", req, backlog, false)
		t.Logf("backlog: %d events queued in %s", backlog, time.Since(start).Round(time.Millisecond))
	}
	size0 := fileSize(t, dir)
	stats0 := d.db.Stats()

	cpu0 := cpuTime()
	seconds := int(dur/time.Second) + 2
	accepted := make([]atomic.Int64, seconds)
	nudge := make(chan struct{}, 1)
	lastWrite = stats0.TxStats.GetWriteTime()
	d.onWrite, d.onCommit = onWrite, onCommit // the run's writes, not the filling's
	start = time.Now()
	deadline := start.Add(dur)
	var (
		wg        sync.WaitGroup
		latMu     sync.Mutex
		latencies []time.Duration
		n         atomic.Int64
		delivered atomic.Int64
	)
	for range conns {
		wg.Go(func() {
			var lat []time.Duration
			for time.Now().Before(deadline) {
				key := "webhook-dedup:stripe:evt_" + nonce + "_" + strconv.FormatInt(n.Add(1), 10)
				t0 := time.Now()
				won, _, err := d.Enqueue(ctx, key, req, 0)
				if err != nil || !won {
					t.Errorf("enqueue %s: %v, %v", key, won, err)
					return
				}
				lat = append(lat, time.Since(t0))
				accepted[int(time.Since(start)/time.Second)].Add(1)
				select {
				case nudge <- struct{}{}:
				default:
				}
			}
			latMu.Lock()
			latencies = append(latencies, lat...)
			latMu.Unlock()
		})
	}
	freePages := make([]int, seconds)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for i := range freePages {
			time.Sleep(time.Until(start.Add(time.Duration(i+1) * time.Second)))
			if time.Now().After(deadline) {
				return
			}
			freePages[i] = d.db.Stats().FreePageN
		}
	}()
	stopDelivery := make(chan struct{})
	var deliveries sync.WaitGroup
	if workers > 0 {
		deliveries.Go(func() {
			slots := make(chan struct{}, workers)
			freed := make(chan struct{}, 1)
			lane := dedup.RouteLane(req.Route)
			for {
				select {
				case <-stopDelivery:
					return
				default:
				}
				free := cap(slots) - len(slots)
				if free == 0 {
					select {
					case <-stopDelivery:
					case <-freed:
					}
					continue
				}
				ds, err := d.Take(ctx, lane, free, 30*time.Second)
				if err != nil {
					t.Errorf("take: %v", err)
					return
				}
				for _, dl := range ds {
					slots <- struct{}{}
					deliveries.Go(func() {
						defer func() {
							<-slots
							select {
							case freed <- struct{}{}:
							default:
							}
						}()
						time.Sleep(300 * time.Microsecond) // the app
						if err := d.Succeed(ctx, dl, dedup.Result{Status: 200}, 24*time.Hour); err != nil {
							t.Errorf("succeed: %v", err)
						}
						delivered.Add(1)
					})
				}
				if len(ds) == free {
					continue
				}
				select {
				case <-stopDelivery:
				case <-nudge:
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopDelivery)
	deliveries.Wait()
	cpu := cpuTime() - cpu0

	slices.Sort(latencies)
	q := func(p float64) time.Duration {
		return latencies[int(p*float64(len(latencies)-1))].Round(10 * time.Microsecond)
	}
	<-sampled
	var perSecond, free []string
	for i := range int(dur / time.Second) {
		perSecond = append(perSecond, strconv.FormatInt(accepted[i].Load(), 10))
		free = append(free, strconv.Itoa(freePages[i]))
	}
	t.Logf("accepted %d in %s: %.0f/s; per second: %s", len(latencies), elapsed.Round(time.Millisecond),
		float64(len(latencies))/elapsed.Seconds(), strings.Join(perSecond, " "))
	t.Logf("free pages at each second: %s", strings.Join(free, " "))
	t.Logf("enqueue latency: p50 %s p90 %s p99 %s p99.9 %s max %s", q(0.5), q(0.9), q(0.99), q(0.999), q(1))
	t.Logf("delivered %d; CPU %s, %.0f µs an accepted event (%.0f µs an event accepted or delivered)", delivered.Load(), cpu.Round(time.Millisecond),
		float64(cpu.Microseconds())/float64(len(latencies)), float64(cpu.Microseconds())/float64(len(latencies)+int(delivered.Load())))

	txMu.Lock()
	total := 0
	var sizes []int
	for _, c := range calls {
		total += c
		sizes = append(sizes, c)
	}
	txMu.Unlock()
	slices.Sort(sizes)
	if len(sizes) > 0 {
		t.Logf("write transactions: %d (%.0f/s), calls %d: %.1f a transaction (p50 %d, p90 %d, max %d)",
			len(sizes), float64(len(sizes))/elapsed.Seconds(), total, float64(total)/float64(len(sizes)),
			sizes[len(sizes)/2], sizes[len(sizes)*9/10], sizes[len(sizes)-1])
	}
	commitMu.Lock()
	slices.Sort(commitDur)
	if n := len(commitDur); n > 0 {
		cq := func(p float64) time.Duration { return commitDur[int(p*float64(n-1))].Round(10 * time.Microsecond) }
		t.Logf("shared commits: %d, took p50 %s p90 %s p99 %s max %s; over 20 ms: %s", n, cq(0.5), cq(0.9), cq(0.99), cq(1), strings.Join(slow, ", "))
	}
	commitMu.Unlock()
	st := d.db.Stats()
	diff := st.Sub(&stats0)
	t.Logf("file %d → %d MB; free pages %d, pending %d, freelist %d KB in use; tx: %d page allocs (%d KB), %d nodes spilled in %s, %d rebalances in %s, %d writes in %s",
		size0>>20, fileSize(t, dir)>>20, st.FreePageN, st.PendingPageN, st.FreelistInuse>>10,
		diff.TxStats.GetPageCount(), diff.TxStats.GetPageAlloc()>>10, diff.TxStats.GetSpill(), diff.TxStats.GetSpillTime().Round(time.Millisecond),
		diff.TxStats.GetRebalance(), diff.TxStats.GetRebalanceTime().Round(time.Millisecond),
		diff.TxStats.GetWrite(), diff.TxStats.GetWriteTime().Round(time.Millisecond))
}

// loadPrefill writes n events as accepted ones, 5,000 a transaction, and
// as delivered ones if completed: the completed records a busy store
// keeps for a day, or a backlog.
func loadPrefill(t *testing.T, d *Store, nonce string, req dedup.Request, n int, completed bool) {
	payload := codec.EncodeRequest(req)
	for i := 0; i < n; {
		err := d.write(func(b diskBuckets) error {
			now := time.Now()
			for j := i; j < min(n, i+5000); j++ {
				k := []byte("webhook-dedup:stripe:evt_" + nonce + strconv.Itoa(j))
				a := codec.Async{State: dedup.Queued, Accepted: now.UnixMilli(), At: now.UnixMilli()}
				if err := b.requests.Put(k, payload); err != nil {
					return err
				}
				if err := b.putAsync(k, req.Route, codec.Async{}, a, 0); err != nil {
					return err
				}
				if !completed {
					continue
				}
				done := a
				done.State, done.At, done.Result, done.Completed = dedup.Completed, 0, dedup.Result{Status: 200}, now.Unix()
				if err := b.requests.Delete(k); err != nil {
					return err
				}
				if err := b.putAsync(k, req.Route, a, done, now.Add(24*time.Hour).UnixMilli()); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		i += 5000
	}
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}

// cpuTime is the user and system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fileSize(t *testing.T, dir string) int64 {
	fi, err := os.Stat(filepath.Join(dir, File))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
