package delivery

import "time"

// Schedule is how long the retries of an event failing every attempt run
// before it is dead-lettered, with full jitter: at the longest (every wait
// its ceiling) and on average (half of it), both capped by maxAge. With
// maxAttempts zero (no cap), both are maxAge.
func Schedule(initial, maxInterval, maxAge time.Duration, maxAttempts int) (longest, average time.Duration) {
	if maxAttempts <= 0 {
		return maxAge, maxAge
	}
	var total time.Duration
	ceiling := initial
	for range maxAttempts - 1 { // the waits between the attempts
		total += min(ceiling, maxInterval)
		if total >= maxAge {
			return maxAge, min(total/2, maxAge)
		}
		if ceiling < maxInterval {
			ceiling *= 2
		}
	}
	return min(total, maxAge), min(total/2, maxAge)
}
