package delivery

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/upstream"
)

// HeaderAttempt tells the app which attempt this is: 1 for the first.
const HeaderAttempt = "X-Webhook-Dedup-Attempt"

// Results of an attempt: the result label of webhook_dedup_deliveries_total.
const (
	resultSucceeded    = "succeeded"
	resultRetry        = "retry"
	resultDeadLettered = "dead-lettered"
)

// forwarder sends a queued request to the upstream through the Rewrite
// sync routes use (upstream.Rewrite), so the app receives what a sync
// route would have forwarded.
type forwarder struct {
	reverse *httputil.ReverseProxy
}

func newForwarder(app *url.URL, transport http.RoundTripper, completion upstream.Completion, log *zap.Logger) *forwarder {
	rewrite := upstream.Rewrite(app)
	return &forwarder{reverse: &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			rewrite(pr)
			// ReverseProxy wraps the body in a reader of its own, which
			// net/http cannot tell is in memory: it would send the
			// headers in one write and the body in another (two
			// syscalls, and two reads at the app). The queued body is in
			// memory (inbound): handed on as it is, the headers and the
			// body go in one write, as on a sync route (proxy's
			// replayBody).
			if pr.Out.Body != nil {
				pr.Out.Body = pr.In.Body
			}
		},
		Transport: transport,
		// A completing answer's body is kept for replay here, before the
		// ReverseProxy copies it into the outcome, exactly as a sync
		// route keeps it before relaying it to the sender.
		ModifyResponse: func(resp *http.Response) error {
			if o, ok := resp.Request.Context().Value(outcomeKey{}).(*outcome); ok && upstream.Completes(resp.StatusCode) {
				o.replay = completion.Capture(resp)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			w.(*outcome).err = err
		},
		ErrorLog:   zap.NewStdLog(log.Named("reverseproxy")),
		BufferPool: &upstream.BufferPool{},
	}}
}

// maxExcerpt bounds the start of a failed attempt's answer kept in its
// last_error: room for a framework's error message ("400 timestamp wasn't
// within tolerance"), not for a page.
const maxExcerpt = 200

// outcome is the app's answer to one attempt: the http.ResponseWriter the
// ReverseProxy relays it into. The body is read and dropped, but for its
// first bytes and what ModifyResponse kept for replay.
type outcome struct {
	header http.Header
	status int
	// head is the body's first maxExcerpt+1 bytes (the one more tells
	// that it was cut), for last_error.
	head []byte
	// replay is the body kept for replay (upstream.Completion.Capture);
	// nil when none was.
	replay []byte
	err    error
	// asked is whether the attempt went out to the app: the transport
	// set about getting a connection to it. False when it failed on our
	// side first (a request the transport refuses as it stands, or one
	// that could not be rebuilt): that tells nothing about the app.
	asked bool
}

// outcomeKey finds the attempt's outcome in the upstream request's
// context, where ModifyResponse, which sees only the answer, looks for it.
type outcomeKey struct{}

func (o *outcome) Header() http.Header { return o.header }
func (o *outcome) WriteHeader(code int) {
	if o.status == 0 && code >= 200 {
		o.status = code
	}
}
func (o *outcome) Write(p []byte) (int, error) {
	if o.status == 0 {
		o.status = http.StatusOK
	}
	if room := maxExcerpt + 1 - len(o.head); room > 0 {
		o.head = append(o.head, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// excerpt is the start of the app's answer as last_error shows it: at most
// maxExcerpt bytes, spaces around it trimmed, control characters and
// invalid UTF-8 escaped (so that it stays one line wherever it is shown),
// "…" where it was cut. Empty for an empty body.
func (o *outcome) excerpt() string {
	b, cut := o.head, len(o.head) > maxExcerpt
	if cut {
		b = b[:maxExcerpt]
		// Not half a character.
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1]
		}
	}
	b = bytes.TrimSpace(b)
	var sb strings.Builder
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&sb, `\x%02x`, b[0])
		case !unicode.IsPrint(r):
			q := strconv.QuoteRune(r) // '\n', '\x1b', '\u2028'
			sb.WriteString(q[1 : len(q)-1])
		default:
			sb.Write(b[:size])
		}
		b = b[size:]
	}
	if cut && sb.Len() > 0 {
		sb.WriteString("…")
	}
	return sb.String()
}

