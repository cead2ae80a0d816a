package dedup

import (
	"context"
	"time"
)

// Store keeps the record of each event ID: claimed (in flight), completed,
// or absent. Every store implements it with the same meaning and passes
// the store conformance suite (storetest).
type Store interface {
	// Claim takes key for lease if no live record holds it, and returns
	// the claim. Otherwise it returns the zero Claim and the record that
	// holds the key.
	Claim(ctx context.Context, key string, lease time.Duration) (Claim, Record, error)
	// Complete replaces c's in-flight record with a completed one holding
	// res, kept for ttl. ErrNotOwner if c no longer owns its key.
	Complete(ctx context.Context, c Claim, res Result, ttl time.Duration) error
	// Release deletes c's in-flight record, so that the next copy of the
	// event is forwarded. ErrNotOwner if c no longer owns its key.
	Release(ctx context.Context, c Claim) error
	// Lookup returns the live record of key; ErrNotFound if none.
	Lookup(ctx context.Context, key string) (Record, error)
	// Forget deletes key's record, whatever its state, and reports
	// whether there was one.
	Forget(ctx context.Context, key string) (bool, error)
	// Ping reports whether the store answers.
	Ping(ctx context.Context) error
}

// Features declares what a kind of store can do. Each store package
// declares its own, once (its Features variable); configuration is checked
// against it before the store is opened, the Backend its opener returns
// agrees with it, and the conformance suite runs the cases it promises.
type Features struct {
	// Queue means the store keeps the async delivery queue beside its
	// records, so that async routes can use it: the Backend's Queue is
	// set. A store that would lose the queue with the process (the
	// in-memory one) does not declare it.
	Queue bool
	// Durable means records survive a restart of the process.
	Durable bool
	// Shared means several processes (replicas) can use the store at once.
	Shared bool
	// Wake means the store tells this process when any process sharing it
	// queued an event: the Backend's Wake is set.
	Wake bool
}

// Backend is an opened store and what it brings with it: what the rest of
// the program may use it for is declared here, by the store's opener, and
// asked for here (a nil Queue means no queue), never found out by looking
// at the store's type.
type Backend struct {
	// Features are the store's declared capabilities.
	Features Features
	// Store keeps the records. Never nil.
	Store Store
	// Queue is the async delivery queue; nil unless Features.Queue.
	Queue Queue
	// Wake returns a channel that receives a value when an event was
	// queued by any process sharing the store, so that the delivery
	// workers look at once rather than at their next poll; the first call
	// starts listening. Nil unless Features.Wake.
	Wake func() <-chan struct{}
	// Jobs run beside the servers until their context ends (the Redis
	// monitor's checks). Nil: none.
	Jobs []func(ctx context.Context)
	// Close releases the store and stops its background work. Never nil.
	Close func() error
}
