package tracing

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// Attributes of the store's spans.
const (
	// Claimed tells whether a claim or an enqueue took the event ID.
	Claimed = attribute.Key("webhook.claimed")
	// State is the state of the record that holds an event ID: the one a
	// lookup found, or the one a claim or an enqueue lost to.
	State = attribute.Key("webhook.record.state")
)

// Backend returns b with a client span around each operation of its
// Store and Queue that runs within a span: a webhook's claim, lookup,
// enqueue, complete and release, a delivery attempt's succeed, retry and
// fail, each a child of the span it ran in. The store packages know
// nothing of tracing; this is the one place their calls are traced. kind
// is the store's kind (config.StoreKind: memory, disk, redis, postgres,
// dynamodb), for the db.system.name attribute.
func Backend(b dedup.Backend, tp trace.TracerProvider, kind string) dedup.Backend {
	o := ops{tracer: tp.Tracer(Scope), system: dbSystem(kind)}
	b.Store = &store{next: b.Store, ops: o}
	if b.Queue != nil {
		b.Queue = &queue{next: b.Queue, ops: o}
	}
	return b
}

// dbSystem is the semantic conventions' name of a store kind, where they
// have one.
func dbSystem(kind string) attribute.KeyValue {
	switch kind {
	case "redis":
		return semconv.DBSystemNameRedis
	case "postgres":
		return semconv.DBSystemNamePostgreSQL
	case "dynamodb":
		return semconv.DBSystemNameAWSDynamoDB
	}
	return semconv.DBSystemNameKey.String("webhook-dedup." + kind)
}

// ops starts and ends the spans of one store's operations.
type ops struct {
	tracer trace.Tracer
	system attribute.KeyValue
}

// start begins op's span, if ctx carries a span (see within); the span
// is nil otherwise.
func (o ops) start(ctx context.Context, op string) (context.Context, trace.Span) {
	if !within(ctx) {
		return ctx, nil
	}
	return o.tracer.Start(ctx, "store "+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(o.system, semconv.DBOperationName(op)))
}

// end ends a span start began. A record not found, a claim no longer
// owned and a full queue are the store answering, not failing: not
// errors.
func end(span trace.Span, err error, attrs ...attribute.KeyValue) {
	if span == nil {
		return
	}
	span.SetAttributes(attrs...)
	if err != nil && !errors.Is(err, dedup.ErrNotFound) && !errors.Is(err, dedup.ErrNotOwner) && !errors.Is(err, dedup.ErrQueueFull) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// claimed are the attributes of a claim's or an enqueue's outcome.
func claimed(won bool, rec dedup.Record) []attribute.KeyValue {
	if won {
		return []attribute.KeyValue{Claimed.Bool(true)}
	}
	return []attribute.KeyValue{Claimed.Bool(false), State.String(rec.State.String())}
}

// store is a dedup.Store whose operations are traced.
type store struct {
	next dedup.Store
	ops
}

func (s *store) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error) {
	ctx, span := s.start(ctx, "claim")
	c, rec, err := s.next.Claim(ctx, key, lease)
	if span != nil {
		end(span, err, claimed(c.Token != "", rec)...)
	}
	return c, rec, err
}

func (s *store) Complete(ctx context.Context, c dedup.Claim, res dedup.Result, ttl time.Duration) error {
	ctx, span := s.start(ctx, "complete")
	err := s.next.Complete(ctx, c, res, ttl)
	end(span, err)
	return err
}

func (s *store) Release(ctx context.Context, c dedup.Claim) error {
	ctx, span := s.start(ctx, "release")
	err := s.next.Release(ctx, c)
	end(span, err)
	return err
}

func (s *store) Lookup(ctx context.Context, key string) (dedup.Record, error) {
	ctx, span := s.start(ctx, "lookup")
	rec, err := s.next.Lookup(ctx, key)
	if span != nil {
		end(span, err, State.String(rec.State.String()))
	}
	return rec, err
}

func (s *store) Forget(ctx context.Context, key string) (bool, error) {
	ctx, span := s.start(ctx, "forget")
	ok, err := s.next.Forget(ctx, key)
	end(span, err)
	return ok, err
}

func (s *store) Ping(ctx context.Context) error {
	return s.next.Ping(ctx) // readiness: never within a span
}

// queue is a dedup.Queue whose operations are traced.
type queue struct {
	next dedup.Queue
	ops
}

func (q *queue) Enqueue(ctx context.Context, key string, req dedup.Request, maxDepth int) (bool, dedup.Record, error) {
	ctx, span := q.start(ctx, "enqueue")
	won, rec, err := q.next.Enqueue(ctx, key, req, maxDepth)
	if span != nil {
		end(span, err, claimed(won, rec)...)
	}
	return won, rec, err
}

func (q *queue) Take(ctx context.Context, lane dedup.Lane, n int, lease time.Duration) ([]dedup.Delivery, error) {
	return q.next.Take(ctx, lane, n, lease) // the workers' polling: never within a span
}

func (q *queue) Extend(ctx context.Context, d dedup.Delivery, lease time.Duration) error {
	return q.next.Extend(ctx, d, lease) // the workers' lease keeping: never within a span
}

func (q *queue) Succeed(ctx context.Context, d dedup.Delivery, res dedup.Result, ttl time.Duration) error {
	ctx, span := q.start(ctx, "succeed")
	err := q.next.Succeed(ctx, d, res, ttl)
	end(span, err)
	return err
}

func (q *queue) Retry(ctx context.Context, d dedup.Delivery, next time.Time, status int, reason string) error {
	ctx, span := q.start(ctx, "retry")
	err := q.next.Retry(ctx, d, next, status, reason)
	end(span, err)
	return err
}

func (q *queue) Fail(ctx context.Context, d dedup.Delivery, status int, reason string, keep time.Duration) error {
	ctx, span := q.start(ctx, "fail")
	err := q.next.Fail(ctx, d, status, reason, keep)
	end(span, err)
	return err
}

func (q *queue) Requeue(ctx context.Context, key string) error {
	return q.next.Requeue(ctx, key) // the admin API: never within a span
}

func (q *queue) DeadLetters(ctx context.Context, cursor string, limit int) ([]dedup.DeadLetter, string, error) {
	return q.next.DeadLetters(ctx, cursor, limit)
}

func (q *queue) Stats(ctx context.Context) (dedup.QueueStats, error) {
	return q.next.Stats(ctx)
}

func (q *queue) Events(ctx context.Context, eq dedup.EventQuery) (dedup.EventPage, error) {
	return q.next.Events(ctx, eq) // the admin API: never within a span
}

func (q *queue) Request(ctx context.Context, key string) (dedup.Request, error) {
	return q.next.Request(ctx, key) // the console: never within a span
}
