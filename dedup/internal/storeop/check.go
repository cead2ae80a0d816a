package storeop

import (
	"context"
	"fmt"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/internal/codec"
	"time"
)

// CheckClaim checks what every store's Claim checks first: ctx still live
// and a positive lease. Its error is Claim's own, naming the key.
func CheckClaim(ctx context.Context, key string, lease time.Duration) error {
	err := ctx.Err()
	if err == nil {
		err = CheckDuration("lease", lease)
	}
	if err != nil {
		return fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	return nil
}

// CheckOwned checks what every operation on a held claim (a release, a
// delivery's settling) checks first: ctx still live and a well formed
// token (a malformed one owns nothing). It returns the token, and errors
// naming op and the key.
func CheckOwned(ctx context.Context, op, key, token string) ([codec.TokenLen]byte, error) {
	if err := ctx.Err(); err != nil {
		return [codec.TokenLen]byte{}, fmt.Errorf("dedup: %s %s: %w", op, key, err)
	}
	tok, ok := codec.ParseToken(token)
	if !ok {
		return tok, fmt.Errorf("dedup: %s %s: %w", op, key, dedup.ErrNotOwner)
	}
	return tok, nil
}

// CheckComplete checks what every store's Complete checks before it
// writes: ctx still live, a positive ttl, a result that fits, and a well
// formed token (a malformed one owns nothing). It returns the token, and
// errors as Complete's own, naming the key.
func CheckComplete(ctx context.Context, c dedup.Claim, res dedup.Result, ttl time.Duration) ([codec.TokenLen]byte, error) {
	err := ctx.Err()
	if err == nil {
		err = CheckDuration("ttl", ttl)
	}
	if err == nil {
		err = codec.CheckResult(res)
	}
	tok, ok := codec.ParseToken(c.Token)
	if err == nil && !ok {
		err = dedup.ErrNotOwner
	}
	if err != nil {
		return tok, fmt.Errorf("dedup: complete %s: %w", c.Key, err)
	}
	return tok, nil
}

// CheckTake checks what every queue's Take checks first, and reports
// whether there is anything to take: not when ctx is over or the lease is
// not positive (an error), nor when n asks for nothing (no error).
func CheckTake(ctx context.Context, n int, lease time.Duration) (bool, error) {
	err := ctx.Err()
	if err == nil {
		err = CheckDuration("lease", lease)
	}
	if err != nil {
		return false, fmt.Errorf("dedup: take: %w", err)
	}
	return n > 0, nil
}

// CheckExtend checks what every queue's Extend checks first: ctx still
// live, a positive lease and a well formed token. It returns the token,
// and errors naming the key.
func CheckExtend(ctx context.Context, d dedup.Delivery, lease time.Duration) ([codec.TokenLen]byte, error) {
	if err := CheckDuration("lease", lease); err != nil {
		return [codec.TokenLen]byte{}, fmt.Errorf("dedup: extend %s: %w", d.Claim.Key, err)
	}
	return CheckOwned(ctx, "extend", d.Claim.Key, d.Claim.Token)
}

// CheckDuration rejects leases and TTLs that would make a record that
// never exists (Redis refuses PX 0 or less).
func CheckDuration(what string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%s must be positive, got %s", what, d)
	}
	return nil
}

// Sleep waits d or until ctx ends, and reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Millis is d in whole milliseconds, rounded up so that a positive
// duration never becomes 0 (PX 0 is an error in Redis).
func Millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// UnreadableKeep is how long a store keeps, as a dead letter, an event
// whose stored request it cannot read (written by something else, or
// damaged): the default DEAD_LETTER_TTL, as Take has no other.
const UnreadableKeep = 168 * time.Hour

// completeRetryFor bounds Complete's retries: long enough to ride out a
// failover, short enough that the sender, who waits for the answer, is
// not kept long.
const completeRetryFor = 5 * time.Second

// Retry calls op until it succeeds or fails for good (a failure transient
// does not accept), with growing pauses, for at most completeRetryFor from
// the first call and while ctx lasts. op bounds each attempt itself. When
// time runs out it returns the failure that made it retry, with the
// context's error.
func Retry(ctx context.Context, transient func(error) bool, op func(ctx context.Context) error) error {
	start := time.Now()
	err := op(ctx)
	if err == nil || !transient(err) {
		return err
	}
	// Only a first attempt that failed pays for the retries' deadline (a
	// timer and a context on every completion, otherwise).
	ctx, cancel := context.WithDeadline(ctx, start.Add(completeRetryFor))
	defer cancel()
	last := err
	pause := 20 * time.Millisecond
	for {
		if !Sleep(ctx, pause) {
			return fmt.Errorf("%w; gave up: %w", last, ctx.Err())
		}
		err := op(ctx)
		if err == nil {
			return nil
		}
		if over := Expired(ctx); over != nil {
			// Cut short: the cause is the failure before.
			return fmt.Errorf("%w; gave up: %w", last, over)
		}
		if !transient(err) {
			return err
		}
		last = err
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// Expired is ctx's error, or context.DeadlineExceeded once its deadline
// has passed: a read cut by the deadline can fail before the context's own
// timer has fired, while ctx.Err() is still nil.
func Expired(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// Every calls f at each interval until f reports it is done or ctx ends.
func Every(ctx context.Context, interval time.Duration, f func() (done bool)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if f() {
			return
		}
	}
}
