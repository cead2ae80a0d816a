package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/diskstore"
	"github.com/webhook-dedup/webhook-dedup/internal/app/serve"
	"github.com/webhook-dedup/webhook-dedup/internal/app/stores"
	"go.uber.org/zap"
)

// versionLine is what the binary says about itself, in one line.
func versionLine(build serve.Build) string {
	return fmt.Sprintf("webhook-dedup %s (commit %s, %s)", build.Version, build.Commit, runtime.Version())
}

// healthcheck asks the local admin port's /readyz, for container health
// checks in images that have no curl. Exit 0 when ready, 1 otherwise.
func healthcheck(ctx context.Context, environ map[string]string, stdout io.Writer) error {
	base, err := adminURL(environ)
	if err != nil {
		return usageError(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: /readyz answered %s", resp.Status)
	}
	_, err = fmt.Fprintln(stdout, "ready")
	return err
}

// adminURL is the base URL of this pod's admin port, from ADMIN_ADDR.
func adminURL(environ map[string]string) (string, error) {
	addr := environ["ADMIN_ADDR"]
	if addr == "" {
		addr = ":9090"
	}
	return loopbackURL("ADMIN_ADDR", addr)
}

// loopbackURL is the base URL of addr, the listening address variable
// configures, as this host reaches it: a wildcard host (":9090") on
// loopback.
func loopbackURL(variable, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%s: %w", variable, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// storeCommand runs inspect or forget. With ADMIN_TOKEN set it asks the
// running proxy's admin API, which works whatever the store (the embedded
// one included) and clears that proxy's cache on a forget; otherwise it
// goes straight to the configured shared store.
func storeCommand(ctx context.Context, cmd string, args []string, environ map[string]string, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if environ["ADMIN_TOKEN"] != "" {
		return adminCommand(ctx, cmd, args[0], args[1], environ, stdout)
	}
	cfg, b, err := openStoreForCommand(ctx, environ, "ADMIN_TOKEN (with ADMIN_ADDR): required to reach the running proxy's admin API, since the embedded store lives inside that process; or configure the shared store (REDIS_URL, DATABASE_URL, …) to reach it directly", false)
	if err != nil {
		return err
	}
	defer b.Close()
	st := b.Store
	ns, id := args[0], args[1]
	if cmd == "forget" {
		existed, err := admin.Forget(ctx, st, cfg.KeyPrefix, ns, id)
		if err != nil {
			return err
		}
		if !existed {
			return fmt.Errorf("no record for %s %s", ns, id)
		}
		_, err = fmt.Fprintf(stdout, "forgot %s %s\n", ns, id)
		return err
	}
	rec, err := st.Lookup(ctx, dedup.EventKey(cfg.KeyPrefix, ns, id))
	if errors.Is(err, dedup.ErrNotFound) {
		return fmt.Errorf("no record for %s %s", ns, id)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(admin.NewEvent(ns, id, rec, time.Now()))
}

// adminCommand runs inspect or forget through the admin API at ADMIN_ADDR.
func adminCommand(ctx context.Context, cmd, ns, id string, environ map[string]string, stdout io.Writer) error {
	method := http.MethodGet
	if cmd == "forget" {
		method = http.MethodDelete
	}
	body, err := adminRequest(ctx, method, "/v1/events/"+url.PathEscape(ns)+"/"+url.PathEscape(id), environ)
	var nf *adminNotFoundError
	switch {
	case errors.Is(err, dedup.ErrNotFound):
		return fmt.Errorf("no record for %s %s", ns, id)
	case errors.As(err, &nf):
		// The events API answers a plain 404 only when it is off.
		return fmt.Errorf("admin API at %s: not enabled there (the proxy has no ADMIN_TOKEN)", nf.base)
	case err != nil:
		return err
	case cmd == "forget":
		_, err = fmt.Fprintf(stdout, "forgot %s %s\n", ns, id)
	default:
		_, err = stdout.Write(body)
	}
	return err
}

// openStoreForCommand opens the configured shared store for a command run
// without ADMIN_TOKEN. The embedded in-memory store lives inside the
// running proxy, out of reach: memoryErr says so. With needQueue, a store
// that keeps no async queue is refused before it is opened.
func openStoreForCommand(ctx context.Context, environ map[string]string, memoryErr string, needQueue bool) (*config.Config, dedup.Backend, error) {
	cfg, err := config.LoadForStore(environ)
	if err != nil {
		return nil, dedup.Backend{}, fmt.Errorf("configuration:\n%w", err)
	}
	if cfg.Store.Kind == config.StoreMemory {
		return nil, dedup.Backend{}, usageError(errors.New(memoryErr))
	}
	if needQueue && !stores.Features(cfg.Store.Kind).Queue {
		return nil, dedup.Backend{}, usageError(fmt.Errorf("%s: the %s store keeps no async queue", cfg.Store.Variable, cfg.Store.Kind))
	}
	cfg.Postgres.AutoMigrate = false // the commands read, delete and requeue; they create no tables
	// The one line that says the store is unreachable is this command's
	// error: the store's own log would bury it.
	b, err := stores.Open(ctx, cfg, stores.Env{Log: zap.NewNop(), Registerer: prometheus.NewRegistry()})
	if errors.Is(err, diskstore.ErrLocked) {
		// The one process that holds the file is, nearly always, the
		// proxy itself: what the operator needs is the way to reach it.
		return nil, dedup.Backend{}, fmt.Errorf("%w\nthe running proxy holds DATA_DIR's file: set ADMIN_TOKEN (and ADMIN_ADDR, if its admin port is not :9090) to ask it through its admin API instead", err)
	}
	if err != nil {
		return nil, dedup.Backend{}, err
	}
	return cfg, b, nil
}

// openQueueForCommand opens the configured shared store's async queue, for
// the dead-letter commands run without ADMIN_TOKEN.
func openQueueForCommand(ctx context.Context, environ map[string]string) (*config.Config, dedup.Backend, error) {
	return openStoreForCommand(ctx, environ, "ADMIN_TOKEN (with ADMIN_ADDR): required to reach the running proxy's admin API; or configure the shared store (REDIS_URL, …) to reach it directly", true)
}

// retryOne puts a dead letter back in the queue as a new first
// attempt, as POST /v1/events/{namespace}/{id}/retry does (which it calls
// when ADMIN_TOKEN is set).
func retryOne(ctx context.Context, ns, id string, environ map[string]string, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var err error
	if environ["ADMIN_TOKEN"] != "" {
		_, err = adminRequest(ctx, http.MethodPost, "/v1/events/"+url.PathEscape(ns)+"/"+url.PathEscape(id)+"/retry", environ)
	} else {
		cfg, b, oerr := openQueueForCommand(ctx, environ)
		if oerr != nil {
			return oerr
		}
		defer b.Close()
		err = b.Queue.Requeue(ctx, dedup.EventKey(cfg.KeyPrefix, ns, id))
	}
	switch {
	case errors.Is(err, dedup.ErrNotFound):
		return fmt.Errorf("no record for %s %s", ns, id)
	case errors.Is(err, dedup.ErrNotFailed):
		return fmt.Errorf("%s %s is not dead-lettered (it is queued, being delivered or completed)", ns, id)
	case err != nil:
		return err
	}
	_, err = fmt.Fprintf(stdout, "queued %s %s again\n", ns, id)
	return err
}

// retryAllCommand puts every dead letter sel chooses back in the queue,
// as POST /v1/dead-letters/retry does (which it calls, a page at a time,
// when ADMIN_TOKEN is set).
func retryAllCommand(ctx context.Context, sel admin.RetrySelection, environ map[string]string, stdout io.Writer) error {
	if sel.FailedBefore.IsZero() {
		// Fixed once for every page: a dead letter that fails again while
		// the command runs (the app still broken) is not retried twice.
		sel.FailedBefore = time.Now()
	}
	var next func(ctx context.Context, cursor string) (admin.BulkRetry, error)
	if environ["ADMIN_TOKEN"] != "" {
		query := url.Values{"failed_before": {sel.FailedBefore.Format(time.RFC3339Nano)}, "limit": {strconv.Itoa(bulkPage)}}
		if sel.Namespace != "" {
			query.Set("namespace", sel.Namespace)
		}
		if !sel.FailedAfter.IsZero() {
			query.Set("failed_after", sel.FailedAfter.Format(time.RFC3339Nano))
		}
		next = func(ctx context.Context, cursor string) (admin.BulkRetry, error) {
			query.Set("cursor", cursor)
			var res admin.BulkRetry
			body, err := adminRequest(ctx, http.MethodPost, "/v1/dead-letters/retry?"+query.Encode(), environ)
			if err == nil {
				err = json.Unmarshal(body, &res)
			}
			return res, err
		}
	} else {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cfg, b, err := openQueueForCommand(octx, environ)
		if err != nil {
			return err
		}
		defer b.Close()
		next = func(ctx context.Context, cursor string) (admin.BulkRetry, error) {
			return admin.RetryDeadLetters(ctx, b.Queue, cfg.KeyPrefix, sel, cursor, bulkPage)
		}
	}
	requeued, cursor := 0, ""
	for {
		pctx, cancel := context.WithTimeout(ctx, bulkPageTimeout)
		res, err := next(pctx, cursor)
		cancel()
		if err != nil {
			// What was queued again stays queued: say how far it got.
			return fmt.Errorf("after queueing %d dead letters again: %w", requeued, err)
		}
		requeued += res.Requeued
		if cursor = res.NextCursor; cursor == "" {
			break
		}
	}
	_, err := fmt.Fprintf(stdout, "dead letters queued again: %d\n", requeued)
	return err
}

// A bulk retry goes a page of bulkPage dead letters at a time, each page
// within bulkPageTimeout: every requeue is a store write (an fsync on
// DATA_DIR), so a page takes seconds where a listing takes milliseconds.
const (
	bulkPage        = 1000
	bulkPageTimeout = time.Minute
)

// adminRequest calls the running proxy's admin API at ADMIN_ADDR with
// ADMIN_TOKEN and returns the body of a 2xx answer. A 404 "no record" and
// a 409 come back as dedup.ErrNotFound and dedup.ErrNotFailed, another 404
// as an *adminNotFoundError.
func adminRequest(ctx context.Context, method, path string, environ map[string]string) ([]byte, error) {
	base, err := adminURL(environ)
	if err != nil {
		return nil, usageError(err)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+environ["ADMIN_TOKEN"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin API at %s: %w", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("admin API at %s: %w", base, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && strings.Contains(string(body), "no record"):
		return nil, dedup.ErrNotFound
	case resp.StatusCode == http.StatusConflict:
		return nil, dedup.ErrNotFailed
	case resp.StatusCode == http.StatusNotFound:
		return nil, &adminNotFoundError{base: base, body: strings.TrimSpace(string(body))}
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, usageError(errors.New("ADMIN_TOKEN: the admin API refused it"))
	case resp.StatusCode >= 300:
		return nil, fmt.Errorf("admin API at %s answered %s: %s", base, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// adminNotFoundError is a 404 from the admin API other than "no record":
// the API is off (no ADMIN_TOKEN there), or the path is (no async route).
type adminNotFoundError struct{ base, body string }

func (e *adminNotFoundError) Error() string { return "admin API at " + e.base + ": " + e.body }