// send forwards req and returns the app's answer. A body that breaks off
// after the status arrived leaves the status standing (a sync route would
// have settled on it too).
func (f *forwarder) send(ctx context.Context, req *http.Request) (o *outcome) {
	o = &outcome{header: http.Header{}}
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				panic(v)
			}
			if o.status == 0 {
				o.err = errors.New("delivery: the app's answer broke off")
			}
		}
	}()
	// GetConn comes once the transport has checked the request and sets
	// about reaching the app: whatever fails from then on is the app's
	// (or the way to it), whatever failed before is ours.
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GetConn: func(string) { o.asked = true }})
	f.reverse.ServeHTTP(o, req.WithContext(context.WithValue(ctx, outcomeKey{}, o)))
	return o
}

// inbound rebuilds the request as the proxy received it.
func inbound(req dedup.Request, attempt int) (*http.Request, error) {
	u, err := url.ParseRequestURI(req.RequestURI)
	if err != nil {
		return nil, fmt.Errorf("delivery: the queued request's URI %q: %w", req.RequestURI, err)
	}
	r := &http.Request{
		Method:        req.Method,
		URL:           u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        req.Header.Clone(),
		Body:          http.NoBody,
		ContentLength: int64(len(req.Body)),
		Host:          req.Host,
		RemoteAddr:    req.RemoteAddr,
		RequestURI:    req.RequestURI,
	}
	if r.Header == nil {
		r.Header = http.Header{}
	}
	if len(req.Body) > 0 {
		r.Body = io.NopCloser(bytes.NewReader(req.Body))
	}
	if req.TLS {
		r.TLS = &tls.ConnectionState{} // only its presence matters: X-Forwarded-Proto https
	}
	r.Header.Set(HeaderAttempt, strconv.Itoa(attempt))
	return r, nil
}

