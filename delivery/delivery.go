// Package delivery delivers the queued webhooks of async routes to the app
// in the background: it takes due deliveries from the store's queue,
// forwards each exactly as a sync route would, and settles it: completed
// on a 2xx, retried later with backoff otherwise, dead-lettered when its
// attempts or its time run out.
package delivery

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/internal/tracing"
	"github.com/webhook-dedup/webhook-dedup/policy"
	"github.com/webhook-dedup/webhook-dedup/upstream"
)

// DefaultPollInterval is Config.PollInterval when it is zero: how often
// an idle lane looks for due deliveries besides the nudges of new ones.
const DefaultPollInterval = 200 * time.Millisecond

// Queue is what the workers need of the store's async queue (dedup.Queue).
type Queue interface {
	Take(ctx context.Context, lane dedup.Lane, n int, lease time.Duration) ([]dedup.Delivery, error)
	Extend(ctx context.Context, d dedup.Delivery, lease time.Duration) error
	Succeed(ctx context.Context, d dedup.Delivery, res dedup.Result, ttl time.Duration) error
	Retry(ctx context.Context, d dedup.Delivery, next time.Time, status int, reason string) error
	Fail(ctx context.Context, d dedup.Delivery, status int, reason string, keep time.Duration) error
}

// Resigner signs a queued request again, as its sender would sign it now
// (signature.Resigner: the preset's verifier). On error it leaves h as it
// was.
type Resigner interface {
	Resign(h http.Header, body []byte, now time.Time) error
}

