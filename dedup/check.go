package dedup

import (
	"context"
	"fmt"
	"time"
)

// checkClaim checks what every store's Claim checks first: ctx still live
// and a positive lease. Its error is Claim's own, naming the key.
func checkClaim(ctx context.Context, key string, lease time.Duration) error {
	err := ctx.Err()
	if err == nil {
		err = checkDuration("lease", lease)
	}
	if err != nil {
		return fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	return nil
}

// checkOwned checks what every operation on a held claim (a release, a
// delivery's settling) checks first: ctx still live and a well formed
// token (a malformed one owns nothing). It returns the token, and errors
// naming op and the key.
func checkOwned(ctx context.Context, op, key, token string) ([tokenLen]byte, error) {
	if err := ctx.Err(); err != nil {
		return [tokenLen]byte{}, fmt.Errorf("dedup: %s %s: %w", op, key, err)
	}
	tok, ok := parseToken(token)
	if !ok {
		return tok, fmt.Errorf("dedup: %s %s: %w", op, key, ErrNotOwner)
	}
	return tok, nil
}

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
