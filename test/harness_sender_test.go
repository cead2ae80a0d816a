package test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// sender delivers events the way a provider does: it signs every attempt
// afresh and retries every non-2xx answer (including the proxy's 409 and
// 503) and every connection error, after a short backoff, until an attempt
// is answered 2xx or it runs out of attempts.
type sender struct {
	client *http.Client
	addr   string // the proxy's host:port
	// maxAttempts bounds the attempts of one delivery.
	maxAttempts int
	// backoff is the pause before retry n (n ≥ 1).
	backoff func(n int) time.Duration
	tally   *tally
}

// deliver sends ev until an attempt is answered 2xx and returns that answer.
func (s *sender) deliver(ctx context.Context, p provider, ev event) (answer, error) {
	var last string
	for n := 0; n < s.maxAttempts; n++ {
		if n > 0 {
			// A provider's backoff between its own attempts, not a wait for a server.
			t := time.NewTimer(s.backoff(n))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return answer{}, ctx.Err()
			}
		}
		a, err := p.send(ctx, s.client, s.addr, ev)
		s.tally.add(a, err)
		if err != nil {
			last = err.Error()
			continue
		}
		if a.Status >= 200 && a.Status < 300 {
			return a, nil
		}
		last = a.String()
	}
	return answer{}, fmt.Errorf("%s %s: no 2xx in %d attempts; last: %s", p.Name, ev.ID, s.maxAttempts, last)
}

// tally counts the answers senders received.
type tally struct {
	mu sync.Mutex
	// requests is the number of HTTP attempts.
	requests int
	// outcomes counts answers by X-Webhook-Dedup value ("" when absent).
	outcomes map[string]int
	// statuses counts answers by status code.
	statuses map[int]int
	// errors counts attempts that got no answer.
	errors int
}

func newTally() *tally {
	return &tally{outcomes: map[string]int{}, statuses: map[int]int{}}
}

func (t *tally) add(a answer, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.requests++
	if err != nil {
		t.errors++
		return
	}
	t.outcomes[a.Dedup()]++
	t.statuses[a.Status]++
}
