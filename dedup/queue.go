package dedup

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Sentinel errors of the queue.
var (
	// ErrNotFailed means Requeue was asked to retry an event that is not
	// dead-lettered (it is queued, being delivered or completed).
	ErrNotFailed = errors.New("dedup: event is not dead-lettered")
	// ErrBadCursor means DeadLetters was given a cursor it cannot read:
	// not one a previous page returned. It is the caller's mistake, not
	// the store's failure (the admin API answers 400, not 503).
	ErrBadCursor = errors.New("dedup: dead letters: bad cursor")
	// ErrQueueFull means Enqueue found the queue holding its maxDepth
	// events waiting for delivery (QUEUE_MAX_DEPTH): nothing was claimed
	// and nothing queued. The key was free: a duplicate is answered as
	// one, full or not.
	ErrQueueFull = errors.New("dedup: the queue is full")
	// ErrNoRequest means Request found the event's record but no request
	// kept with it: a completed event (its request goes when it is
	// delivered), or a sync route's record (never queued).
	ErrNoRequest = errors.New("dedup: no request kept for this event")
)

// Request is a webhook request kept for background delivery: everything
// the worker needs to forward it as a sync route would have, byte for byte.
type Request struct {
	// Method, RequestURI (path and query, as received) and Host are the
	// request line and the Host header the sender used.
	Method, RequestURI, Host string
	// Header is the sender's header, as received.
	Header http.Header
	// RemoteAddr and TLS are what X-Forwarded-For and X-Forwarded-Proto
	// are made from, as when the proxy received the request.
	RemoteAddr string
	TLS        bool
	// Body is the whole body.
	Body []byte

	// Route, Namespace and TTL are how the event is settled, as the proxy
	// decided when it accepted it: the route it came in on (the route
	// label of the delivery metrics), the namespace of its event ID (where
	// DEDUP_BODY_FINGERPRINT records its body), and how long its completed
	// record is kept. Empty or zero for a request queued by a version that
	// did not keep them: no route label, no body record, the default TTL.
	Route, Namespace string
	TTL              time.Duration

	// TraceParent is the W3C traceparent of the span that accepted the
	// event, when tracing is on: each delivery attempt's span links to
	// it, so a trace viewer goes from the sender's request to every
	// attempt. It is not a header: the app receives Header as the sender
	// sent it (and a traceparent only as tracing propagates the attempt's
	// own). Empty when tracing was off at accept time, or for a request
	// queued by a version that did not keep it.
	TraceParent string

	// OrderKey, if not empty, is the event's order key (a route's order=
	// option): the events sharing it are taken one at a time, in the
	// order the store accepted them (see Worker). The proxy makes it of
	// the route and the key's value. Empty: the event is delivered in no
	// particular order. The store keeps it beside the request, not in it:
	// Take hands the Request back without it.
	OrderKey string
	// OrderBlock is what the event's key does if the event is
	// dead-lettered at its head (ORDER_ON_FAILURE): true keeps the key
	// waiting until the dead letter is requeued and completes, or is
	// forgotten; false (skip) goes on with the key's next event. Kept
	// beside the request as OrderKey is; ignored without an OrderKey.
	OrderBlock bool
}

// Delivery is one queued event as a worker holds it, from Take until it is
// settled with Succeed, Retry or Fail. While held, no other worker gets it;
// if the worker dies, the event is taken over once Lease has passed.
type Delivery struct {
	// Claim owns the delivery: Succeed, Retry and Fail check its token, so
	// a worker whose lease ran out cannot settle an event another took over.
	Claim Claim
	// Request is the webhook to forward.
	Request Request
	// Attempt is this attempt's number: 1 for the first.
	Attempt int
	// AcceptedAt is when the event was accepted (RETRY_MAX_AGE counts from it).
	AcceptedAt time.Time
	// Began and Took time the attempt that Succeed, Retry or Fail
	// settles: the store keeps them, with the outcome, as the newest entry
	// of the event's history (Tried), in the same write. Zero Began: the
	// event is settled without an attempt to record.
	Began time.Time
	Took  time.Duration
}

// DeadLetter is a failed event as the dead-letter listing shows it.
type DeadLetter struct {
	Key        string
	Attempts   int
	LastStatus int
	LastError  string
	FailedAt   time.Time
}

// QueueStats is what the queue metrics report.
type QueueStats struct {
	// Depth counts the events queued or waiting for a retry (not those
	// being delivered, not dead letters).
	Depth int
	// OldestAge is the age of the oldest event accepted and not yet
	// settled (queued, retrying or being delivered): how far behind the
	// queue is. Zero when there is none.
	OldestAge time.Duration
	// DeadLetters counts the failed events kept.
	DeadLetters int
	// Routes is Depth by route (Request.Route, "" for events queued
	// without one): each route with events waiting; a route with none is
	// absent. Nil when none waits.
	Routes map[string]int
}

// Producer is the queue as the proxy's async routes use it: accept.
type Producer interface {
	// Enqueue claims key and stores req for delivery in one atomic step.
	// If the key was free it returns true; otherwise false and the record
	// that holds the key (a duplicate of any state), and stores nothing.
	//
	// maxDepth, if positive, bounds the queue (QUEUE_MAX_DEPTH): a free
	// key is refused with ErrQueueFull while maxDepth events or more wait
	// for delivery (QueueStats.Depth). Where the store can, it checks the
	// depth in the same atomic step, across every process sharing the
	// queue; PostgreSQL checks it against its own reckoning, exact for the
	// enqueues, Takes and retries of this process and as of its last read
	// of the depth for the rest (pgstore's depthView). A retry is never
	// refused, so the depth may pass maxDepth by the deliveries under way.
	Enqueue(ctx context.Context, key string, req Request, maxDepth int) (bool, Record, error)
}

