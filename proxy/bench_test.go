package proxy_test

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/diskstore"
	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"
	"github.com/webhook-dedup/webhook-dedup/dedup/pgstore"
	"github.com/webhook-dedup/webhook-dedup/dedup/redisstore"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/pgtest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
	"github.com/webhook-dedup/webhook-dedup/internal/tracing"
	"github.com/webhook-dedup/webhook-dedup/policy"
	"github.com/webhook-dedup/webhook-dedup/providers"
	"github.com/webhook-dedup/webhook-dedup/proxy"
)

// BenchmarkHandler measures one webhook through the whole handler, with an
// upstream that answers at once without a network (so the numbers are the
// proxy's own work), beside a plain httputil.ReverseProxy on the same
// upstream. The logger is the production JSON logger writing to
// io.Discard: encoding the line is counted, writing it is not.
//
// Each iteration builds its request the way net/http would hand it over
// (one *http.Request, and for header events the ID string): those
// allocations are counted in every case alike, baseline included.
//
// Unique events cycle through 65536 IDs whose records expire after a
// millisecond, so the store stays the same size however long it runs.
func BenchmarkHandler(b *testing.B) {
	b.Run("reverseproxy", func(b *testing.B) {
		u, _ := url.Parse("http://upstream.test")
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(u)
				pr.SetXForwarded()
			},
			Transport: noopUpstream{},
		}
		runHandler(b, rp, newLoad(loadUniqueJSON, 0))
	})
	stores := []struct {
		name string
		// open returns the store, and the TracerProvider of a traced run
		// (nil: tracing off).
		open func(b *testing.B) (proxy.Store, trace.TracerProvider)
	}{
		{"memory", func(b *testing.B) (proxy.Store, trace.TracerProvider) {
			m := memstore.New()
			b.Cleanup(func() { _ = m.Close() })
			return m, nil
		}},
		// Tracing on, as serve sets it up (a batching SDK, the store's calls
		// traced), with an exporter that drops the batches: the spans' own
		// cost, not an export's.
		{"memory-traced", func(b *testing.B) (proxy.Store, trace.TracerProvider) {
			m := memstore.New()
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			b.Cleanup(func() {
				_ = tp.Shutdown(context.Background())
				_ = m.Close()
			})
			return tracing.Backend(m.Backend(), tp, "memory").Store, tp
		}},
		{"redis", func(b *testing.B) (proxy.Store, trace.TracerProvider) {
			r, err := redisstore.Open(redisstore.Config{URL: redistest.New(b).URL()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = r.Close() })
			return r, nil
		}},
	}
	// Async accept (item of its own: verify, claim and keep the request
	// in one store step, answer 202), with no delivery workers: the queue
	// only grows, by about a kilobyte and a half per event.
	queues := []struct {
		name string
		open func(b *testing.B) (proxy.Store, proxy.Queue)
	}{
		{"redis", func(b *testing.B) (proxy.Store, proxy.Queue) {
			r, err := redisstore.Open(redisstore.Config{URL: redistest.New(b).URL()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = r.Close() })
			return r, r
		}},
		// PostgreSQL on a server of its own (fsync off, as the tests run
		// it); one request at a time, so each enqueue is a statement of
		// its own: the group commit of concurrent enqueues is measured by
		// make bench.
		{"postgres", func(b *testing.B) (proxy.Store, proxy.Queue) {
			srv := pgtest.New(b)
			p, err := pgstore.Open(pgstore.Config{URL: srv.URL("postgres"), AutoMigrate: true, Timeout: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = p.Close() })
			return p, p
		}},
		{"disk", func(b *testing.B) (proxy.Store, proxy.Queue) {
			d, err := diskstore.Open(diskstore.Config{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = d.Close() })
			return d, d
		}},
	}
	for _, q := range queues {
		b.Run(q.name+"-async", func(b *testing.B) {
			store, queue := q.open(b)
			h := newBenchHandler(b, store, queue, loadUniqueJSON, nil)
			l := newLoad(loadUniqueJSON, 0)
			l.want = http.StatusAccepted
			runHandler(b, h, l)
		})
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			store, tp := st.open(b)
			for _, kind := range []loadKind{loadUniqueJSON, loadDuplicate, loadHeader} {
				b.Run(kind.String(), func(b *testing.B) {
					h := benchHandler(b, store, kind, tp)
					l := newLoad(kind, 0)
					if kind == loadDuplicate {
						// The first copy completes; every measured one is a duplicate.
						runOnce(b, h, l)
					}
					runHandler(b, h, l)
				})
			}
			// Many requests at once: on Redis, concurrent calls share
			// round trips (batched by redisstore), which a lone call never does.
			b.Run("unique-json-parallel", func(b *testing.B) {
				h := benchHandler(b, store, loadUniqueJSON, tp)
				var workers atomic.Int64
				b.SetBytes(int64(len(newLoad(loadUniqueJSON, 0).body)))
				b.ReportAllocs()
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					l := newLoad(loadUniqueJSON, int(workers.Add(1)))
					w := &sink{h: http.Header{}}
					for pb.Next() {
						clear(w.h)
						w.status = 0
						h.ServeHTTP(w, l.next())
						if w.status != http.StatusOK {
							b.Errorf("answered %d (%s), want 200", w.status, w.h.Get(proxy.HeaderOutcome))
							return
						}
					}
				})
			})
		})
	}
}

