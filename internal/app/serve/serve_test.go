package serve

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"
	"go.uber.org/zap"
)

var errAccept = errors.New("accept: the socket broke")

// brokenListener fails every Accept, as a listener whose socket broke does:
// http.Server.Serve returns that error.
type brokenListener struct{ net.Listener }

func (brokenListener) Accept() (net.Conn, error) { return nil, errAccept }

// listen is a loopback listener, closed when t ends.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestServersOneFailingStopsTheOther: when one server's Serve fails, the
// other is shut down too and the failure is returned, rather than the
// process serving on half-alive until killed.
func TestServersOneFailingStopsTheOther(t *testing.T) {
	for _, failing := range []string{"public", "admin"} {
		t.Run(failing, func(t *testing.T) {
			healthy, broken := listen(t), listen(t)
			s := &servers{
				public: &http.Server{Handler: http.NotFoundHandler()}, publicLn: healthy,
				admin: &http.Server{Handler: http.NotFoundHandler()}, adminLn: brokenListener{broken},
				unready: func() {}, abandon: func() {}, requests: &inflight{},
				timeout: time.Second, log: zap.NewNop(),
			}
			if failing == "public" {
				s.publicLn, s.adminLn = s.adminLn, s.publicLn
			}
			done := make(chan error, 1)
			go func() { done <- s.run(context.Background()) }()
			select {
			case err := <-done:
				if !errors.Is(err, errAccept) {
					t.Errorf("run returned %v, want the failed server's %v", err, errAccept)
				}
			case <-time.After(s.delay + s.timeout + exitGrace + loadMargin): // the shutdown's own bound
				t.Fatal("run did not return after a server failed: the other server kept it waiting")
			}
			if c, err := net.Dial("tcp", healthy.Addr().String()); err == nil {
				c.Close()
				t.Error("the healthy server still accepts connections after the other failed")
			}
		})
	}
}

func TestDescribeRoutes(t *testing.T) {
	cfg, err := config.Load(map[string]string{
		"UPSTREAM_URL": "http://127.0.0.1:3000", "GITHUB_WEBHOOK_SECRET": "s",
		"ROUTES": "/gh=github,/stripe=stripe,/acme=header:X-Acme-Id",
	})
	if err != nil {
		t.Fatal(err)
	}
	routes, _, err := buildRoutes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/gh=github (signatures verified: github)",
		"/stripe=stripe (signatures not verified)",
		"/acme=header:X-Acme-Id (signatures not verified)",
	}
	if got := describeRoutes(cfg, routes); !slices.Equal(got, want) {
		t.Errorf("describeRoutes = %q\nwant %q", got, want)
	}
}

// TestReadyCheckUpstream: with READY_CHECK_UPSTREAM's check, /readyz
// follows the app (any HTTP answer, a 404 too, counts as up); without it,
// the store alone.
func TestReadyCheckUpstream(t *testing.T) {
	app := httptest.NewServer(http.NotFoundHandler())
	appURL, _ := url.Parse(app.URL)
	mem := memstore.New()
	t.Cleanup(func() { _ = mem.Close() })
	checked := httptest.NewServer(admin.New(admin.Config{Store: mem, Gatherer: prometheus.NewRegistry(), Upstream: upstreamAnswers(appURL)}))
	t.Cleanup(checked.Close)
	plain := httptest.NewServer(admin.New(admin.Config{Store: mem, Gatherer: prometheus.NewRegistry()}))
	t.Cleanup(plain.Close)
	ready := func(srv *httptest.Server) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := ready(checked); code != http.StatusOK {
		t.Errorf("app up (answering 404): /readyz %d %s, want 200", code, body)
	}
	app.Close()
	if code, body := ready(checked); code != http.StatusServiceUnavailable || !strings.Contains(body, "upstream unavailable") {
		t.Errorf("app down: /readyz %d %s, want 503 upstream unavailable", code, body)
	}
	if code, body := ready(plain); code != http.StatusOK {
		t.Errorf("app down, check off: /readyz %d %s, want 200", code, body)
	}
}
