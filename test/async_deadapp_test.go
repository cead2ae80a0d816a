package test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	asyncdelivery "github.com/webhook-dedup/webhook-dedup/delivery"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// deadShape is one way an app fails to answer: a connection handled by
// fault gets no HTTP status back. A nil fault is a closed port.
type deadShape struct {
	name  string
	fault func(c net.Conn, untrusted *tls.Config)
	// https makes UPSTREAM_URL https://: the app, once back, serves TLS
	// with a certificate the proxy trusts.
	https bool
	// upstreamTimeout is UPSTREAM_TIMEOUT, which each unanswered attempt
	// takes; zero leaves the default, for a failure that comes at once.
	// (It bounds STORE_TIMEOUT too, to a quarter of it: 4 s leaves the
	// default second, which DATA_DIR's commits need on a loaded machine;
	// at 1 s, a quarter second, an accept was refused 503 at load 15.)
	upstreamTimeout time.Duration
}

// deadShapes are the ways an app gives no answer at all. Each must open
// the circuit breaker, as a refused connection always did.
var deadShapes = []deadShape{
	{name: "connection refused"},
	{name: "reset on accept", fault: func(c net.Conn, _ *tls.Config) {
		_ = c.(*net.TCPConn).SetLinger(0) // Close sends RST
		c.Close()
	}},
	{name: "closed on accept", fault: func(c net.Conn, _ *tls.Config) {
		c.Close() // FIN: the proxy reads EOF before any answer
	}},
	{name: "EOF before headers", fault: func(c net.Conn, _ *tls.Config) {
		defer c.Close()
		// The whole request read, so that Close sends FIN, not RST.
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Ty")
	}},
	{name: "TLS to a plain port", https: true, fault: func(c net.Conn, _ *tls.Config) {
		defer c.Close()
		buf := make([]byte, 4096)
		_, _ = c.Read(buf) // the ClientHello
		_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
	}},
	{name: "TLS with an untrusted certificate", https: true, fault: func(c net.Conn, untrusted *tls.Config) {
		defer c.Close()
		_ = tls.Server(c, untrusted).Handshake()
	}},
	{name: "timeout", upstreamTimeout: 4 * time.Second, fault: func(c net.Conn, _ *tls.Config) {
		defer c.Close()
		_, _ = io.Copy(io.Discard, c) // never answers; the proxy hangs up
	}},
}

// Pacing of the dead-app test: deadConcurrency slots, as many as the
// unanswered attempts in a row that open the breaker
// (asyncdelivery.Trip): one round of attempts that time out.
const (
	deadConcurrency = 5
	deadEvents      = 50
	// deadWindow is how long the outage lasts before the test counts,
	// from the first event queued (and, for a timeout, the round of
	// attempts that opens the breaker).
	deadWindow = 3 * time.Second
	// deadLongest is the longest outage the test allows for (a loaded
	// machine may take long to queue the events): RETRY_MAX_ATTEMPTS
	// is set above what the breaker lets out in that time.
	deadLongest = 30 * time.Second
)

// mostAttempts is how many attempts the breaker lets reach a dead app
// within d of the first event queued: the trip unanswered attempts that
// open it, those still under way when it opened (a slot each, but the
// trip's own), those taken ahead for the slots by then (as many as the
// slots), and then the probes, one at a time, the first
// asyncdelivery.FirstProbePause after it opened and each one after a pause
// twice the last, up to asyncdelivery.MaxProbePause.
func mostAttempts(d time.Duration) int {
	n := asyncdelivery.Trip(deadConcurrency) + 2*deadConcurrency - 1
	pause, at := asyncdelivery.FirstProbePause, asyncdelivery.FirstProbePause
	for at <= d {
		n++
		pause = min(2*pause, asyncdelivery.MaxProbePause)
		at += pause
	}
	return n
}

// faultListener is the app's port: it counts the connections reaching
// it, and hands each to fault while that is set, to Accept (the app's
// server) once it is not.
type faultListener struct {
	net.Listener
	untrusted *tls.Config
	accepted  atomic.Int64
	fault     atomic.Pointer[func(net.Conn, *tls.Config)]
	conns     chan net.Conn
	// stop is closed by Close; closed once the accepting has stopped.
	stop, closed chan struct{}
	stopOnce     sync.Once
}

// listenFaulty listens on addr, handing every connection to fault until
// it is cleared, and stops when the test ends.
func listenFaulty(t *testing.T, addr string, fault func(net.Conn, *tls.Config), untrusted *tls.Config) *faultListener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fl := &faultListener{Listener: l, untrusted: untrusted, conns: make(chan net.Conn), stop: make(chan struct{}), closed: make(chan struct{})}
	fl.fault.Store(&fault)
	go func() {
		defer close(fl.closed)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fl.accepted.Add(1)
			if f := fl.fault.Load(); f != nil {
				go (*f)(c, fl.untrusted)
				continue
			}
			select {
			case fl.conns <- c:
			case <-fl.stop:
				c.Close()
				return
			}
		}
	}()
	t.Cleanup(func() { fl.Close() })
	return fl
}

func (fl *faultListener) Close() error {
	fl.stopOnce.Do(func() { close(fl.stop) })
	return fl.Listener.Close()
}