// benchHandler is the proxy as serve.go builds it, on store, traced by tp
// when it is not nil.
func benchHandler(b *testing.B, store proxy.Store, kind loadKind, tp trace.TracerProvider) *proxy.Handler {
	return newBenchHandler(b, store, nil, kind, tp)
}

// newBenchHandler is benchHandler, with every route async on queue when
// it is not nil.
func newBenchHandler(b *testing.B, store proxy.Store, queue proxy.Queue, kind loadKind, tp trace.TracerProvider) *proxy.Handler {
	opts := providers.Options{}
	if kind != loadDuplicate {
		opts.TTL = time.Millisecond
	}
	var routes []proxy.Route
	for _, r := range [][2]string{{"/stripe", "stripe"}, {"/github", "github"}} {
		src, err := providers.ParseSource(r[0], r[1], opts)
		if err != nil {
			b.Fatal(err)
		}
		rt := proxy.Route{Path: r[0], Source: src}
		if queue != nil {
			rt.Delivery = policy.AsyncDelivery
		}
		routes = append(routes, rt)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(io.Discard), zap.InfoLevel))
	u, _ := url.Parse("http://upstream.test")
	return newHandler(b, proxy.Config{
		Upstream:       u,
		Routes:         routes,
		Store:          store,
		Queue:          queue,
		KeyPrefix:      "bench:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":",
		Transport:      noopUpstream{},
		Logger:         log,
		Metrics:        proxy.NewMetrics(prometheus.NewRegistry()),
		TracerProvider: tp, // an untyped nil when off
	})
}

func runHandler(b *testing.B, h http.Handler, l *load) {
	w := &sink{h: http.Header{}}
	b.SetBytes(int64(len(l.body)))
	b.ReportAllocs()
	cpu := cpuTime()
	var answered time.Duration
	for b.Loop() {
		answered += runOne(b, h, l, w)
	}
	reportCPU(b, cpu)
	b.ReportMetric(float64(answered)/float64(b.N), "answer-ns/op")
}

