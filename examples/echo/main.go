// Command echo is a stand-in for the app behind webhook-dedup, for trying
// the proxy out: it answers every request 200 {"ok":true} and prints what
// it received (method, path, the headers that matter to webhooks, body)
// to stdout, so you can see which deliveries reached the app.
//
//	go run ./examples/echo            # listens on 127.0.0.1:3000
//	go run ./examples/echo -addr :4000
//	ADDR=:3000 echo                   # its image: ADDR=:3000 is set there
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// shownHeaders are printed when a request carries them: the event IDs of
// the common presets, and what the proxy adds on its way to the app.
var shownHeaders = []string{
	"Content-Type",
	"X-GitHub-Delivery",
	"Stripe-Signature",
	"X-Shopify-Webhook-Id",
	"Webhook-Id",
	"X-Webhook-Dedup-Attempt",
	"X-Forwarded-For",
	"X-Forwarded-Host",
	"X-Forwarded-Proto",
}

// maxBody is the most of a body that is read and printed.
const maxBody = 1 << 20

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}

// run serves until ctx is cancelled. The address is -addr, else ADDR
// (how a container is told, e.g. the Kubernetes manifests' 127.0.0.1:3000
// beside the sidecar), else 127.0.0.1:3000.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("echo", flag.ContinueOnError)
	def := getenv("ADDR")
	if def == "" {
		def = "127.0.0.1:3000"
	}
	addr := fs.String("addr", def, "address to listen on (default: $ADDR, else 127.0.0.1:3000)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           handler(stdout),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	fmt.Fprintf(stdout, "echo: listening on http://%s\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// handler prints each request to out, one block per request, and answers
// 200 {"ok":true}.
func handler(out io.Writer) http.Handler {
	var mu sync.Mutex // one request's block is never split by another's
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s\n", r.Method, r.URL.RequestURI())
		for _, name := range shownHeaders {
			if v := r.Header.Values(name); len(v) > 0 {
				fmt.Fprintf(&b, "  %s: %s\n", name, strings.Join(v, ", "))
			}
		}
		switch {
		case err != nil:
			fmt.Fprintf(&b, "  body: (unreadable: %v)\n", err)
		case len(body) > 0:
			fmt.Fprintf(&b, "  body: %s\n", body)
		}
		mu.Lock()
		_, _ = io.WriteString(out, b.String())
		mu.Unlock()

		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`+"\n")
	})
}