// Lane is the part of the queue a Take draws from, chosen by the route
// each event was accepted on (Request.Route): each async route has a lane
// of its own, so that the deliveries of a route whose app hangs cannot
// hold up another route's, however many of them are queued ahead. The
// rest lane holds the events of every other route: routes no longer
// configured async (their events are still delivered) and events queued
// without a route.
type Lane struct {
	// Route is the route whose events the lane holds, unless Rest.
	Route string
	// Rest makes it the lane of every route but those in Except (the
	// routes with a lane of their own), the empty route included.
	Rest   bool
	Except []string
}

// AllRoutes is the lane of every event, whatever its route.
var AllRoutes = Lane{Rest: true}

// RouteLane is route's own lane.
func RouteLane(route string) Lane { return Lane{Route: route} }

// RestLane is the lane of every route but except.
func RestLane(except ...string) Lane { return Lane{Rest: true, Except: except} }

// Holds reports whether the lane holds the events of route.
func (l Lane) Holds(route string) bool {
	if !l.Rest {
		return route == l.Route
	}
	for _, r := range l.Except {
		if r == route {
			return false
		}
	}
	return true
}

// Worker is the queue as the delivery workers use it: take what is due,
// and settle each delivery with its outcome.
//
// Ordered events (Request.OrderKey): the store gives each a place at the
// end of its key as it accepts it, in the same atomic step, so the places
// follow the store's order of the accepts whichever process made them.
// Only the head of a key (its first place) is ever taken: the next event
// becomes due once the head has completed, been forgotten, or been
// dead-lettered without OrderBlock. A retried head keeps its place, and a
// head whose lease ran out is the one taken over; a dead letter holding
// its key (OrderBlock) is kept until requeued or forgotten, whatever its
// keep, and a requeue leaves it at the head. A dead letter that left its
// key and is requeued takes a new place at the end of it. Events of
// different keys, and events without a key, are taken as ever.
type Worker interface {
	// Take hands out at most n deliveries of lane that are due, each
	// leased to this caller for lease: events never taken, retries whose
	// time has come, and deliveries whose holder's lease ran out; the
	// events of other lanes, however many and however old, neither count
	// nor stand in the way. It returns at once with what is due,
	// possibly nothing. Every caller passes the same lease (LEASE_TTL):
	// Redis takes a delivery over once it has been held for the taker's
	// lease.
	Take(ctx context.Context, lane Lane, n int, lease time.Duration) ([]Delivery, error)
	// Extend renews d's lease for lease from now, while its attempt runs
	// or its outcome is still being written, so that no other worker
	// takes it over meanwhile. ErrNotOwner if d is no longer held by its
	// taker (taken over, settled or forgotten).
	Extend(ctx context.Context, d Delivery, lease time.Duration) error
	// Succeed completes d's event with res, kept for ttl, and drops its
	// request.
	Succeed(ctx context.Context, d Delivery, res Result, ttl time.Duration) error
	// Retry gives d back to the queue, due again at next, noting the
	// attempt's outcome (the app's status, or 0, and an error text).
	Retry(ctx context.Context, d Delivery, next time.Time, status int, reason string) error
	// Fail dead-letters d's event: state Failed, kept with its request for
	// keep.
	Fail(ctx context.Context, d Delivery, status int, reason string, keep time.Duration) error
}

// Operator is the queue as an operator sees it (the admin API, the CLI
// and the metrics): dead letters, retrying them, and how far behind the
// queue is.
type Operator interface {
	// Requeue puts a dead-lettered event back in the queue as a new first
	// attempt. ErrNotFound if unknown, ErrNotFailed if not dead-lettered.
	Requeue(ctx context.Context, key string) error
	// DeadLetters lists up to limit failed events from cursor (empty: the
	// first page) and the cursor of the next page (empty on the last).
	DeadLetters(ctx context.Context, cursor string, limit int) ([]DeadLetter, string, error)
	// Stats reports the queue's depth, its oldest event's age and the
	// number of dead letters.
	Stats(ctx context.Context) (QueueStats, error)
	// Events lists one page of the async events q chooses, oldest first
	// by the time their state lists by, then by key: an event that stays
	// in its state is neither repeated nor skipped from page to page.
	// ErrBadCursor if q.Cursor is not one a page of q.State returned.
	Events(ctx context.Context, q EventQuery) (EventPage, error)
	// Request returns the request an event was queued with, as Take would
	// hand it out (without its OrderKey), for an operator to read: kept
	// while the event is queued, being delivered or dead-lettered.
	// ErrNotFound if there is no record for key (or it expired),
	// ErrNoRequest if the record keeps none (completed, or a sync route's).
	Request(ctx context.Context, key string) (Request, error)
}

// Queue is the async delivery queue a durable store keeps beside its
// records: every role at once. Every store whose Features say Queue
// implements it and passes the queue conformance suite (storetest).
type Queue interface {
	Producer
	Worker
	Operator
}