// reportCPU reports the CPU time the process spent per iteration since
// from (cpu-ns/op): user and system time of all its threads, the runtime's
// and the Redis client's included, the Redis server's not. Unlike ns/op,
// it hardly moves with the machine's load: time spent waiting for a core
// or for the store is not counted.
func reportCPU(b *testing.B, from time.Duration) {
	b.ReportMetric(float64(cpuTime()-from)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the user and system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func runOnce(b *testing.B, h http.Handler, l *load) {
	runOne(b, h, l, &sink{h: http.Header{}})
}

// runOne serves one request and returns how long the sender waited for
// its answer: until the handler flushed it, or returned.
func runOne(b *testing.B, h http.Handler, l *load, w *sink) time.Duration {
	clear(w.h)
	w.status = 0
	w.flushed = time.Time{}
	start := time.Now()
	h.ServeHTTP(w, l.next())
	end := w.flushed
	if end.IsZero() {
		end = time.Now()
	}
	if want := cmp.Or(l.want, http.StatusOK); w.status != want {
		b.Fatalf("answered %d (%s), want %d", w.status, w.h.Get(proxy.HeaderOutcome), want)
	}
	return end.Sub(start)
}

type loadKind int

const (
	loadUniqueJSON loadKind = iota // Stripe-style, the ID in the body
	loadDuplicate                  // the same Stripe-style event again and again
	loadHeader                     // GitHub-style, the ID in X-GitHub-Delivery
)

func (k loadKind) String() string { return [...]string{"unique-json", "duplicate", "header"}[k] }

// load makes the requests of one kind.
type load struct {
	kind   loadKind
	worker int
	tmpl   http.Request
	body   []byte
	digit  int // where the ID's counter digits start in body; -1: fixed body
	n      int
	rd     reusableBody
	id     []byte // scratch for header IDs
	// want is the status every answer must have; if zero, 200.
	want int
}

// idDigits is the width of the counter inside unique JSON IDs.
const idDigits = 8

// newLoad makes requests of kind. Loads with different workers never share
// an event ID.
func newLoad(kind loadKind, worker int) *load {
	l := &load{kind: kind, worker: worker, digit: -1}
	path := "/stripe"
	h := http.Header{
		"Content-Type": {"application/json"},
		"User-Agent":   {"Stripe/1.0 (+https://stripe.com/docs/webhooks)"},
	}
	switch kind {
	case loadUniqueJSON:
		head := `{"id":"evt_bench_w` + strconv.Itoa(worker) + "_"
		l.body = []byte(head + strings.Repeat("0", idDigits) + benchStripeTail)
		l.digit = len(head)
	case loadDuplicate:
		l.body = []byte(`{"id":"evt_bench_duplicate` + benchStripeTail)
	case loadHeader:
		path = "/github"
		l.body = []byte(benchGitHubBody)
		h = http.Header{
			"Content-Type":      {"application/json"},
			"User-Agent":        {"GitHub-Hookshot/044aadd"},
			"X-Github-Event":    {"push"},
			"X-Github-Delivery": {""},
		}
	}
	l.tmpl = http.Request{
		Method:        http.MethodPost,
		URL:           &url.URL{Path: path},
		RequestURI:    path,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Host:          "proxy.test",
		RemoteAddr:    "127.0.0.1:40000",
		ContentLength: int64(len(l.body)),
	}
	l.tmpl = *l.tmpl.WithContext(context.Background())
	return l
}

// next returns the next request: a copy of the template, as net/http
// allocates one per request, with a fresh ID for unique kinds.
func (l *load) next() *http.Request {
	l.n = (l.n + 1) % (1 << 16)
	switch l.kind {
	case loadUniqueJSON:
		d := l.body[l.digit : l.digit+idDigits]
		v := l.n
		for i := len(d) - 1; i >= 0; i-- {
			d[i] = byte('0' + v%10)
			v /= 10
		}
	case loadHeader:
		l.id = append(strconv.AppendInt(append(l.id[:0], "72d3162e-cc78-11e3-81ab-w"...), int64(l.worker), 10), '-')
		l.id = strconv.AppendInt(l.id, int64(l.n), 10)
		l.tmpl.Header["X-Github-Delivery"][0] = string(l.id)
	}
	l.rd.Reset(l.body)
	r := new(http.Request)
	*r = l.tmpl
	r.Body = &l.rd
	return r
}

// reusableBody is a request body reset for each request.
type reusableBody struct{ bytes.Reader }

func (*reusableBody) Close() error { return nil }

// noopUpstream reads the request's body and answers 200 "ok", without a
// network.
type noopUpstream struct{}

func (noopUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{
		Status:        "200 OK",
		StatusCode:    http.StatusOK,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"text/plain"}},
		Body:          io.NopCloser(strings.NewReader("ok\n")),
		ContentLength: 3,
		Request:       r,
	}, nil
}