// Config configures the Workers. Zero values are documented per field.
type Config struct {
	// Queue holds the deliveries. Required.
	Queue Queue
	// Upstream is the app's base URL. Required.
	Upstream *url.URL
	// Transport reaches the upstream. If nil, upstream.NewTransport(), as
	// a sync route's.
	Transport http.RoundTripper
	// TracerProvider traces each attempt: a span of its own, linked to the
	// span that accepted the event (dedup.Request's TraceParent), with the
	// request to the app as its child (the Transport is wrapped by
	// tracing.Transport, which carries the attempt's trace on to the app)
	// and the Queue's calls too when they are traced (tracing.Backend). If
	// nil, nothing is traced and no header is written for it.
	TracerProvider trace.TracerProvider
	// Propagator writes the attempt's trace context into the app's
	// request. If nil, W3C trace context (traceparent, tracestate).
	// Unused without TracerProvider.
	Propagator propagation.TextMapPropagator
	// ReplayResponse keeps the app's response body and Content-Type in the
	// completed record, as a sync route does, for duplicates to be
	// answered with (REPLAY_RESPONSE).
	ReplayResponse bool
	// ReplayMaxBytes is the largest response body kept for replay; a
	// larger one is not kept, and its duplicates get the plain duplicate
	// answer. If zero, no body is kept: only answers with an empty body
	// are replayed.
	ReplayMaxBytes int
	// BodyFingerprint also records each completed body's fingerprint
	// under a key of its own in Bodies, as a sync route does
	// (DEDUP_BODY_FINGERPRINT): the same body under another event ID is
	// then a duplicate.
	BodyFingerprint bool
	// Resigners finds how each attempt of a queued request is signed
	// again, with a fresh timestamp (RESIGN=auto): from the route and
	// namespace it was queued with, the Resigner of the preset that
	// verified it, as the route is configured now (after a secret
	// rotation, the app holds the new first secret). If nil, or when it
	// returns nil, the request is forwarded with the headers it was
	// queued with.
	Resigners func(route, namespace string) Resigner
	// Bodies keeps the body records of BodyFingerprint: the records of
	// the store whose queue Queue is (its Backend's Store). If nil, no
	// body is recorded, and each completion says so in the log.
	Bodies upstream.BodyStore
	// KeyPrefix starts the key of every body record (dedup.BodyKey), as it
	// starts the proxy's keys; the dead-letter line strips it to name the
	// event by namespace and ID.
	KeyPrefix string
	// DefaultTTL keeps a completed record whose route no longer says how
	// long. If zero, 72h (the generic sources' retention).
	DefaultTTL time.Duration
	// Routes are the async routes (their paths, as Request.Route holds
	// them): each has a lane of its own, with Concurrency attempts at
	// once, so that a route whose app hangs holds none of another's. The
	// events of every other route (one no longer async, or queued
	// without a route) share one more lane, with as many.
	Routes []string
	// Spacing is the least time between two attempts' starts on each
	// route that has a rate (rate=N/s: a second/N), by its path as in
	// Routes; the lane of other routes is never spaced. If nil, no route
	// is. Each lane also pauses its new attempts until a Retry-After the
	// app sent with a 429 or a 503, at most MaxInterval, whatever its
	// spacing. A lane takes a delivery only shortly before its turn (a
	// PollInterval and a spacing ahead): the rest stays queued.
	Spacing map[string]time.Duration
	// HeldBodies, when set, is the budget of the bodies held in memory
	// (MAX_BUFFERED_BYTES, shared with the requests being read): each
	// delivery held is charged its body, and a lane takes no more than
	// the room left holds at MaxBody each (one, when it holds none).
	HeldBodies BodyBudget
	// MaxBody is the largest body a delivery may carry (MAX_BODY_BYTES).
	MaxBody int64
	// Concurrency is the most attempts at once in each lane, and how many
	// more of its deliveries are taken ahead, waiting for an attempt to
	// end (a worker goes on with the next at once). If zero, 16.
	Concurrency int
	// UpstreamTimeout bounds each attempt. If zero, 30s.
	UpstreamTimeout time.Duration
	// Lease is how long a taken delivery is ours before another worker
	// may take it over; it must exceed UpstreamTimeout. If zero,
	// policy.DefaultLease(UpstreamTimeout).
	Lease time.Duration
	// InitialInterval and MaxInterval bound the backoff: the n-th retry
	// waits a random time up to InitialInterval·2ⁿ⁻¹, at most
	// MaxInterval. If zero, 1s and 10m.
	InitialInterval, MaxInterval time.Duration
	// MaxAttempts, if not zero, dead-letters an event after that many
	// attempts, the first included. If zero, there is no cap: an event is
	// retried until MaxAge.
	MaxAttempts int
	// MaxAge dead-letters an event still failing that long after it was
	// accepted. If zero, 72h.
	MaxAge time.Duration
	// DeadLetterTTL is how long a dead letter is kept. If zero, 168h.
	DeadLetterTTL time.Duration
	// PollInterval is how often an idle worker pool looks for due
	// deliveries; Nudge makes it look at once. If zero,
	// DefaultPollInterval.
	PollInterval time.Duration
	// StoreTimeout bounds each settling store call. If zero, 5s.
	StoreTimeout time.Duration
	// Logger logs one line per attempt. If nil, nothing is logged.
	Logger *zap.Logger
	// Metrics are updated per attempt. If nil, none are kept.
	Metrics *Metrics
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
	// Jitter returns a random duration in [0, d]. If nil, uniform.
	Jitter func(d time.Duration) time.Duration
	// Attempted is called as each attempt ends, whatever its outcome: the
	// intake's share of a saturated machine moves with the work delivery
	// did (intake.Gate.Delivered). If nil, nothing is called.
	Attempted func()
}

// Workers deliver the queue's events. Run them once; Nudge from anywhere.
type Workers struct {
	cfg Config
	log *zap.Logger
	// completion is what a 2xx leaves in the event's record.
	completion upstream.Completion
	forward    *forwarder
	// holding is the deliveries taken and not yet settled, of every lane.
	holding holding
	// lanes take and deliver the events of one route each, and the rest.
	lanes []*lane
	// tracer makes the attempts' spans; nil when tracing is off.
	tracer trace.Tracer

	// running counts the attempts under way. They run on attempts, which
	// outlives Run's context (a SIGTERM stops the taking, not the
	// attempts) until Drain cancels it (abandon).
	running  sync.WaitGroup
	attempts context.Context
	abandon  context.CancelFunc
	// stopped is closed once Run takes no more.
	stopped chan struct{}
}

// restLabel is the route label of the lane of routes without one.
const restLabel = "other"

// lane delivers the events of one lane of the queue, with slots of its
// own.
type lane struct {
	from dedup.Lane
	// label names the lane in logs and metrics: the route, or restLabel.
	label string
	// breaker backs the lane off while its app does not answer at all.
	breaker breaker
	// pace spaces the lane's attempts to its route's rate, and pauses
	// them while the app asked for it.
	pace  *pacer
	nudge chan struct{}
	freed chan struct{}
}