// attempt delivers h's event once, in lane l, and settles it; probe says
// that l's breaker let it out as its probe, and start is when its lane's
// pacer let it start (pacer.waitFor): the attempt's start, as its history
// records it (attempts_history's at), which the rate spaces.
func (w *Workers) attempt(ctx context.Context, l *lane, h *held, probe bool, start time.Time) {
	d := h.use()
	ctx, span := w.startAttempt(ctx, d)
	defer span.end()
	fields := []zap.Field{zap.String("event", d.Claim.Key), zap.Int("attempt", d.Attempt)}
	// How the event is settled, as the proxy decided when it accepted it.
	route, ttl, namespace := d.Request.Route, d.Request.TTL, d.Request.Namespace
	var o *outcome
	req, err := inbound(d.Request, d.Attempt)
	if err != nil {
		o = &outcome{err: err}
	} else {
		if w.resign(req, d.Request, fields) {
			fields = append(fields, zap.Bool("resigned", true))
		}
		actx, cancel := context.WithTimeout(ctx, w.cfg.UpstreamTimeout)
		o = w.forward.send(actx, req)
		cancel()
	}
	span.answered(o)
	now := w.cfg.Now()
	// An attempt that got no HTTP status from the app, whatever the
	// error (refused, reset, closed before an answer, a TLS failure, a
	// timeout), is unanswered; one the app never saw, or that shutdown
	// cut short, is not the app's to count.
	if o.asked && ctx.Err() == nil {
		switch opened, closed := l.breaker.record(o.status != 0, probe, now); {
		case opened:
			w.log.Warn("the app does not answer: delivering one probe at a time, with growing pauses, until it does; queued events keep their place", zap.String("route", l.label), zap.Error(o.err))
		case closed:
			w.log.Info("the app answers again: delivering at full concurrency", zap.String("route", l.label))
		}
	}
	fields = append(fields, zap.String("route", route), zap.Int("app_status", o.status), zap.Duration("duration", now.Sub(start)))
	// Every settling write below records this attempt in the event's
	// history, in the same write (dedup.Delivery.Began).
	timed := func(d dedup.Delivery) dedup.Delivery { d.Began, d.Took = start, now.Sub(start); return d }

	if o.err == nil && upstream.Completes(o.status) {
		if ttl <= 0 {
			ttl = w.cfg.DefaultTTL
		}
		sum := sha256.Sum256(d.Request.Body)
		res := w.completion.Result(o.status, o.header, sum, o.replay)
		err := w.succeed(ctx, h, timed, res, ttl, fields)
		w.cfg.Metrics.delivered(route, resultSucceeded, d.Attempt)
		fields = append(fields, zap.String("result", resultSucceeded))
		span.settled(resultSucceeded, "")
		if err == nil && w.cfg.BodyFingerprint {
			bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.StoreTimeout)
			w.rememberBody(bctx, namespace, sum, res, ttl, fields)
			cancel()
		}
		w.settled(fields, "delivered", err)
		return
	}

	// reason is logged; lastError, kept with the event (last_error), adds
	// the start of the app's answer, which is never logged: the app may
	// quote the webhook's body in it.
	reason := ""
	switch {
	case ctx.Err() != nil:
		reason = errAbandoned.Error()
	case o.err != nil:
		reason = o.err.Error()
	default:
		reason = "the app answered " + strconv.Itoa(o.status)
	}
	lastError := reason
	if x := o.excerpt(); x != "" && o.err == nil && ctx.Err() == nil {
		lastError += ": " + x
	}
	fields = append(fields, zap.String("reason", reason))
	if ctx.Err() != nil {
		span.settled(resultRetry, reason)
		// Shutdown: the event goes back, due at once for the next process.
		err := w.write(ctx, h, func(ctx context.Context, d dedup.Delivery) error {
			return w.cfg.Queue.Retry(ctx, timed(d), now, o.status, lastError)
		})
		w.settled(append(fields, zap.String("result", resultRetry)), "delivery cancelled by shutdown: queued again", err)
		return
	}
	if pause, ok := appPause(o, now, w.cfg.MaxInterval); ok {
		// The app asked for a pause: the whole route's, not only this
		// event's (its retry waits at least as long, see backoff).
		l.pace.pause(now.Add(pause))
		fields = append(fields, zap.Duration("route_paused_for", pause))
	}
	// The time the route held its attempts back (its rate, a pause) is not
	// the event's to count: it is not dead-lettered sooner for waiting.
	if (w.cfg.MaxAttempts > 0 && d.Attempt >= w.cfg.MaxAttempts) || (!d.AcceptedAt.IsZero() && now.Sub(d.AcceptedAt)-l.pace.heldSince(d.AcceptedAt) >= w.cfg.MaxAge) || req == nil {
		err := w.write(ctx, h, func(ctx context.Context, d dedup.Delivery) error {
			return w.cfg.Queue.Fail(ctx, timed(d), o.status, lastError, w.cfg.DeadLetterTTL)
		})
		w.cfg.Metrics.delivered(route, resultDeadLettered, d.Attempt)
		fields = append(fields, zap.String("result", resultDeadLettered), zap.Stringer("kept", w.cfg.DeadLetterTTL))
		span.settled(resultDeadLettered, reason)
		if err == nil {
			ns, id := dedup.SplitEventKey(w.cfg.KeyPrefix, namespace, d.Claim.Key)
			w.log.Error("delivery failed for the last time: dead-lettered", append(fields,
				zap.String("namespace", ns), zap.String("event_id", id), zap.String("retry_with", retryHint(ns, id)))...)
			return
		}
		w.settled(fields, "", err)
		return
	}
	next := now.Add(w.backoff(d.Attempt, o))
	span.settled(resultRetry, reason)
	err = w.write(ctx, h, func(ctx context.Context, d dedup.Delivery) error {
		return w.cfg.Queue.Retry(ctx, timed(d), next, o.status, lastError)
	})
	w.cfg.Metrics.delivered(route, resultRetry, d.Attempt)
	w.settled(append(fields, zap.String("result", resultRetry), zap.Time("next_attempt_at", next)), "delivery failed: retrying later", err)
}

// retryHint says how an operator puts the dead letter ns/id back in the
// queue, with both filled in so that it can be pasted: the CLI (its
// arguments quoted for a shell) or the admin API (path-escaped).
func retryHint(ns, id string) string {
	return "webhook-dedup retry " + shellQuote(ns) + " " + shellQuote(id) +
		", or POST /v1/events/" + url.PathEscape(ns) + "/" + url.PathEscape(id) + "/retry on the admin port"
}

