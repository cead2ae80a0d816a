package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The paced sender: wrk sends each connection's next request as soon as
// the previous one is answered (a closed loop), so it measures how much an
// async proxy accepts, with its deliveries squeezed in between. To see
// whether deliveries keep up with an intake the proxy can bear, `bench
// pace` offers requests at a fixed rate instead: request i is sent at
// start + i/rate, on the first of its connections that is free. It runs
// as a process of its own, placed on the load generator's CPU as wrk is.

// paceResult is one paced run: the requests due within its window, from
// the first one's time to the last answer (later than the window's end
// when the server falls behind). Latencies are in microseconds, from the
// time each request was due, so a request that waited for a free
// connection counts its wait.
type paceResult struct {
	Rate       float64 `json:"rate"`        // offered, per second
	DurationUS int64   `json:"duration_us"` // to the last answer
	Sent       int64   `json:"sent"`
	Accepted   int64   `json:"accepted"` // 2xx answers
	Status     int64   `json:"status"`   // other answers
	Errors     int64   `json:"errors"`   // no answer
	// Late counts requests sent more than lateAfter after they were due:
	// every connection was waiting for an answer.
	Late int64 `json:"late"`
	// Delivered is how many requests the app received meanwhile.
	Delivered int64 `json:"delivered"`
	P50       int64 `json:"p50"`
	P99       int64 `json:"p99"`
	// Drained is how long the backlog took to be delivered after the
	// window; the bench fills it in.
	Drained time.Duration `json:"drained_ns,omitempty"`
}

// lateAfter is how far past its time a request counts as late.
const lateAfter = 10 * time.Millisecond

func (p paceResult) seconds() float64 { return float64(p.DurationUS) / 1e6 }

func (p paceResult) acceptedRate() float64 { return float64(p.Accepted) / p.seconds() }

func (p paceResult) deliveredRate() float64 { return float64(p.Delivered) / p.seconds() }

// runPace is `bench pace`: it prints a BENCHRESULT line of JSON.
func runPace(args []string) error {
	fs := flag.NewFlagSet("pace", flag.ContinueOnError)
	url := fs.String("url", "", "where to post the events")
	countURL := fs.String("count", "", "the upstream's count, read before the first request and after the last answer")
	rate := fs.Float64("rate", 0, "requests per second")
	d := fs.Duration("d", 5*time.Second, "the window")
	conns := fs.Int("c", 32, "connections")
	nonce := fs.String("nonce", "", "makes this run's event IDs its own")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" || *countURL == "" || *rate <= 0 || *conns < 1 {
		return fmt.Errorf("pace: -url, -count, a positive -rate and -c are required")
	}
	r, err := pace(*url, *countURL, *rate, *d, *conns, *nonce)
	if err != nil {
		return err
	}
	line, _ := json.Marshal(r)
	fmt.Printf("BENCHRESULT %s\n", line)
	return nil
}

// paceWorker is what one connection's requests got.
type paceWorker struct {
	accepted, status, errors, late int64
	latencies                      []int64 // µs
}

func pace(url, countURL string, rate float64, d time.Duration, conns int, nonce string) (paceResult, error) {
	res := paceResult{Rate: rate}
	client := &http.Client{
		Transport: &http.Transport{MaxConnsPerHost: conns, MaxIdleConnsPerHost: conns, DisableCompression: true},
		Timeout:   5 * time.Second, // wrk's --timeout
	}
	total := int64(rate * d.Seconds())
	before, err := countApp(countURL)
	if err != nil {
		return res, err
	}
	start := time.Now()
	var next atomic.Int64
	workers := make([]paceWorker, conns)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func(pw *paceWorker) {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= total {
					return
				}
				due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
				time.Sleep(time.Until(due))
				if time.Since(due) > lateAfter {
					pw.late++
				}
				status, err := postEvent(client, url, stripeHead+"evt_"+nonce+"_"+strconv.FormatInt(i, 10)+stripeTail)
				switch {
				case err != nil:
					pw.errors++
					continue
				case status >= 200 && status < 400:
					pw.accepted++
				default:
					pw.status++
				}
				pw.latencies = append(pw.latencies, time.Since(due).Microseconds())
			}
		}(&workers[w])
	}
	wg.Wait()
	res.DurationUS = time.Since(start).Microseconds()
	after, err := countApp(countURL)
	if err != nil {
		return res, err
	}
	res.Delivered = after.Requests - before.Requests
	var latencies []int64
	for _, w := range workers {
		res.Accepted += w.accepted
		res.Status += w.status
		res.Errors += w.errors
		res.Late += w.late
		latencies = append(latencies, w.latencies...)
	}
	res.Sent = res.Accepted + res.Status + res.Errors
	slices.Sort(latencies)
	res.P50, res.P99 = percentile(latencies, 50), percentile(latencies, 99)
	return res, nil
}

// postEvent posts a Stripe-style event as wrk's script does and returns
// the answer's status.
func postEvent(client *http.Client, url, body string) (int, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["User-Agent"] = []string{"Stripe/1.0 (+https://stripe.com/docs/webhooks)"}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

// percentile of sorted values; 0 when there are none.
func percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p/100))]
}

// runPacer runs `bench pace` placed with place, and reads its result.
func runPacer(self string, place func(...string) []string, url, countURL string, rate float64, d time.Duration, conns int) (paceResult, error) {
	argv := place(self, "pace", "-url", url, "-count", countURL, "-rate", strconv.FormatFloat(rate, 'f', 1, 64),
		"-d", d.String(), "-c", strconv.Itoa(conns), "-nonce", nonce())
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return paceResult{}, fmt.Errorf("%s: %w\n%s%s", strings.Join(argv, " "), err, out, stderr.Bytes())
	}
	s := bufio.NewScanner(bytes.NewReader(out))
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "BENCHRESULT "); ok {
			var r paceResult
			if err := json.Unmarshal([]byte(v), &r); err != nil {
				return r, fmt.Errorf("pace result %q: %w", v, err)
			}
			return r, nil
		}
	}
	return paceResult{}, fmt.Errorf("bench pace printed no result:\n%s", out)
}
