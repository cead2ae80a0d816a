package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// A record is stored in Redis as one binary string, kept short because a
// completed record lives for the whole retry window (days) and there is one
// per event. All integers are big-endian.
//
// In flight (25 bytes):
//
//	[0]      tag 0x01 (InFlight)
//	[1:17]   claim token, 16 raw bytes (Claim.Token is its hex form)
//	[17:25]  claim time, unix milliseconds, int64
//
// Completed (12 bytes, or 39 with the whole fingerprint, plus the replayed
// response when there is one):
//
//	[0]      tag 0x03 (fingerprint prefix) or 0x04 (whole fingerprint)
//	[1:3]    upstream status, uint16
//	[3:7]    completion time, unix seconds, uint32 (good until 2106)
//	[7:12]   0x03: the first 5 bytes of the body's SHA-256
//	[7:39]   0x04: the whole SHA-256 (Result.FullFingerprint)
//	[12:] or [39:]  only when ContentType or Body is non-empty:
//	         uvarint len(ContentType), ContentType, then Body to the end
//
// 12 bytes is the most Redis stores in its smallest string allocation (a
// 16-byte object header, a 3-byte length header, the value and a NUL in
// jemalloc's 32-byte class): measured over 100k records, a 12-byte value
// costs 181.5 bytes of used_memory per record, 13 to 28 bytes 197.5, and
// the 43-byte value of earlier versions 213.5. Five bytes of fingerprint
// are plenty to notice a payload that changed under the same event ID (a
// 1 in 2^40 chance of missing one); the whole SHA-256 is kept only when
// asked for (DEDUP_BODY_FINGERPRINT: the admin API's forget finds the
// body's own record by it).
//
// Records written by earlier versions (tag 0x02: status, unix milliseconds
// as int64, the whole SHA-256, then the same optional response) are still
// read.
//
// The token comes first in an in-flight record so the Lua scripts can check
// ownership by comparing a prefix (tag + token).
const (
	tagInFlight      = byte(dedup.InFlight)
	tagCompletedV1   = byte(dedup.Completed) // earlier versions' completed record
	tagCompleted     = byte(0x03)
	tagCompletedFull = byte(0x04)

	InFlightLen = 1 + TokenLen + 8
	// CompletedLen and completedFullLen are the completed records without
	// a response; completedV1Len is an earlier version's.
	CompletedLen     = 1 + 2 + 4 + dedup.FingerprintPrefixLen
	completedFullLen = 1 + 2 + 4 + 32
	completedV1Len   = 1 + 2 + 8 + 32
)

// ErrBadRecord means a key holds a value this package did not write (or
// wrote in a format it no longer reads).
var ErrBadRecord = errors.New("unrecognised record")

// OwnerPrefix is what an in-flight record owned by tok starts with.
func OwnerPrefix(tok [TokenLen]byte) []byte {
	b := make([]byte, 0, 1+TokenLen)
	b = append(b, tagInFlight)
	return append(b, tok[:]...)
}

// EncodeInFlight is the value of a fresh claim.
func EncodeInFlight(tok [TokenLen]byte, since int64) []byte {
	b := make([]byte, 0, InFlightLen)
	b = append(b, tagInFlight)
	b = append(b, tok[:]...)
	return binary.BigEndian.AppendUint64(b, uint64(since))
}

// CheckResult rejects a Result that cannot be stored.
func CheckResult(res dedup.Result) error {
	if res.Status < 0 || res.Status > math.MaxUint16 {
		return fmt.Errorf("status %d out of range", res.Status)
	}
	return nil
}

// EncodeCompleted is the value of a completed record, completed at since
// (unix seconds); res must have passed checkResult.
func EncodeCompleted(res dedup.Result, since int64) []byte {
	n, tag, fp := CompletedLen, tagCompleted, res.Fingerprint[:dedup.FingerprintPrefixLen]
	if res.FullFingerprint {
		n, tag, fp = completedFullLen, tagCompletedFull, res.Fingerprint[:]
	}
	replay := res.ContentType != "" || len(res.Body) > 0
	if replay {
		n += binary.MaxVarintLen64 + len(res.ContentType) + len(res.Body)
	}
	b := make([]byte, 0, n)
	b = append(b, tag)
	b = binary.BigEndian.AppendUint16(b, uint16(res.Status))
	b = binary.BigEndian.AppendUint32(b, uint32(since))
	b = append(b, fp...)
	if replay {
		b = binary.AppendUvarint(b, uint64(len(res.ContentType)))
		b = append(b, res.ContentType...)
		b = append(b, res.Body...)
	}
	return b
}

// DecodeRecord reads a stored value; TTL is left for the caller. The Body
// it returns is a fresh copy.
func DecodeRecord(v string) (dedup.Record, error) {
	if v == "" {
		return dedup.Record{}, fmt.Errorf("%w: empty", ErrBadRecord)
	}
	switch v[0] {
	case tagInFlight:
		if len(v) != InFlightLen {
			return dedup.Record{}, fmt.Errorf("%w: in-flight record of %d bytes, want %d", ErrBadRecord, len(v), InFlightLen)
		}
		since := int64(binary.BigEndian.Uint64([]byte(v[1+TokenLen:])))
		return dedup.Record{State: dedup.InFlight, Since: time.UnixMilli(since)}, nil
	case tagCompleted, tagCompletedFull, tagCompletedV1:
		fixed := CompletedLen
		switch v[0] {
		case tagCompletedFull:
			fixed = completedFullLen
		case tagCompletedV1:
			fixed = completedV1Len
		}
		if len(v) < fixed {
			return dedup.Record{}, fmt.Errorf("%w: completed record of %d bytes, want at least %d", ErrBadRecord, len(v), fixed)
		}
		rec := dedup.Record{State: dedup.Completed}
		rec.Result.Status = int(binary.BigEndian.Uint16([]byte(v[1:3])))
		fp := v[7:fixed]
		if v[0] == tagCompletedV1 {
			rec.Since = time.UnixMilli(int64(binary.BigEndian.Uint64([]byte(v[3:11]))))
			fp = v[11:fixed]
		} else {
			rec.Since = time.Unix(int64(binary.BigEndian.Uint32([]byte(v[3:7]))), 0)
		}
		copy(rec.Result.Fingerprint[:], fp)
		rec.Result.FullFingerprint = len(fp) == 32
		if rest := v[fixed:]; rest != "" {
			n, k := binary.Uvarint([]byte(rest[:min(len(rest), binary.MaxVarintLen64)]))
			if k <= 0 || n > uint64(len(rest)-k) {
				return dedup.Record{}, fmt.Errorf("%w: bad content type length", ErrBadRecord)
			}
			rest = rest[k:]
			rec.Result.ContentType = strings.Clone(rest[:n]) // not a view that pins the whole value
			if body := rest[n:]; body != "" {
				rec.Result.Body = []byte(body)
			}
		}
		return rec, nil
	default:
		return dedup.Record{}, fmt.Errorf("%w: tag 0x%02x", ErrBadRecord, v[0])
	}
}
