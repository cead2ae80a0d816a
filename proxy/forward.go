package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/upstream"
)

// newReverseProxy is the proxy to the upstream: every request, webhook or
// not, leaves through it.
func (h *Handler) newReverseProxy(app *url.URL) *httputil.ReverseProxy {
	rewrite := upstream.Rewrite(app)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			rewrite(pr)
			if b, ok := pr.In.Body.(*replayBody); ok && pr.Out.Body != nil {
				pr.Out.Body = b.forUpstream()
			}
		},
		Transport:      h.cfg.Transport,
		ModifyResponse: h.settle,
		ErrorHandler:   h.upstreamError,
		// FlushInterval stays 0: an answer of known length is written in
		// one go, while one that streams (no Content-Length, or
		// text/event-stream) is flushed at once by ReverseProxy itself. A
		// negative interval would also flush the headers on their own from
		// a timer goroutine: a second write, and a goroutine, per answer.
		BufferPool: &h.copyBuffers,
		ErrorLog:   zap.NewStdLog(h.log.Named("reverseproxy")),
	}
}

// forwarding is one webhook on its way to the upstream and back. It is the
// ResponseWriter the upstream's answer is relayed through, marking it with
// its outcome, and it rides in the upstream request's context (ctx, found
// under forwardingKey) to the hooks ReverseProxy calls with the request or
// the answer alone: settle finds the lease there, upstreamError records why
// no answer came.
type forwarding struct {
	http.ResponseWriter
	// ctx is the upstream request's context, which carries the forwarding.
	ctx fwdCtx
	// wh is the webhook forwarded.
	wh *webhook
	// lease is the claim the webhook holds; nil when forwarded unchecked.
	lease *Lease
	// completes: the app answered 2xx, and the lease is to be completed
	// with lease.answered once the sender has the answer (settle).
	completes bool
	// hasher tracks a streamed body (and fingerprints it when there is a
	// lease); nil when the body is buffered (wh.body) or empty.
	hasher *hashingBody
	// outcome marks the answer; upstreamError replaces it.
	outcome string
	// outcomeValue holds the answer's HeaderOutcome value, so that
	// marking the answer allocates nothing (a Set allocates its slice).
	outcomeValue [1]string
	// status is the answer's, once written.
	status int
	// err is why no answer came from the upstream.
	err error
}

type forwardingKey struct{}

// fwdCtx is the upstream request's context: it holds its forwarding under
// forwardingKey, as context.WithValue would, without allocating a context
// of its own (it lives inside the forwarding).
type fwdCtx struct {
	context.Context
	f *forwarding
}

func (c *fwdCtx) Value(key any) any {
	if key == (forwardingKey{}) {
		return c.f
	}
	return c.Context.Value(key)
}

func forwardingFrom(ctx context.Context) *forwarding {
	f, _ := ctx.Value(forwardingKey{}).(*forwarding)
	return f
}

func (f *forwarding) WriteHeader(code int) {
	if code < 200 {
		// Informational answers (100 Continue, 103) pass as they are.
		f.ResponseWriter.WriteHeader(code)
		return
	}
	if f.status == 0 {
		f.status = code
		// Capped: adding a value to it cannot write past the array.
		f.outcomeValue[0] = f.outcome
		f.Header()[HeaderOutcome] = f.outcomeValue[:1:1]
	}
	f.ResponseWriter.WriteHeader(code)
}

func (f *forwarding) Write(p []byte) (int, error) {
	if f.status == 0 {
		f.WriteHeader(http.StatusOK)
	}
	return f.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach Flush on the real writer.
func (f *forwarding) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// fingerprint is the body's, or zero (unknown) when the upstream answered
// before a streamed body was read to its end.
func (f *forwarding) fingerprint() [32]byte {
	if f.wh.body != nil {
		return f.wh.bodySum()
	}
	if f.hasher != nil {
		fp, _ := f.hasher.sum()
		return fp
	}
	return [32]byte{}
}

// forward sends the webhook to the upstream and relays its answer, marked
// with outcome. A lease, when the webhook holds one, is settled by the
// answer (settle) or, when none came, released (upstreamError, or here
// after a panic).
//
// Once the request has reached the upstream, the sender leaving changes
// nothing: most apps keep working when their client hangs up, so the
// upstream request runs on a context of its own, bounded by
// UpstreamTimeout and by Abandon, and the app's answer settles the lease
// as if the sender were still there. A sender that leaves before its
// streamed body has all reached the upstream breaks that body off, which
// ends the upstream request: the app never got a complete request, and
// the lease is released.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, wh *webhook, outcome string, l *Lease) result {
	wh.fwd = forwarding{ResponseWriter: w, wh: wh, lease: l, outcome: outcome}
	f := &wh.fwd
	if wh.body == nil && r.Body != nil && r.Body != http.NoBody {
		// Only a lease's completion reads the fingerprint (settle).
		f.hasher = newHashingBody(r.Body, r.ContentLength, l != nil)
		r.Body = f.hasher
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.UpstreamTimeout)
	defer cancel()
	stop := context.AfterFunc(h.abandon, cancel)
	defer stop()
	if l != nil {
		// Runs during a panic too (completing a lease the app answered 2xx,
		// releasing any other); a no-op once settled.
		defer func() {
			if f.completes {
				_ = l.Complete(&f.ctx, l.answered)
				h.completing.remove(l)
			}
			_ = l.Release(ctx)
		}()
	}
	start := time.Now()
	f.ctx = fwdCtx{Context: ctx, f: f}
	aborted := h.relay(f, r.WithContext(&f.ctx))
	res := result{status: f.status, outcome: f.outcome, err: f.err, upstream: time.Since(start), aborted: aborted}
	h.m.upstream.Observe(res.upstream.Seconds())
	switch {
	case f.completes:
		res.answered = time.Since(wh.start)
		h.completeAfterAnswer(w, f, aborted)
		_, res.settleErr = l.settlement()
	case l != nil:
		// Released before the answer, within the exchange.
		res.settling, res.settleErr = l.settlement()
	}
	return res
}

// relay runs r through the ReverseProxy and reports whether it aborted the
// answer (http.ErrAbortHandler: copying it to the sender failed, who is
// most likely gone), for the caller to abort in turn once it has logged.
func (h *Handler) relay(w http.ResponseWriter, r *http.Request) (aborted bool) {
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				panic(p) // the stack still holds the frames that panicked
			}
			aborted = true
		}
	}()
	h.reverse.ServeHTTP(w, r)
	return false
}

// upstreamError answers when no answer came from the upstream: 504 when it
// ran past UpstreamTimeout, 502 when it could not be reached, broke off or
// Abandon gave up on it, and 400 when the sender's own streamed body broke
// off (it hung up or was too slow: the app never got a complete request).
// A lease is released before answering, so that a retry sent the moment
// the sender has this answer is forwarded rather than found in flight.
func (h *Handler) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusBadGateway
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		status = http.StatusGatewayTimeout
	}
	f := forwardingFrom(r.Context())
	if f == nil {
		// Not a webhook: no line of its own logs it.
		h.log.Warn("upstream error", zap.String("path", r.URL.Path), zap.Int("status", status), zap.Error(err))
		w.WriteHeader(status)
		return
	}
	f.outcome, f.err = outcomeUpstreamError, err
	if f.hasher != nil && f.hasher.readError() != nil {
		status, f.outcome = http.StatusBadRequest, outcomeBadRequest
	}
	if f.lease != nil {
		_ = f.lease.Release(r.Context()) // its error is in the lease, for the log line
	}
	w.WriteHeader(status)
}
