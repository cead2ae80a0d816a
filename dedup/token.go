package dedup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// tokenLen is the size of a claim token: 128 random bits, so that no two
// claims ever share one.
const tokenLen = 16

// newToken returns fresh random bits for a claim. crypto/rand.Read never
// fails (it crashes the program if the kernel cannot supply randomness).
func newToken() [tokenLen]byte {
	var tok [tokenLen]byte
	_, _ = rand.Read(tok[:])
	return tok
}

// parseToken decodes Claim.Token (32 hex digits). A token that does not
// parse was never issued, so it owns nothing.
func parseToken(s string) (tok [tokenLen]byte, ok bool) {
	if len(s) != hex.EncodedLen(tokenLen) {
		return tok, false
	}
	_, err := hex.Decode(tok[:], []byte(s))
	return tok, err == nil
}

// checkDuration rejects leases and TTLs that would make a record that
// never exists (Redis refuses PX 0 or less).
func checkDuration(what string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%s must be positive, got %s", what, d)
	}
	return nil
}

// sleep waits d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// millis is d in whole milliseconds, rounded up so that a positive
// duration never becomes 0 (PX 0 is an error in Redis).
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
