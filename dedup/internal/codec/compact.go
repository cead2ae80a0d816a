package codec

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// The compact completed record is the 12-byte form's facts packed into one
// 64-bit integer, written as its decimal digits, for Redis: Redis keeps a
// string that reads as a 64-bit integer in its 16-byte object header
// alone, where the 12-byte form takes a 32-byte allocation, so each record
// costs 16 bytes less (docs/performance.md). The integer, as an unsigned
// 64-bit number:
//
//	bits 0-39   the first 5 bytes of the body's SHA-256 (as in the 12-byte form)
//	bits 40-63  (status - 200) + compactStatuses × (completion time, unix
//	            seconds, modulo compactWindow)
//
// and then read as signed (strconv.FormatInt of int64(u)): the top bit
// set gives a negative number, which Redis keeps as an integer too.
//
// Its limits are the price of fitting in 64 bits: only the statuses 200
// to 204 (the answers nearly every app gives; any other 2xx takes the
// 12-byte form), and the completion time only modulo about 38.8 days, so
// it is found again from the reader's clock: the record is younger than
// its TTL, which must be at most CompactMaxTTL. A record with a replayed
// response or the whole fingerprint has no compact form.
//
// The first byte tells the forms apart: '-' or a digit here, a tag from
// 0x01 to 0x04 in the binary forms.
const (
	compactStatusFirst = 200
	compactStatuses    = 5
	// compactWindow is how many seconds the completion time goes round
	// in: the most that fits beside the statuses in 24 bits.
	compactWindow = (1 << 24) / compactStatuses
	// CompactMaxTTL is the longest TTL a compact record may have (Adyen's
	// 31 days fit). The reader takes a record for at most a day older
	// than that (its clock may run ahead of the writer's), and what is
	// left of the window, compactAhead (about 5.8 days), is how far ahead
	// of the reader's clock the writer's may be.
	CompactMaxTTL = 32 * 24 * time.Hour
	compactAhead  = compactWindow - int64((CompactMaxTTL+24*time.Hour)/time.Second)
	fpBits        = 8 * dedup.FingerprintPrefixLen
)

// EncodeCompact is the compact form of a completed record holding res,
// completed at since (unix seconds) and kept for ttl, and true; or nil and
// false when res or ttl have none (see the form's limits above). res must
// have passed CheckResult.
func EncodeCompact(res dedup.Result, since int64, ttl time.Duration) ([]byte, bool) {
	st := res.Status - compactStatusFirst
	if st < 0 || st >= compactStatuses || ttl > CompactMaxTTL || since < 0 ||
		res.FullFingerprint || res.ContentType != "" || len(res.Body) > 0 {
		return nil, false
	}
	var fp [8]byte
	copy(fp[8-dedup.FingerprintPrefixLen:], res.Fingerprint[:dedup.FingerprintPrefixLen])
	u := binary.BigEndian.Uint64(fp[:]) | (uint64(st)+compactStatuses*uint64(since%compactWindow))<<fpBits
	return strconv.AppendInt(make([]byte, 0, 20), int64(u), 10), true
}

// DecodeRecordAt is DecodeRecord that also reads the compact form, whose
// completion time it places from now (unix seconds): the one time in the
// window that is at most compactAhead after now.
func DecodeRecordAt(v string, now int64) (dedup.Record, error) {
	if v == "" || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return DecodeRecord(v)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != v {
		return dedup.Record{}, fmt.Errorf("%w: compact record %q", ErrBadRecord, v)
	}
	u := uint64(n)
	hi := u >> fpBits
	t := int64(hi / compactStatuses)
	if t >= compactWindow {
		return dedup.Record{}, fmt.Errorf("%w: compact record %q: time out of range", ErrBadRecord, v)
	}
	rec := dedup.Record{State: dedup.Completed}
	rec.Result.Status = compactStatusFirst + int(hi%compactStatuses)
	var fp [8]byte
	binary.BigEndian.PutUint64(fp[:], u)
	copy(rec.Result.Fingerprint[:], fp[8-dedup.FingerprintPrefixLen:])
	age := ((now-t)%compactWindow + compactWindow) % compactWindow
	if age >= compactWindow-compactAhead {
		age -= compactWindow // written by a clock ahead of ours
	}
	rec.Since = time.Unix(now-age, 0)
	return rec, nil
}