// New returns the Workers for cfg.
func New(cfg Config) *Workers {
	if cfg.DefaultTTL == 0 {
		cfg.DefaultTTL = 72 * time.Hour
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 16
	}
	if cfg.UpstreamTimeout == 0 {
		cfg.UpstreamTimeout = upstream.DefaultTimeout
	}
	if cfg.Lease == 0 {
		cfg.Lease = policy.DefaultLease(cfg.UpstreamTimeout)
	}
	if cfg.InitialInterval == 0 {
		cfg.InitialInterval = time.Second
	}
	if cfg.MaxInterval == 0 {
		cfg.MaxInterval = 10 * time.Minute
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = 72 * time.Hour
	}
	if cfg.DeadLetterTTL == 0 {
		cfg.DeadLetterTTL = 168 * time.Hour
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = 5 * time.Second
	}
	if cfg.Transport == nil {
		cfg.Transport = upstream.NewTransport()
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Jitter == nil {
		cfg.Jitter = uniformJitter
	}
	if cfg.Attempted == nil {
		cfg.Attempted = func() {}
	}
	completion := upstream.Completion{
		ReplayResponse:  cfg.ReplayResponse,
		ReplayMaxBytes:  cfg.ReplayMaxBytes,
		BodyFingerprint: cfg.BodyFingerprint,
	}
	var tracer trace.Tracer
	transport := cfg.Transport
	if cfg.TracerProvider != nil {
		tracer = cfg.TracerProvider.Tracer(tracing.Scope)
		transport = tracing.Transport(transport, cfg.TracerProvider, cfg.Propagator)
	}
	w := &Workers{
		cfg:        cfg,
		log:        cfg.Logger,
		completion: completion,
		forward:    newForwarder(cfg.Upstream, transport, completion, cfg.Logger),
		tracer:     tracer,
		stopped:    make(chan struct{}),
		holding:    holding{bodies: cfg.HeldBodies},
	}
	w.attempts, w.abandon = context.WithCancel(context.Background())
	add := func(from dedup.Lane, label string, spacing time.Duration) {
		w.lanes = append(w.lanes, &lane{
			from: from, label: label,
			breaker: breaker{trip: Trip(cfg.Concurrency)},
			pace:    &pacer{interval: spacing, ahead: cfg.PollInterval + spacing, now: cfg.Now},
			nudge:   make(chan struct{}, 1),
			freed:   make(chan struct{}, 1),
		})
	}
	for _, r := range cfg.Routes {
		add(dedup.RouteLane(r), r, cfg.Spacing[r])
	}
	add(dedup.RestLane(cfg.Routes...), restLabel, 0)
	cfg.Metrics.watch(w.lanes)
	return w
}

// Nudge tells the workers that an event was just queued, of a route not
// known (by another process), so that every lane looks for it now rather
// than at its next poll. It never blocks.
func (w *Workers) Nudge() {
	for _, l := range w.lanes {
		signal(l.nudge)
	}
}

// NudgeRoute tells the workers that an event of route was just queued, so
// that the lane that holds it looks for it now rather than at its next
// poll. Only that lane: each nudge of a lane with nothing due costs a Take
// that finds nothing (on Redis, two idle lanes' empty Takes were 40% of
// the Takes under a saturating intake on one route). It never blocks.
func (w *Workers) NudgeRoute(route string) {
	for _, l := range w.lanes {
		if l.from.Holds(route) {
			signal(l.nudge)
			return
		}
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run delivers until ctx is done. Then it takes nothing more and returns;
// the attempts under way, and those of the deliveries taken ahead, go on
// until Drain. Run them once.
func (w *Workers) Run(ctx context.Context) error {
	defer close(w.stopped)
	var taking sync.WaitGroup
	for _, l := range w.lanes {
		w.cfg.Metrics.slots(l.label, 0)
		taking.Go(func() { w.take(ctx, w.attempts, l, &w.running) })
	}
	taking.Wait()
	return nil
}

// Drain ends the attempts Run started, once Run's context is done: it lets
// them finish until finish ends, then cancels those still running, whose
// events go back to the queue, due at once, and waits for them until exit
// ends. It returns how many deliveries were still unsettled then: their
// outcome is not written, and their events stay leased until their lease
// runs out, then are delivered again. Everything not taken stays queued
// for the next process. The caller owns both deadlines (SHUTDOWN_DELAY +
// SHUTDOWN_TIMEOUT after SIGTERM, and the exit's a little later).
func (w *Workers) Drain(finish, exit context.Context) int {
	done := make(chan struct{})
	go func() {
		<-w.stopped // running then counts every attempt Run started
		w.running.Wait()
		close(done)
	}()
	select {
	case <-done:
		return 0
	case <-finish.Done():
	}
	w.log.Warn("deliveries still running at the end of SHUTDOWN_TIMEOUT: cancelling them; they stay queued and are delivered again")
	w.abandon()
	select {
	case <-done:
		return 0
	case <-exit.Done():
		return w.holding.count()
	}
}

// takers is how many Takes each lane has under way at most. With one, a
// store whose server shares its CPU among its connections (PostgreSQL)
// gave the lane's Takes one connection's share against the
// DELIVERY_CONCURRENCY enqueues': the lane delivered what that one could
// take (about 700 events/s on the bench's core, its workers idle
// meanwhile) whatever the intake. With two, the lane kept 0.68–0.73 of
// the intake there, against 0.49–0.59 (docs/performance.md, "Deliveries
// taken ahead"); a second Take costs the other stores nothing measurable.
const takers = 2

// take delivers l's due deliveries until ctx is done: Concurrency
// workers attempt them, and takers keep up to Concurrency more taken
// ahead for them, so that a worker done with one goes on with the next
// at once. Were the next taken only once a worker was free, each delivery
// would wait for two store operations in turn (its Take and its outcome),
// where an accept waits for one: under a saturating intake, with as many
// enqueues at once as workers (proxy.Config.Enqueues at its narrowest), delivery
// kept a third to a half of the intake (docs/performance.md, "Delivery
// during intake"). running counts the workers; once ctx is done they
// attempt what was taken ahead, and end.
func (w *Workers) take(ctx, attemptCtx context.Context, l *lane, running *sync.WaitGroup) {
	// taken hands the deliveries taken to the workers; a delivery's lease
	// is kept from its Take on (keep), however long it waits here.
	taken := make(chan job, w.cfg.Concurrency)
	// held counts the deliveries taken and not yet settled, and those a
	// Take under way may bring: at most Concurrency attempted and as many
	// waiting.
	var held atomic.Int64
	for range w.cfg.Concurrency {
		running.Add(1)
		go func() {
			defer running.Done()
			for j := range taken {
				w.cfg.Metrics.slots(l.label, 1)
				probe, turn := j.probe, j.turn
				for h := j.h; h != nil; {
					// Every attempt waits for its turn here: its
					// delivery's, given as it was taken, or, for the
					// next of the same event held meanwhile, one of its
					// own. A wait cut short by shutdown goes on to the
					// attempt, which puts the event back, due at once.
					start, _ := l.pace.waitFor(attemptCtx, turn)
					w.attempt(attemptCtx, l, h, probe, start)
					w.cfg.Attempted()
					probe = false
					if h = w.holding.release(h); h != nil {
						turn = l.pace.turn()
					}
				}
				j.stop()
				w.cfg.Metrics.slots(l.label, -1)
				held.Add(-1)
				signal(l.freed)
			}
		}()
	}
	t := w.newTaker(l, attemptCtx, taken, &held)
	var takes sync.WaitGroup
	for range takers {
		takes.Go(func() { t.run(ctx) })
	}
	takes.Wait()
	close(taken)
}

// job is a delivery taken, on its way to a worker.
type job struct {
	h     *held
	probe bool      // the breaker let it out as its probe
	turn  time.Time // when its attempt may start (pacer.turn)
	stop  func()    // stops keeping its lease
}

// taker takes a lane's due deliveries and hands them to its workers; the
// lane's takers share all but their timer.
type taker struct {
	w          *Workers
	l          *lane
	attemptCtx context.Context
	taken      chan<- job
	held       *atomic.Int64
	most       int64
	// least is the fewest deliveries a Take asks for, at least one and at
	// most half of Concurrency: the Take waits until that many are
	// settled. Asked for as each one settled, a saturated lane's Takes
	// brought a few deliveries each, and each Take costs the store and
	// the proxy what several settles do. Every worker still has a
	// delivery, and half of them one more waiting, when it is sent.
	least int64
	log   *zap.Logger
	// failing is set while the store fails the Takes: the first error
	// is logged, and the first success after it.
	failing atomic.Bool
}

// newTaker returns the taker of l, which hands what it takes to taken,
// counting it in held.
func (w *Workers) newTaker(l *lane, attemptCtx context.Context, taken chan<- job, held *atomic.Int64) *taker {
	return &taker{w: w, l: l, attemptCtx: attemptCtx, taken: taken, held: held, most: int64(2 * w.cfg.Concurrency),
		least: int64(max(1, w.cfg.Concurrency/2)), log: w.log.With(zap.String("route", l.label))}
}

// reserve counts up to free more deliveries in held for a Take, and
// returns how many; none when fewer than least are free.
func (t *taker) reserve() int64 {
	for {
		h := t.held.Load()
		free := t.most - h
		if free < t.least {
			return 0
		}
		if t.held.CompareAndSwap(h, h+free) {
			return free
		}
	}
}

// bodiesFit is how many deliveries the budget of the bodies held has room
// for, at the largest body each (math.MaxInt with no budget): one at
// least when the lane holds none besides the reserved, so that each lane
// goes on while others hold the budget (it then overshoots by at most
// one body a lane).
func (t *taker) bodiesFit(reserved int64) int {
	w := t.w
	if w.cfg.HeldBodies == nil || w.cfg.MaxBody <= 0 {
		return math.MaxInt
	}
	fit := w.cfg.HeldBodies.Room() / w.cfg.MaxBody
	if fit == 0 && t.held.Load() == reserved {
		fit = 1
	}
	return int(min(fit, math.MaxInt))
}

// run takes until ctx is done.
func (t *taker) run(ctx context.Context) {
	w, l := t.w, t.l
	poll := time.NewTimer(w.cfg.PollInterval)
	defer poll.Stop()
	// nudged is set while a nudge woke this taker and no Take of its has
	// begun since. A nudge wakes one of the lane's takers; finding no room
	// (the other holds it, in a Take that may have begun before the
	// nudged event was queued, and ends empty), this one passes the
	// nudge on, to the other once it waits again. Dropped there, the
	// event waited for the next poll (TestNudge, about once in 1,500 runs
	// on a loaded machine; with its hour's poll, never within the test).
	nudged := false
	for ctx.Err() == nil {
		reserved := t.reserve()
		if reserved == 0 {
			if nudged {
				signal(l.nudge)
				nudged = false
			}
			select {
			case <-ctx.Done():
			case <-l.freed:
			}
			continue
		}
		// Only what can start soon is taken (pacer): the rest of a
		// route held back by its rate or a pause stays queued, its
		// attempts uncounted.
		room, wait := l.pace.room(int(reserved))
		if fit := t.bodiesFit(reserved); fit < room {
			// The bodies held take the memory's budget: no more than
			// fit, until attempts end or requests give room back.
			room = fit
			if room == 0 {
				wait = w.cfg.PollInterval
			}
		}
		free, probe := 0, false
		if room > 0 {
			free, probe, wait = l.breaker.allow(room, w.cfg.Now())
		}
		if free == 0 {
			t.held.Add(-reserved)
			// Until the next turn comes within reach; or, the app
			// being down, until the next probe, or the one out
			// settles it.
			tm := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-l.freed:
			case <-tm.C:
			}
			tm.Stop()
			continue
		}
		nudged = false
		ds, err := w.cfg.Queue.Take(ctx, l.from, free, w.cfg.Lease)
		switch was := t.failing.Swap(err != nil); {
		case err != nil && !was && ctx.Err() == nil:
			t.log.Error("taking queued deliveries failed: retrying at every poll", zap.Error(err))
		case err == nil && was:
			t.log.Info("taking queued deliveries works again")
		}
		sent := int64(0)
		for _, d := range ds {
			h := w.holding.hold(d)
			if h == nil {
				continue // this process holds the event already: it goes on with d
			}
			sent++
			// Never blocks for long: with held at most 2·Concurrency, the
			// channel is full only while a worker is on its way to it.
			t.taken <- job{h: h, probe: probe, turn: l.pace.turn(), stop: w.keep(t.attemptCtx, h, l.label)}
		}
		t.held.Add(sent - reserved)
		if probe && sent == 0 {
			l.breaker.unused()
		}
		if err == nil && len(ds) == free {
			continue // more may be due
		}
		poll.Reset(w.cfg.PollInterval)
		select {
		case <-ctx.Done():
		case <-l.nudge:
			nudged = true
		case <-poll.C:
		}
	}
}

// errAbandoned is the reason noted for an attempt cancelled by shutdown.
var errAbandoned = errors.New("delivery: attempt cancelled by shutdown")
