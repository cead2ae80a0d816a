package dedup

import (
	"context"
	"fmt"
	"time"
)

// checkComplete checks what every store's Complete checks before it
// writes: ctx still live, a positive ttl, a result that fits, and a well
// formed token (a malformed one owns nothing). It returns the token, and
// errors as Complete's own, naming the key.
func checkComplete(ctx context.Context, c Claim, res Result, ttl time.Duration) ([tokenLen]byte, error) {
	err := ctx.Err()
	if err == nil {
		err = checkDuration("ttl", ttl)
	}
	if err == nil {
		err = checkResult(res)
	}
	tok, ok := parseToken(c.Token)
	if err == nil && !ok {
		err = ErrNotOwner
	}
	if err != nil {
		return tok, fmt.Errorf("dedup: complete %s: %w", c.Key, err)
	}
	return tok, nil
}

// checkTake checks what every queue's Take checks first, and reports
// whether there is anything to take: not when ctx is over or the lease is
// not positive (an error), nor when n asks for nothing (no error).
func checkTake(ctx context.Context, n int, lease time.Duration) (bool, error) {
	err := ctx.Err()
	if err == nil {
		err = checkDuration("lease", lease)
	}
	if err != nil {
		return false, fmt.Errorf("dedup: take: %w", err)
	}
	return n > 0, nil
}