func (fl *faultListener) Accept() (net.Conn, error) {
	select {
	case c := <-fl.conns:
		return c, nil
	case <-fl.closed:
		return nil, net.ErrClosed
	}
}

// TestAsyncDeadAppProbed: with events queued and the app not answering
// at all, in each way an app can (deadShapes), the proxy backs off the
// app as a whole, one probe at a time with growing pauses: over the
// outage, no more attempts reach the app than the breaker's pacing
// allows (mostAttempts), where the workers used to make as many as they
// could (318–329 connections a second to an app closing each connection
// on accept), and so no event runs out of attempts; once the app answers,
// every event is delivered.
func TestAsyncDeadAppProbed(t *testing.T) {
	t.Parallel()
	for _, shape := range deadShapes {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			deadAppRun(t, shape)
		})
	}
}

func deadAppRun(t *testing.T, shape deadShape) {
	// An app that listens while it fails takes its address from the
	// kernel: a free port picked beforehand can be taken by another test
	// before the bind. The refused shape, where nothing listens until the
	// app comes back, has to name its address first.
	addr := "127.0.0.1:0"
	if shape.fault == nil {
		addr = redistest.FreeAddr(t)
	}
	scheme := "http://"
	env := diskStore.env(t)
	var trusted, untrusted *tls.Config
	if shape.https {
		scheme = "https://"
		certs := redistest.NewCerts(t)
		env["SSL_CERT_FILE"] = certs.CAFile
		trusted = serverTLS(t, certs)
		untrusted = serverTLS(t, redistest.NewCerts(t)) // signed by a CA the proxy does not know
	}
	env["DELIVERY_CONCURRENCY"] = fmt.Sprint(deadConcurrency)
	env["RETRY_MAX_ATTEMPTS"] = fmt.Sprint(mostAttempts(deadLongest) + 1)
	if shape.upstreamTimeout > 0 {
		env["UPSTREAM_TIMEOUT"] = shape.upstreamTimeout.String()
	}
	var fl *faultListener
	if shape.fault != nil {
		fl = listenFaulty(t, addr, shape.fault, untrusted)
		addr = fl.Addr().String()
	}
	px := startProxy(t, asyncEnv(scheme+addr, env))
	px.awaitReady(t)

	start := time.Now()
	keys := queueEvents(t, px, github, deadEvents)
	time.Sleep(time.Until(start.Add(shape.upstreamTimeout + deadWindow))) // the outage itself, not a wait for a condition
	// Counted before the time is taken: every attempt counted came
	// within elapsed.
	attempts := int(sample(px.metrics(t), "webhook_dedup_deliveries_total", map[string]string{"result": "retry"}))
	conns, reached := 0, "none listens"
	if fl != nil {
		conns = int(fl.accepted.Load())
		reached = fmt.Sprint(conns)
	}
	elapsed := time.Since(start)
	if elapsed > deadLongest {
		t.Fatalf("the outage lasted %s, longer than the %s RETRY_MAX_ATTEMPTS allows for", elapsed, deadLongest)
	}
	most := mostAttempts(elapsed)
	summary := fmt.Sprintf("e2e async, app %s for %s with %d events queued: %d failed attempts, connections reaching the app: %s (at most %d allowed)",
		shape.name, elapsed.Round(time.Millisecond), len(keys), attempts, reached, most)
	t.Log(summary)
	fmt.Println(summary)
	if attempts > most {
		t.Errorf("%d failed attempts within %s of an app that does not answer (%s), want at most %d: the breaker's trip, those under way, and its probes",
			attempts, elapsed.Round(time.Millisecond), shape.name, most)
	}
	if conns > most {
		t.Errorf("%d connections reached an app that does not answer (%s) within %s, want at most %d",
			conns, shape.name, elapsed.Round(time.Millisecond), most)
	}
	px.awaitLog(t, "the app does not answer: delivering one probe at a time", 1)

	// The app comes back on the same address.
	var ln net.Listener = fl
	if fl == nil {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the app's port was taken meanwhile: %v", err)
		}
		ln = l
	}
	if trusted != nil {
		ln = tls.NewListener(ln, trusted)
	}
	app := newUpstreamOn(t, ln)
	if fl != nil {
		fl.fault.Store(nil)
	}
	// The probe out as the app comes back may meet the fault until
	// UPSTREAM_TIMEOUT; the next is due within a pause, at most
	// MaxProbePause, and is taken as a lone event is (taken); then the
	// queue goes at full concurrency (drained), each event after its
	// backoff (at most RETRY_MAX_INTERVAL).
	b := px.bounds()
	awaitEffects(t, app, keys, b.cfg.UpstreamTimeout+asyncdelivery.MaxProbePause+b.taken()+b.cfg.RetryMaxInterval+b.drained(len(keys), 0))
	if dead := sample(px.metrics(t), "webhook_dedup_deliveries_total", map[string]string{"result": "dead-lettered"}); dead > 0 {
		t.Errorf("%v events dead-lettered while the app was away (RETRY_MAX_ATTEMPTS %s): the probes ran them out of attempts", dead, env["RETRY_MAX_ATTEMPTS"])
	}
}

// serverTLS is the TLS configuration of a server presenting certs'
// server certificate.
func serverTLS(t *testing.T, certs *redistest.Certs) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certs.ServerCertFile, certs.ServerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}}
}
