package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"
)

// The tool is its own upstream and its own plain Go proxy: `bench upstream`
// and `bench goproxy` run them as separate processes, so each can be pinned
// and measured like webhook-dedup and nginx.

// runUpstream is the app: it reads the whole body and answers 200.
func runUpstream(args []string) error {
	fs := flag.NewFlagSet("upstream", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	delay := fs.Duration("delay", 0, "how long the app works on each request (a slow app)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ok := []byte("ok\n")
	return serve(*listen, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		if *delay > 0 {
			t := time.NewTimer(*delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		w.Header()["Content-Type"] = []string{"text/plain"}
		_, _ = w.Write(ok)
	}))
}

// runGoProxy is the floor a Go proxy cannot beat: httputil.ReverseProxy
// with nothing added, on a transport sized like webhook-dedup's.
func runGoProxy(args []string) error {
	fs := flag.NewFlagSet("goproxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	upstream := fs.String("upstream", "", "upstream base URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" {
		return fmt.Errorf("goproxy: -upstream %q is not a URL", *upstream)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	t.DisableCompression = true
	return serve(*listen, &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		Transport: t,
	})
}

func serve(addr string, h http.Handler) error {
	s := &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	fmt.Fprintf(os.Stderr, "serving on %s\n", addr)
	return s.ListenAndServe()
}
