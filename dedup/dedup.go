// Package dedup is the contract of the stores that keep the record of which
// webhook events were claimed and completed (and, for async routes, the
// queue of their deliveries): the Store and Queue interfaces each store
// package implements with one atomic step per operation, the records they
// return, and the Backend through which a store declares what it can do.
package dedup

import (
	"encoding/hex"
	"errors"
	"time"
)

// Sentinel errors. Callers test them with errors.Is.
var (
	// ErrNotOwner means Complete or Release was called with a claim whose
	// lease expired and whose key now belongs to someone else (or to no one).
	ErrNotOwner = errors.New("dedup: claim no longer owned")
	// ErrNotFound means Lookup found no record for the key.
	ErrNotFound = errors.New("dedup: no record")
)

// State is where an event ID is in its lifecycle.
type State uint8

const (
	// Absent means no record exists: the key is free to claim.
	Absent State = iota
	// InFlight means a claim is held and its request is still with the upstream.
	InFlight
	// Completed means the upstream answered 2xx; the record lives for its TTL.
	Completed
	// Queued means an async event waits for its first or next attempt.
	Queued
	// Delivering means a worker holds an async event and is delivering it.
	Delivering
	// Failed means an async event was dead-lettered: its attempts ran out.
	Failed
)

// String returns the name used in the admin API: "in-flight",
// "completed", "queued", "delivering" or "failed".
func (s State) String() string {
	switch s {
	case InFlight:
		return "in-flight"
	case Completed:
		return "completed"
	case Queued:
		return "queued"
	case Delivering:
		return "delivering"
	case Failed:
		return "failed"
	default:
		return "absent"
	}
}

// Claim is proof of ownership of a key, returned by a successful claim. Its
// Token is checked atomically by Complete and Release.
type Claim struct {
	Key   string
	Token string
}

// Result is what a completed record keeps of the upstream's answer.
type Result struct {
	// Status is the upstream's HTTP status code.
	Status int
	// Fingerprint is the SHA-256 of the request body. All zero if unknown.
	// The Redis and PostgreSQL stores keep only its first FingerprintPrefixLen bytes
	// (the rest read back as zero) unless FullFingerprint is set; compare
	// with SameBody.
	Fingerprint [32]byte
	// FullFingerprint asks the store to keep the whole Fingerprint, for a
	// caller that finds other records by it (DEDUP_BODY_FINGERPRINT's
	// body keys). A record read back says whether it holds the whole one.
	FullFingerprint bool
	// ContentType and Body are kept only when responses are replayed; empty otherwise.
	ContentType string
	Body        []byte
}

// SameBody reports whether sum, the SHA-256 of a body, matches
// Fingerprint as far as the record kept it.
func (r Result) SameBody(sum [32]byte) bool {
	if r.FullFingerprint {
		return r.Fingerprint == sum
	}
	return [FingerprintPrefixLen]byte(r.Fingerprint[:]) == [FingerprintPrefixLen]byte(sum[:])
}

// KnownBody reports whether the record holds a fingerprint at all.
func (r Result) KnownBody() bool { return r.Fingerprint != [32]byte{} }

// FingerprintHex is the hex form of as much of Fingerprint as the record
// kept, or "" if it holds none.
func (r Result) FingerprintHex() string {
	switch {
	case !r.KnownBody():
		return ""
	case r.FullFingerprint:
		return hex.EncodeToString(r.Fingerprint[:])
	default:
		return hex.EncodeToString(r.Fingerprint[:FingerprintPrefixLen])
	}
}

// Record is the current state of one key.
type Record struct {
	State State
	// Result is set when State is Completed.
	Result Result
	// Since is when the claim was taken (InFlight) or completed (Completed).
	Since time.Time
	// TTL is the time left before the record expires: the lease for an
	// in-flight claim, the retention for a completed record.
	TTL time.Duration
	// Delivery is set for the events of async routes.
	Delivery DeliveryStatus
}

// DeliveryStatus is where an async event's background delivery stands.
type DeliveryStatus struct {
	// Attempts counts the attempts made so far.
	Attempts int
	// LastStatus is the app's status on the last attempt; 0 if none
	// answered (timeout, connection error) or none was made.
	LastStatus int
	// LastError says why the last attempt failed; empty if none did.
	LastError string
	// NextAttemptAt is when a queued event is due; zero otherwise, and
	// for an ordered event waiting behind the head of its key.
	NextAttemptAt time.Time
	// BlockedBy is, for an ordered event waiting behind the head of its
	// key, the head's key (the event whose completion it waits for);
	// empty for every other event. Stores that cannot tell leave it empty.
	BlockedBy string
	// History is the last HistoryLen attempts, oldest first; nil for a
	// sync record, or an event not yet attempted or recorded before the
	// history was kept. Only Lookup and Events fill it in.
	History []Attempt
}

// ErrPrefixOwned means the key prefix holds the records of another
// deployment (another APP_NAME): sharing them would answer one app's
// events as duplicates of the other's.
var ErrPrefixOwned = errors.New("dedup: the key prefix belongs to another app")

// FingerprintPrefixLen is how many bytes of a body's SHA-256 the Redis
// store keeps in a completed record, unless Result.FullFingerprint asks
// for all of it.
const FingerprintPrefixLen = 5

// ErrReadOnly means the store answers but refuses writes: a full volume,
// a Redis out of memory, a read-only database. Readiness reports it: a
// proxy whose store refuses writes can answer no first-seen webhook.
var ErrReadOnly = errors.New("dedup: the store refuses writes")