// shellQuote is s as one POSIX shell word: quoted unless it is plainly
// safe (an event ID may hold anything the sender put in it).
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@%+=,", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// resign gives req a fresh signature when the route signs one (see
// Config.Resigners) and reports whether it did. A request that does not
// verify (queued unverified, or signed with a secret no longer
// configured) keeps the headers it was queued with, and a warning says
// why.
func (w *Workers) resign(req *http.Request, queued dedup.Request, fields []zap.Field) bool {
	if w.cfg.Resigners == nil {
		return false
	}
	r := w.cfg.Resigners(queued.Route, queued.Namespace)
	if r == nil {
		return false
	}
	if err := r.Resign(req.Header, queued.Body, w.cfg.Now()); err != nil {
		w.log.Warn("not signed again: forwarded with the signature it was queued with, which the app may refuse as too old",
			append(fields[:len(fields):len(fields)], zap.String("route", queued.Route), zap.String("namespace", queued.Namespace), zap.Error(err))...)
		return false
	}
	return true
}

// rememberBody records a delivered body's fingerprint under a key of its
// own, as a sync route's completion does (DEDUP_BODY_FINGERPRINT). A
// failure is logged and leaves the event's own record, which holds.
func (w *Workers) rememberBody(ctx context.Context, namespace string, sum [32]byte, res dedup.Result, ttl time.Duration, fields []zap.Field) {
	switch {
	case namespace == "":
		w.log.Warn("delivered body not recorded under its fingerprint: no route recognises the request any more (ROUTES changed since it was queued)", fields...)
		return
	case w.cfg.Bodies == nil:
		w.log.Warn("delivered body not recorded under its fingerprint: no store to record it in (Bodies is not set)", fields...)
		return
	}
	key := dedup.BodyKey(w.cfg.KeyPrefix, namespace, sum)
	if err := upstream.RememberBody(ctx, w.cfg.Bodies, key, res, w.cfg.Lease, ttl); err != nil {
		w.log.Warn("recording a delivered body's fingerprint failed: the same body under another event ID is not answered as a duplicate", append(fields, zap.Error(err))...)
	}
}

// settled logs an attempt's line, or the failure to record its outcome.
func (w *Workers) settled(fields []zap.Field, msg string, err error) {
	switch {
	case errors.Is(err, dedup.ErrNotOwner):
		w.log.Warn("delivery attempt ended after its lease ran out and another worker took the event over: the app may see it twice", fields...)
	case err != nil:
		w.log.Error("recording a delivery attempt's outcome failed: the event is delivered again once its lease runs out", append(fields, zap.Error(err))...)
	default:
		w.log.Info(msg, fields...)
	}
}

// backoff is how long to wait after the attempt-th attempt failed with o:
// full jitter over an exponentially growing ceiling, and no less than a
// Retry-After the app sent with a 429 or a 503 (appPause), all within
// MaxInterval.
func (w *Workers) backoff(attempt int, o *outcome) time.Duration {
	ceiling := w.cfg.MaxInterval
	if shift := attempt - 1; shift < 62 {
		if c := w.cfg.InitialInterval << shift; c > 0 && c < ceiling && c>>shift == w.cfg.InitialInterval {
			ceiling = c
		}
	}
	d := w.cfg.Jitter(ceiling)
	if pause, ok := appPause(o, w.cfg.Now(), w.cfg.MaxInterval); ok {
		d = max(d, pause)
	}
	return d
}

// appPause is the pause the app asked for with o: the Retry-After of a 429
// or a 503, at most most. False when it asked for none.
func appPause(o *outcome, now time.Time, most time.Duration) (time.Duration, bool) {
	if o.status != http.StatusTooManyRequests && o.status != http.StatusServiceUnavailable {
		return 0, false
	}
	ra, ok := retryAfter(o.header.Get("Retry-After"), now)
	return min(ra, most), ok
}

// retryAfter parses a Retry-After value: delay seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		if secs > int64(365*24*time.Hour/time.Second) {
			secs = int64(365 * 24 * time.Hour / time.Second)
		}
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

func uniformJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}
