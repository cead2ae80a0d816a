package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

var errAccept = errors.New("accept: the socket broke")

// brokenListener fails every Accept, as a listener whose socket broke does:
// http.Server.Serve returns that error.
type brokenListener struct{ net.Listener }

func (brokenListener) Accept() (net.Conn, error) { return nil, errAccept }

// TestServersOneFailingStopsTheOther: when one server's Serve fails, the
// other is shut down too and the failure is returned, rather than the
// process serving on half-alive until killed.
func TestServersOneFailingStopsTheOther(t *testing.T) {
	for _, failing := range []string{"public", "admin"} {
		t.Run(failing, func(t *testing.T) {
			listen := func() net.Listener {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close() })
				return ln
			}
			healthy, broken := listen(), listen()
			s := &servers{
				public: &http.Server{Handler: http.NotFoundHandler()}, publicLn: healthy,
				admin: &http.Server{Handler: http.NotFoundHandler()}, adminLn: brokenListener{broken},
				unready: func() {}, abandon: func() {}, active: &sync.WaitGroup{},
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
			case <-time.After(10 * time.Second):
				t.Fatal("run did not return after a server failed: the other server kept it waiting")
			}
			if c, err := net.Dial("tcp", healthy.Addr().String()); err == nil {
				c.Close()
				t.Error("the healthy server still accepts connections after the other failed")
			}
		})
	}
}
