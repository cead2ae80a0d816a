package codec

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// An async event's record on disk, one binary value (integers big-endian):
//
//	[0]      tag 0x10
//	[1]      state (Queued, Delivering, Failed or Completed)
//	[2:18]   the delivery's claim token (Delivering), else zero
//	[18:26]  accepted at, unix ms
//	[26:34]  at, unix ms: when it is due (Queued), when its lease runs
//	         out (Delivering), when it failed (Failed); 0 when Completed
//	[34:36]  the app's last status, uint16
//	         uvarint attempts, then the last error (uvarint length, text)
//	         Completed only: the completed record (encodeCompleted) to the end
const (
	// TagAsync follows the sync records' tags (encoding.go), leaving
	// room for more of them.
	TagAsync      = 0x10
	asyncFixedLen = 36
)

// Waiting is the At of a queued event that waits behind the head of its
// order key (dedup.Request.OrderKey): never due by itself, and last in a
// due index, until the head's settling makes it due.
const Waiting = math.MaxInt64

type Async struct {
	State      dedup.State
	Token      [TokenLen]byte
	Accepted   int64
	At         int64
	LastStatus int
	Attempts   int
	LastError  string
	// Result and completed (unix seconds, as a sync completion's) are the
	// outcome of a completed event.
	Result    dedup.Result
	Completed int64
}

func EncodeAsync(a Async) []byte {
	b := make([]byte, 0, asyncFixedLen+2*binary.MaxVarintLen32+len(a.LastError))
	b = append(b, TagAsync, byte(a.State))
	b = append(b, a.Token[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(a.Accepted))
	b = binary.BigEndian.AppendUint64(b, uint64(a.At))
	b = binary.BigEndian.AppendUint16(b, uint16(a.LastStatus))
	b = binary.AppendUvarint(b, uint64(a.Attempts))
	b = AppendString(b, a.LastError)
	if a.State == dedup.Completed {
		b = append(b, EncodeCompleted(a.Result, a.Completed)...)
	}
	return b
}

func DecodeAsync(v []byte) (Async, error) {
	if len(v) < asyncFixedLen || v[0] != TagAsync {
		return Async{}, fmt.Errorf("%w: not an async record", ErrBadRecord)
	}
	a := Async{
		State:      dedup.State(v[1]),
		Token:      [TokenLen]byte(v[2:18]),
		Accepted:   int64(binary.BigEndian.Uint64(v[18:26])),
		At:         int64(binary.BigEndian.Uint64(v[26:34])),
		LastStatus: int(binary.BigEndian.Uint16(v[34:36])),
	}
	dec := Decoder{Rest: v[asyncFixedLen:]}
	a.Attempts = int(dec.Uvarint())
	a.LastError = dec.Text()
	if dec.Err != nil {
		return Async{}, fmt.Errorf("%w: %w", ErrBadRecord, dec.Err)
	}
	switch a.State {
	case dedup.Queued, dedup.Delivering, dedup.Failed:
		if len(dec.Rest) != 0 {
			return Async{}, fmt.Errorf("%w: trailing bytes", ErrBadRecord)
		}
	case dedup.Completed:
		rec, err := DecodeRecord(string(dec.Rest))
		if err != nil || rec.State != dedup.Completed {
			return Async{}, fmt.Errorf("%w: completed async record without its result", ErrBadRecord)
		}
		a.Result, a.Completed = rec.Result, rec.Since.Unix()
		// This file only ever holds encodeCompleted's 4-byte seconds; a
		// time beyond them is an earlier format or damage, not a record.
		if a.Completed < 0 || a.Completed > math.MaxUint32 {
			return Async{}, fmt.Errorf("%w: completion time %d out of range", ErrBadRecord, a.Completed)
		}
	default:
		return Async{}, fmt.Errorf("%w: async state %d", ErrBadRecord, a.State)
	}
	return a, nil
}

// Record is what callers see of a at now (TTL is the caller's). A delivery
// whose lease ran out is queued again: due since its lease ended.
func (a Async) Record(now int64) dedup.Record {
	rec := dedup.Record{State: a.State, Since: time.UnixMilli(a.Accepted)}
	rec.Delivery = dedup.DeliveryStatus{Attempts: a.Attempts, LastStatus: a.LastStatus, LastError: a.LastError}
	switch a.State {
	case dedup.Queued:
		if a.At != Waiting {
			rec.Delivery.NextAttemptAt = time.UnixMilli(a.At)
		}
	case dedup.Delivering:
		if a.At <= now {
			rec.State = dedup.Queued
			rec.Delivery.NextAttemptAt = time.UnixMilli(a.At)
		}
	case dedup.Failed:
		rec.Since = time.UnixMilli(a.At)
	case dedup.Completed:
		rec.Since = time.Unix(a.Completed, 0)
		rec.Result = a.Result
	}
	return rec
}