// sink is a ResponseWriter that keeps only the status, and when the
// answer was first flushed: handed to the sender before the handler
// returned.
type sink struct {
	h       http.Header
	status  int
	flushed time.Time
}

func (s *sink) Header() http.Header { return s.h }

func (s *sink) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
}

func (s *sink) Write(p []byte) (int, error) {
	s.WriteHeader(http.StatusOK)
	return len(p), nil
}

func (s *sink) Flush() {
	if s.flushed.IsZero() {
		s.flushed = time.Now()
	}
}

// benchStripeTail completes a Stripe-style event of about 1 KB after its ID.
const benchStripeTail = `","object":"event","api_version":"2024-06-20","created":1724160000,` +
	`"data":{"object":{"id":"pi_3PqRstUvWxYz0123456789ab","object":"payment_intent","amount":2000,` +
	`"amount_capturable":0,"amount_received":2000,"capture_method":"automatic",` +
	`"client_secret":"pi_3PqRstUvWxYz0123456789ab_secret_abcdefghijklmnop","confirmation_method":"automatic",` +
	`"created":1724159990,"currency":"usd","customer":"cus_QabcdefGhijkl","description":"Order #1234",` +
	`"latest_charge":"ch_3PqRstUvWxYz0123456789ab","livemode":false,"metadata":{"order_id":"1234"},` +
	`"payment_method":"pm_1PqRstUvWxYz0123456789ab","payment_method_types":["card"],` +
	`"receipt_email":"jenny.rosen@example.com","shipping":{"address":{"city":"San Francisco","country":"US",` +
	`"line1":"510 Townsend St","postal_code":"94103","state":"CA"},"name":"Jenny Rosen"},"status":"succeeded"}},` +
	`"livemode":false,"pending_webhooks":1,"request":{"id":"req_abcdefGhijkl",` +
	`"idempotency_key":"6b3f2a1e-2c4d-4e5f-8a9b-0c1d2e3f4a5b"},"type":"payment_intent.succeeded"}`

// benchGitHubBody is a trimmed push event of about 1 KB.
const benchGitHubBody = `{"ref":"refs/heads/main","before":"6113728f27ae82c7b1a177c8d03f9e96e0adf246",` +
	`"after":"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5","repository":{"id":186853002,` +
	`"name":"Hello-World","full_name":"Codertocat/Hello-World","private":false,"owner":{"name":"Codertocat",` +
	`"email":"21031067+Codertocat@users.noreply.github.com","login":"Codertocat","id":21031067,` +
	`"type":"User","site_admin":false},"html_url":"https://github.com/Codertocat/Hello-World",` +
	`"description":null,"fork":false,"default_branch":"main"},"pusher":{"name":"Codertocat",` +
	`"email":"21031067+Codertocat@users.noreply.github.com"},"sender":{"login":"Codertocat","id":21031067,` +
	`"type":"User","site_admin":false},"created":false,"deleted":false,"forced":false,"base_ref":null,` +
	`"compare":"https://github.com/Codertocat/Hello-World/compare/6113728f27ae...59b20b8d5c6f",` +
	`"commits":[{"id":"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5","tree_id":"f9d2a07e9488b91af2641b26b9407fe22a451433",` +
	`"distinct":true,"message":"Update README.md","timestamp":"2024-08-20T12:00:00-04:00",` +
	`"author":{"name":"Codertocat","email":"21031067+Codertocat@users.noreply.github.com","username":"Codertocat"},` +
	`"added":[],"removed":[],"modified":["README.md"]}],"head_commit":null}`
