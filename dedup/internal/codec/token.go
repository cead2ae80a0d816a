package codec

import (
	"crypto/rand"
	"encoding/hex"
)

// TokenLen is the size of a claim token: 128 random bits, so that no two
// claims ever share one.
const TokenLen = 16

// NewToken returns fresh random bits for a claim. crypto/rand.Read never
// fails (it crashes the program if the kernel cannot supply randomness).
func NewToken() [TokenLen]byte {
	var tok [TokenLen]byte
	_, _ = rand.Read(tok[:])
	return tok
}

// ParseToken decodes Claim.Token (32 hex digits). A token that does not
// parse was never issued, so it owns nothing.
func ParseToken(s string) (tok [TokenLen]byte, ok bool) {
	if len(s) != hex.EncodedLen(TokenLen) {
		return tok, false
	}
	_, err := hex.Decode(tok[:], []byte(s))
	return tok, err == nil
}
