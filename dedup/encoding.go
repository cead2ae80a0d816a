package dedup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
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
// Completed (43 bytes, plus the replayed response when there is one):
//
//	[0]      tag 0x02 (Completed)
//	[1:3]    upstream status, uint16
//	[3:11]   completion time, unix milliseconds, int64
//	[11:43]  SHA-256 fingerprint of the request body, 32 raw bytes
//	[43:]    only when ContentType or Body is non-empty:
//	         uvarint len(ContentType), ContentType, then Body to the end
//
// The token comes first in an in-flight record so the Lua scripts can check
// ownership by comparing a prefix (tag + token). 43 bytes stays within
// Redis's 44-byte limit for the compact embstr encoding.
const (
	tagInFlight  = byte(InFlight)
	tagCompleted = byte(Completed)

	inFlightLen  = 1 + tokenLen + 8
	completedLen = 1 + 2 + 8 + 32
)

// errBadRecord means a key holds a value this package did not write (or
// wrote in a format it no longer reads).
var errBadRecord = errors.New("unrecognised record")

// ownerPrefix is what an in-flight record owned by tok starts with.
func ownerPrefix(tok [tokenLen]byte) []byte {
	b := make([]byte, 0, 1+tokenLen)
	b = append(b, tagInFlight)
	return append(b, tok[:]...)
}

// encodeInFlight is the value of a fresh claim.
func encodeInFlight(tok [tokenLen]byte, since int64) []byte {
	b := make([]byte, 0, inFlightLen)
	b = append(b, tagInFlight)
	b = append(b, tok[:]...)
	return binary.BigEndian.AppendUint64(b, uint64(since))
}

// checkResult rejects a Result that cannot be stored.
func checkResult(res Result) error {
	if res.Status < 0 || res.Status > math.MaxUint16 {
		return fmt.Errorf("status %d out of range", res.Status)
	}
	return nil
}

// encodeCompleted is the value of a completed record; res must have passed
// checkResult.
func encodeCompleted(res Result, since int64) []byte {
	n := completedLen
	replay := res.ContentType != "" || len(res.Body) > 0
	if replay {
		n += binary.MaxVarintLen64 + len(res.ContentType) + len(res.Body)
	}
	b := make([]byte, 0, n)
	b = append(b, tagCompleted)
	b = binary.BigEndian.AppendUint16(b, uint16(res.Status))
	b = binary.BigEndian.AppendUint64(b, uint64(since))
	b = append(b, res.Fingerprint[:]...)
	if replay {
		b = binary.AppendUvarint(b, uint64(len(res.ContentType)))
		b = append(b, res.ContentType...)
		b = append(b, res.Body...)
	}
	return b
}

// decodeRecord reads a stored value; TTL is left for the caller. The Body
// it returns is a fresh copy.
func decodeRecord(v string) (Record, error) {
	if v == "" {
		return Record{}, fmt.Errorf("%w: empty", errBadRecord)
	}
	switch v[0] {
	case tagInFlight:
		if len(v) != inFlightLen {
			return Record{}, fmt.Errorf("%w: in-flight record of %d bytes, want %d", errBadRecord, len(v), inFlightLen)
		}
		since := int64(binary.BigEndian.Uint64([]byte(v[1+tokenLen:])))
		return Record{State: InFlight, Since: time.UnixMilli(since)}, nil
	case tagCompleted:
		if len(v) < completedLen {
			return Record{}, fmt.Errorf("%w: completed record of %d bytes, want at least %d", errBadRecord, len(v), completedLen)
		}
		rec := Record{State: Completed}
		rec.Result.Status = int(binary.BigEndian.Uint16([]byte(v[1:3])))
		rec.Since = time.UnixMilli(int64(binary.BigEndian.Uint64([]byte(v[3:11]))))
		copy(rec.Result.Fingerprint[:], v[11:completedLen])
		if rest := v[completedLen:]; rest != "" {
			n, k := binary.Uvarint([]byte(rest[:min(len(rest), binary.MaxVarintLen64)]))
			if k <= 0 || n > uint64(len(rest)-k) {
				return Record{}, fmt.Errorf("%w: bad content type length", errBadRecord)
			}
			rest = rest[k:]
			rec.Result.ContentType = strings.Clone(rest[:n]) // not a view that pins the whole value
			if body := rest[n:]; body != "" {
				rec.Result.Body = []byte(body)
			}
		}
		return rec, nil
	default:
		return Record{}, fmt.Errorf("%w: tag 0x%02x", errBadRecord, v[0])
	}
}
