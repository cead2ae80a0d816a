package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// drainFor bounds the wait for a backlog to be delivered.
const drainFor = 2 * time.Minute

// drain waits until a queueing server has delivered its backlog, and
// returns how long that took and the app's count of requests then: until the app has received as many requests
// as the server has queued events. (Its queue's gauge would read empty
// later: the record of a delivery is settled after the app's answer,
// written in batches. And the sender's own count of 2xx answers misses
// the events of the requests wrk cut off at the end of a run, queued but
// never answered to it.)
func drain(ctx context.Context, countURL string, queued func() (int64, error)) (time.Duration, int64, error) {
	start := time.Now()
	var want, got int64
	for {
		n, err := countApp(countURL)
		got = n.Requests
		if err == nil {
			want, err = queued()
		}
		if err == nil && got >= want {
			return time.Since(start), got, nil
		}
		if time.Since(start) > drainFor {
			return 0, 0, fmt.Errorf("waited %s for the app to receive the %d events queued: it has %d (last error: %v)", drainFor, want, got, err)
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// metricValue reads one sample from a /metrics page: name is the metric's
// name and, if it has any, its labels as the page spells them.
func metricValue(url, name string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/metrics has no %s", name)
}

// measured names a process whose usage a run reads.
type measured struct {
	name string
	pid  int // 0: none, read as zero usage
}

func (p *proc) measured() measured { return measured{name: p.name, pid: p.pid()} }

// usages reads each process's usage; a zero pid reads as zero.
func usages(ms ...measured) ([]usage, error) {
	out := make([]usage, len(ms))
	for i, m := range ms {
		if m.pid == 0 {
			continue
		}
		u, err := procUsage(m.pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		out[i] = u
	}
	return out, nil
}

// outcomes reads webhook_dedup_requests_total by outcome from /metrics.
func outcomes(url string) (map[string]int64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]int64{}
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "webhook_dedup_requests_total{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `outcome="`)
		outcome, rest, _ := strings.Cut(rest, `"`)
		_, value, _ := strings.Cut(rest, "} ")
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("/metrics: %q: %w", line, err)
		}
		out[outcome] += int64(n)
	}
	return out, s.Err()
}

// post sends one event and wants 200.
func post(url, body string) error {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return nil
}

func nonce() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
