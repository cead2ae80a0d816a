package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
	"sync"
	"time"
)

// defaultTolerance applies when Options.Tolerance is zero.
const defaultTolerance = 5 * time.Minute

// maxMACSize is the largest MAC any scheme sends (HMAC-SHA256).
const maxMACSize = 32

// maxPooledBuf bounds the scratch buffer a pooled HMAC state keeps, so one
// huge signed prefix (a large Twilio form) is not retained forever.
const maxPooledBuf = 64 << 10

// failure is what Verify returns: one of the package's sentinels and a
// short reason naming the header or field, never a secret or the body.
type failure struct {
	kind   error
	reason string
}

func (f *failure) Error() string { return f.kind.Error() + ": " + f.reason }
func (f *failure) Unwrap() error { return f.kind }

func fail(kind error, reason string) error { return &failure{kind: kind, reason: reason} }

// hmacKey computes HMACs under one key. hmac.New allocates several objects
// and Verify runs on every request, so hash states are pooled and reused.
type hmacKey struct {
	pool sync.Pool // of *hmacState
}

type hmacState struct {
	mac hash.Hash
	buf []byte // the signed prefix, then the sum
}

func newHMACKey(newHash func() hash.Hash, key []byte) *hmacKey {
	key = append([]byte(nil), key...)
	k := &hmacKey{}
	k.pool.New = func() any {
		return &hmacState{mac: hmac.New(newHash, key), buf: make([]byte, 0, 256)}
	}
	return k
}

// sum writes HMAC(prefix || body) into out and returns the filled part.
// prefix is copied into the pooled state first: handing the caller's
// slice to the hash (an interface) would make it escape to the heap.
func (k *hmacKey) sum(out *[maxMACSize]byte, prefix, body []byte) []byte {
	s := k.pool.Get().(*hmacState)
	s.mac.Reset()
	s.buf = append(s.buf[:0], prefix...)
	s.mac.Write(s.buf)
	s.mac.Write(body)
	s.buf = s.mac.Sum(s.buf[:0])
	n := copy(out[:], s.buf)
	if cap(s.buf) <= maxPooledBuf {
		k.pool.Put(s)
	}
	return out[:n]
}

// keyring holds one HMAC key per configured secret: any of them may match
// (rotation, several accounts).
type keyring []*hmacKey

func newKeyring(newHash func() hash.Hash, keys [][]byte) keyring {
	r := make(keyring, len(keys))
	for i, key := range keys {
		r[i] = newHMACKey(newHash, key)
	}
	return r
}

// match reports whether sig is the MAC of prefix || body under any key.
func (r keyring) match(prefix, body, sig []byte) bool {
	var out [maxMACSize]byte
	for _, k := range r {
		if hmac.Equal(k.sum(&out, prefix, body), sig) {
			return true
		}
	}
	return false
}

// matchEntry reports whether an entry of list (split on sep) that starts
// with label is the hex MAC of prefix || body under any key: Stripe's v1=
// and Paddle's h1= entries, of which any one may match (a secret roll
// sends one per secret). Entries that do not decode are skipped.
func (r keyring) matchEntry(prefix, body []byte, list, sep, label string) bool {
	var out [maxMACSize]byte
	for _, k := range r {
		mac := k.sum(&out, prefix, body)
		for entry := range strings.SplitSeq(list, sep) {
			encoded, ok := strings.CutPrefix(entry, label)
			if !ok {
				continue
			}
			var buf [maxMACSize]byte
			if sig, ok := hexMAC.decode(&buf, encoded, sha256.Size); ok && hmac.Equal(mac, sig) {
				return true
			}
		}
	}
	return false
}

// encoding is how a scheme writes its MAC in the header.
type encoding uint8

const (
	hexMAC encoding = iota
	base64MAC
)

// encode writes mac as the scheme's header carries it.
func (e encoding) encode(mac []byte) string {
	if e == hexMAC {
		return hex.EncodeToString(mac)
	}
	return base64.StdEncoding.EncodeToString(mac)
}

// strictBase64 rejects non-zero trailing bits; with decode's exact-length
// check, each MAC has one accepted spelling (the one senders write).
var strictBase64 = base64.StdEncoding.Strict()

// decode decodes s, which must encode exactly size bytes, into out. ok is
// false for any other length or a bad character.
func (e encoding) decode(out *[maxMACSize]byte, s string, size int) (mac []byte, ok bool) {
	switch e {
	case hexMAC:
		if len(s) != hex.EncodedLen(size) {
			return nil, false
		}
		n, err := hex.Decode(out[:], []byte(s))
		return out[:n], err == nil
	default:
		if len(s) != strictBase64.EncodedLen(size) {
			return nil, false
		}
		// Decode needs DecodedLen(len(s)) bytes of room, which exceeds size
		// when the last quantum is padded (33 for a 32-byte MAC).
		var tmp [maxMACSize + 2]byte
		n, err := strictBase64.Decode(tmp[:], []byte(s))
		if err != nil || n != size {
			return nil, false
		}
		return out[:copy(out[:], tmp[:n])], true
	}
}

// checkAge returns ErrStale when signed lies more than tolerance before or
// after now. Retries are signed again, so this never rejects a retry.
func checkAge(signed, now time.Time, tolerance time.Duration) error {
	switch d := now.Sub(signed); {
	case d > tolerance:
		return fail(ErrStale, "timestamp too old")
	case d < -tolerance:
		return fail(ErrStale, "timestamp in the future")
	}
	return nil
}

// settings validates the options every scheme shares: at least one secret,
// none empty (surrounding spaces are dropped), and a tolerance that is not
// negative (zero means defaultTolerance).
func settings(scheme string, o Options) (secrets []string, tolerance time.Duration, err error) {
	if len(o.Secrets) == 0 {
		return nil, 0, fmt.Errorf("signature: %s: no secret", scheme)
	}
	secrets = make([]string, len(o.Secrets))
	for i, s := range o.Secrets {
		secrets[i] = strings.TrimSpace(s)
		if secrets[i] == "" {
			return nil, 0, fmt.Errorf("signature: %s: secret %d of %d is empty", scheme, i+1, len(o.Secrets))
		}
	}
	switch {
	case o.Tolerance < 0:
		return nil, 0, fmt.Errorf("signature: %s: negative tolerance %v", scheme, o.Tolerance)
	case o.Tolerance == 0:
		tolerance = defaultTolerance
	default:
		tolerance = o.Tolerance
	}
	return secrets, tolerance, nil
}

// rawKeys uses each secret's bytes as the key (all schemes but Standard
// Webhooks).
func rawKeys(secrets []string) [][]byte {
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		keys[i] = []byte(s)
	}
	return keys
}
