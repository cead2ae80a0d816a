package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/upstream"
)

// finishTimeout bounds completing or releasing a claim, which must not
// depend on the sender still being there.
const finishTimeout = 5 * time.Second

// A Lease is this process's hold on one claimed event, from its claim until
// it is settled: Complete once the app took the event (a 2xx), so that
// later copies are duplicates; Release when it did not, so that the
// sender's retry is forwarded. A lease left unsettled (the process died)
// lapses after the claim's lease time.
//
// Settling needs no request and no ResponseWriter: the proxy settles a
// lease with the upstream's answer, and a background delivery can settle
// its own the same way. Complete and Release are safe to call more than
// once and from several goroutines: the first call settles the lease, the
// later ones do nothing and return nil. Both run on a context of their own
// (bounded by finishTimeout) that keeps ctx's values but not its
// cancellation: the record must be written even when the sender is gone.
type Lease struct {
	claim dedup.Claim
	// ttl is the lifetime of the completed record.
	ttl time.Duration
	// bodyKey, when not empty, is where Complete also records the body's
	// fingerprint (DEDUP_BODY_FINGERPRINT).
	bodyKey string
	ls      *leases
	// answered is what to complete the lease with once the sender has
	// the app's 2xx (settle, then completeAfterAnswer); zero until then.
	// Kept here rather than in the webhook, which every request
	// allocates, claimed or not.
	answered dedup.Result

	mu      sync.Mutex
	settled bool
	// took is how long settling took; err is what it failed with.
	took time.Duration
	err  error
}

// leases takes claims in one store and settles them, counting both in the
// store metrics.
type leases struct {
	store Store
	// lease is the lifetime of a claim before it is settled.
	lease time.Duration
	m     *Metrics
}

// claim claims key for this process. It returns the lease when the claim is
// ours, or else the record that holds the key.
//
// ctx must not be the sender's: a claim call the sender's hang-up cut short
// may still have been carried out by the store (a SET NX already sent),
// and its claim would then sit out its lease time unseen. On a context
// that outlives the sender, the claim comes back as a lease, for the
// caller to release. The proxy passes the Handler's own context, which
// only Abandon cancels; the call is bounded by the store's own limit on
// each operation (see Store).
func (ls *leases) claim(ctx context.Context, key string, ttl time.Duration, bodyKey string) (*Lease, dedup.Record, error) {
	start := time.Now()
	c, rec, err := ls.store.Claim(ctx, key, ls.lease)
	ls.m.observeStore(opClaim, start, err)
	if err != nil || c.Token == "" {
		return nil, rec, err
	}
	ls.m.inflight.Inc()
	return &Lease{claim: c, ttl: ttl, bodyKey: bodyKey, ls: ls}, rec, nil
}

// Key is the store key the lease holds.
func (l *Lease) Key() string { return l.claim.Key }

// Complete records the event as completed with res, for the lease's TTL.
func (l *Lease) Complete(ctx context.Context, res dedup.Result) error {
	return l.settle(ctx, opComplete, func(ctx context.Context) error {
		err := l.ls.store.Complete(ctx, l.claim, res, l.ttl)
		if err == nil && l.bodyKey != "" {
			l.ls.rememberBody(ctx, l.bodyKey, res, l.ttl)
		}
		return err
	})
}

// Release gives the claim up, so that the next copy of the event is
// forwarded.
func (l *Lease) Release(ctx context.Context) error {
	return l.settle(ctx, opRelease, func(ctx context.Context) error {
		err := l.ls.store.Release(ctx, l.claim)
		if err == nil {
			l.ls.m.released.Inc()
		}
		return err
	})
}

// Settled reports whether Complete or Release has run.
func (l *Lease) Settled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.settled
}

// settlement is how long settling took and what it failed with.
func (l *Lease) settlement() (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.took, l.err
}

// settle runs op once, the first time either settling method is called.
func (l *Lease) settle(ctx context.Context, op string, do func(context.Context) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.settled {
		return nil
	}
	l.settled = true
	l.ls.m.inflight.Dec()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	start := time.Now()
	err := do(ctx)
	l.took = time.Since(start)
	// A lease lost is the store answering, not failing: not a store error.
	lost, failed := errors.Is(err, dedup.ErrNotOwner), err
	if lost {
		failed = nil
	}
	l.ls.m.observeStore(op, start, failed)
	switch {
	case lost:
		l.ls.m.leaseLost.Inc()
		l.err = fmt.Errorf("lease expired before %s: the event may be forwarded again: %w", op, err)
	case err != nil:
		l.err = fmt.Errorf("%s failed: the claim stays until its lease expires: %w", op, err)
	}
	return l.err
}

// rememberBody records a completed body's fingerprint under its own key
// (upstream.RememberBody), counted in the store metrics. A failure leaves
// the event's own record, which still holds.
func (ls *leases) rememberBody(ctx context.Context, key string, res dedup.Result, ttl time.Duration) {
	_ = upstream.RememberBody(ctx, observedStore{ls}, key, res, ls.lease, ttl)
}

// observedStore is the leases' store with each call it makes counted in
// the store metrics.
type observedStore struct{ ls *leases }

func (o observedStore) Claim(ctx context.Context, key string, lease time.Duration) (dedup.Claim, dedup.Record, error) {
	start := time.Now()
	c, rec, err := o.ls.store.Claim(ctx, key, lease)
	o.ls.m.observeStore(opClaim, start, err)
	return c, rec, err
}

func (o observedStore) Complete(ctx context.Context, c dedup.Claim, res dedup.Result, ttl time.Duration) error {
	start := time.Now()
	err := o.ls.store.Complete(ctx, c, res, ttl)
	o.ls.m.observeStore(opComplete, start, err)
	return err
}

// settle is the upstream's answer arriving for a forwarded request
// (ReverseProxy's ModifyResponse). A lease the request holds is released,
// on anything but a 2xx, before the sender sees the answer, so that a
// retry sent the moment it does is forwarded. A 2xx is completed right
// after the answer (completeAfterAnswer): settle only prepares the
// record. With BodyFingerprint it is completed before the answer, as the
// body's own record is written with it: a replay of the body under a
// fresh event ID, sent the moment the sender has its answer, has no claim
// of its own to find in flight, and must find that record. With
// ReplayResponse the answer's body is read first (up to ReplayMaxBytes)
// to keep it, then handed on unchanged.
func (h *Handler) settle(resp *http.Response) error {
	f := forwardingFrom(resp.Request.Context())
	if f == nil || f.lease == nil {
		return nil // passed through, or forwarded unchecked
	}
	if !upstream.Completes(resp.StatusCode) {
		_ = f.lease.Release(resp.Request.Context()) // its error is in the lease, for the log line
		return nil
	}
	replay := h.completion.Capture(resp)
	res := h.completion.Result(resp.StatusCode, resp.Header, f.fingerprint(), replay)
	if f.lease.bodyKey != "" {
		_ = f.lease.Complete(resp.Request.Context(), res) // its error is in the lease, for the log line
		return nil
	}
	f.lease.answered, f.completes = res, true
	h.completing.add(f.lease)
	return nil
}
