// Package e2e runs the built webhook-dedup binary in front of an app that
// verifies Stripe's signatures with stripe-go, unmodified: a copy of the
// smallest part of test/'s harness (build, start, stop), since stripe-go
// belongs in this module only.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"
)

// binary is the webhook-dedup executable TestMain builds from the
// repository root.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "webhook-dedup-sdk-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "webhook-dedup")
	// Built as a release is (the Makefile, the Dockerfile): the binary
	// users run, and on a cold build cache the dependencies the main
	// module's tests compiled for theirs serve it.
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", binary, ".")
	build.Dir = filepath.Join("..", "..", "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build in %s: %v\n%s", build.Dir, err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const (
	secret     = "whsec_sdk_e2e_stripe_signing_secret"
	adminToken = "sdk-e2e-admin-token"
)

// attempt is one request the app received and what it answered.
type attempt struct {
	number string // X-Webhook-Dedup-Attempt
	err    error  // stripe-go's verdict; nil: accepted
}

// stripeApp is an app as Stripe's docs write it: webhook.ConstructEvent
// with the default 300 s tolerance, 400 with the error when it refuses.
func stripeApp(t *testing.T) (url string, attempts <-chan attempt) {
	ch := make(chan attempt, 16)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, err := webhook.ConstructEvent(body, r.Header.Get("Stripe-Signature"), secret)
		ch <- attempt{r.Header.Get("X-Webhook-Dedup-Attempt"), err}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(app.Close)
	return app.URL, ch
}

// proxy is a running webhook-dedup.
type proxy struct {
	addr, admin string
	logs        *bytes.Buffer
}

// start runs the binary with env until the test ends, once /healthz answers.
func start(t *testing.T, env map[string]string) *proxy {
	t.Helper()
	p := &proxy{addr: freeAddr(t), admin: freeAddr(t), logs: &bytes.Buffer{}}
	cmd := exec.Command(binary)
	cmd.Env = []string{"LISTEN_ADDR=" + p.addr, "ADMIN_ADDR=" + p.admin, "LOG_FORMAT=json"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("webhook-dedup's logs:\n%s", p.logs)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := http.Get("http://" + p.admin + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("webhook-dedup exited before it served: %v\n%s", err, p.logs)
		case <-ctx.Done():
			t.Fatalf("webhook-dedup did not serve within 10 s\n%s", p.logs)
		case <-tick.C:
		}
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// env is an async Stripe route on the embedded store on disk, whose proxy
// accepts signatures up to 15 minutes old: a sender's retry signed 10
// minutes ago is queued, and reaches the app past stripe-go's 300 s.
func env(t *testing.T, app string, more ...string) map[string]string {
	e := map[string]string{
		"UPSTREAM_URL": app, "ROUTES": "/webhooks/stripe=stripe;async", "DATA_DIR": t.TempDir(),
		"STRIPE_WEBHOOK_SECRET": secret, "SIGNATURE_TOLERANCE": "15m", "ADMIN_TOKEN": adminToken,
		"RETRY_INITIAL_INTERVAL": "10ms", "RETRY_MAX_INTERVAL": "50ms",
	}
	for i := 0; i+1 < len(more); i += 2 {
		e[more[i]] = more[i+1]
	}
	return e
}

// send posts a Stripe event signed at signedAt and returns the answer's status.
func send(t *testing.T, p *proxy, id string, signedAt time.Time) int {
	t.Helper()
	body := []byte(fmt.Sprintf(`{"id":%q,"object":"event","api_version":%q,"type":"invoice.paid"}`, id, stripe.APIVersion))
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: signedAt})
	req, err := http.NewRequest(http.MethodPost, "http://"+p.addr+"/webhooks/stripe", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Stripe-Signature", signed.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func next(t *testing.T, attempts <-chan attempt) attempt {
	t.Helper()
	select {
	case a := <-attempts:
		return a
	case <-time.After(20 * time.Second):
		t.Fatal("the app received no attempt within 20 s")
		return attempt{}
	}
}

// TestAsyncRetryPastToleranceVerifiesWithStripeGo: the first attempt of an
// event signed 10 minutes ago is past stripe-go's tolerance; the proxy
// signs it again (RESIGN=auto, the default), so the app accepts it.
func TestAsyncRetryPastToleranceVerifiesWithStripeGo(t *testing.T) {
	t.Parallel()
	app, attempts := stripeApp(t)
	p := start(t, env(t, app))
	if got := send(t, p, "evt_sdk_e2e_1", time.Now().Add(-10*time.Minute)); got != http.StatusAccepted {
		t.Fatalf("sender answered %d, want 202", got)
	}
	if a := next(t, attempts); a.number != "1" || a.err != nil {
		t.Fatalf("attempt %s: stripe-go says %v, want the first attempt accepted", a.number, a.err)
	}
}

// TestAsyncRetryNotResignedIsRefused: with RESIGN=off the same event is
// refused by stripe-go on every attempt, and last_error tells the operator
// why, in the app's own words.
func TestAsyncRetryNotResignedIsRefused(t *testing.T) {
	t.Parallel()
	app, attempts := stripeApp(t)
	p := start(t, env(t, app, "RESIGN", "off"))
	if got := send(t, p, "evt_sdk_e2e_2", time.Now().Add(-10*time.Minute)); got != http.StatusAccepted {
		t.Fatalf("sender answered %d, want 202", got)
	}
	if a := next(t, attempts); a.err == nil {
		t.Fatal("stripe-go accepted a 10-minute-old signature: this test proves nothing")
	}
	// The second attempt comes once the first's outcome is stored.
	if a := next(t, attempts); a.number != "2" || a.err == nil {
		t.Fatalf("attempt %s: stripe-go says %v, want the retry refused too", a.number, a.err)
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+p.admin+"/v1/events/stripe/evt_sdk_e2e_2", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ev struct {
		LastError string `json:"last_error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ev); err != nil {
		t.Fatal(err)
	}
	if want := "the app answered 400: " + webhook.ErrTooOld.Error(); !strings.HasPrefix(ev.LastError, want) {
		t.Fatalf("last_error %q, want it to start %q", ev.LastError, want)
	}
}
