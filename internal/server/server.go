// Package server builds the process's two HTTP servers from its
// configuration, so that the binary and the tests that hold the public
// server to its limits run the very same one.
package server

import (
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/config"
)

// writeSlack is the room a write deadline leaves beyond the work it bounds.
const writeSlack = 10 * time.Second

// Public is the server webhooks arrive on, serving h. Its limits are the
// configuration's (READ_HEADER_TIMEOUT, READ_TIMEOUT, IDLE_TIMEOUT,
// MAX_HEADER_BYTES); its write deadline covers the upstream's time, any
// in-flight wait and the body read, with room to spare. net/http's own
// errors go to log.
func Public(cfg *config.Config, h http.Handler, log *zap.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.UpstreamTimeout + cfg.InflightWait + cfg.ReadTimeout + writeSlack,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
	}
}

// Admin is the admin port's server (health, metrics, the admin API),
// serving h: small requests, answered at once.
func Admin(cfg *config.Config, h http.Handler, log *zap.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       cfg.IdleTimeout,
		ErrorLog:          zap.NewStdLog(log.Named("admin-http")),
	}
}
