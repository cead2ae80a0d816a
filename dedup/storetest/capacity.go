package storetest

import (
	"context"
	"crypto/sha256"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// WriteCompleted writes n completed records to s as the proxy does, from
// 16 goroutines, and returns the keys' shape and the time it took: what
// the stores' record-size tests measure.
func WriteCompleted(t *testing.T, s dedup.Store, n int) (keyOf func(int) string, elapsed time.Duration) {
	t.Helper()
	// Stripe event IDs are "evt_" and 24 characters: with the default
	// KEY_PREFIX and the namespace, keys of 49 bytes.
	keyOf = func(i int) string {
		id := strconv.FormatInt(int64(i), 36)
		return "webhook-dedup:stripe:evt_1NvYwq2eZvKY" + strings.Repeat("0", 12-len(id)) + id
	}
	ctx := context.Background()
	res := dedup.Result{Status: 200, Fingerprint: sha256.Sum256([]byte(`{"id":"evt_1"}`))}
	const workers = 16
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				c, _, err := s.Claim(ctx, keyOf(i), Lease)
				if err == nil {
					err = s.Complete(ctx, c, res, 96*time.Hour)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return keyOf, time.Since(start)
}
