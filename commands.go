package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"go.uber.org/zap"
)

func writeUsage(w io.Writer) error { return config.WriteUsage(w) }

func printVersion(w io.Writer) error {
	_, err := fmt.Fprintf(w, "webhook-dedup %s (commit %s, %s)\n", version, commit, runtime.Version())
	return err
}

// healthcheck asks the local admin port's /readyz, for container health
// checks in images that have no curl. Exit 0 when ready, 1 otherwise.
func healthcheck(ctx context.Context, environ map[string]string, stdout io.Writer) error {
	addr := environ["ADMIN_ADDR"]
	if addr == "" {
		addr = ":9090"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usageError(fmt.Errorf("ADMIN_ADDR: %w", err))
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/readyz", nil)
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

// storeCommand runs inspect or forget straight against the configured store.
func storeCommand(ctx context.Context, cmd string, args []string, environ map[string]string, stdout io.Writer) error {
	if len(args) != 2 {
		return usageError(fmt.Errorf("usage: webhook-dedup %s NAMESPACE ID", cmd))
	}
	cfg, st, err := openStoreForCommand(environ)
	if err != nil {
		return err
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	key := dedup.EventKey(cfg.KeyPrefix, args[0], args[1])
	if cmd == "forget" {
		existed, err := admin.Forget(ctx, st, cfg.KeyPrefix, args[0], args[1])
		if err != nil {
			return err
		}
		if !existed {
			return fmt.Errorf("no record for %s %s", args[0], args[1])
		}
		_, err = fmt.Fprintf(stdout, "forgot %s %s\n", args[0], args[1])
		return err
	}
	rec, err := st.Lookup(ctx, key)
	if errors.Is(err, dedup.ErrNotFound) {
		return fmt.Errorf("no record for %s %s", args[0], args[1])
	}
	if err != nil {
		return err
	}
	out := map[string]any{"namespace": args[0], "id": args[1], "state": rec.State.String(), "ttl_seconds": rec.TTL.Seconds()}
	if rec.State == dedup.Completed {
		out["status"] = rec.Result.Status
	}
	if !rec.Since.IsZero() {
		out["age_seconds"] = time.Since(rec.Since).Seconds()
	}
	if d := rec.Delivery; d.Attempts > 0 || rec.State == dedup.Queued || rec.State == dedup.Delivering || rec.State == dedup.Failed {
		out["attempts"] = d.Attempts
		if d.LastStatus != 0 {
			out["last_status"] = d.LastStatus
		}
		if d.LastError != "" {
			out["last_error"] = d.LastError
		}
		if rec.State == dedup.Queued && !d.NextAttemptAt.IsZero() {
			out["next_attempt_at"] = d.NextAttemptAt.UTC().Format(time.RFC3339)
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// openStoreForCommand opens the configured store for a command that works
// on it from outside the serving process.
func openStoreForCommand(environ map[string]string) (*config.Config, store, error) {
	cfg, err := config.LoadForStore(environ)
	if err != nil {
		return nil, nil, usageError(fmt.Errorf("configuration:\n%w", err))
	}
	if cfg.Store.Kind == config.StoreMemory {
		return nil, nil, usageError(errors.New("REDIS_URL (or REDIS_CLUSTER_ADDRS, REDIS_SENTINEL_ADDRS): required: the embedded store lives inside the serving process, out of reach of this command"))
	}
	st, err := openStore(cfg, zap.NewNop())
	if err != nil {
		return nil, nil, usageError(err)
	}
	return cfg, st, nil
}

// openQueueForCommand opens the configured store's async queue.
func openQueueForCommand(environ map[string]string) (*config.Config, dedup.Queue, func() error, error) {
	cfg, st, err := openStoreForCommand(environ)
	if err != nil {
		return nil, nil, nil, err
	}
	q, ok := st.(dedup.Queue)
	if !ok {
		st.Close()
		return nil, nil, nil, usageError(fmt.Errorf("%s: the %s store keeps no async queue", cfg.Store.Variable, cfg.Store.Kind))
	}
	return cfg, q, st.Close, nil
}

// deadLettersCommand prints every dead letter, as GET /v1/dead-letters
// lists them, in one JSON document.
func deadLettersCommand(ctx context.Context, args []string, environ map[string]string, stdout io.Writer) error {
	if len(args) != 0 {
		return usageError(errors.New("usage: webhook-dedup dead-letters"))
	}
	cfg, q, closeStore, err := openQueueForCommand(environ)
	if err != nil {
		return err
	}
	defer closeStore()
	all := admin.DeadLetterPage{DeadLetters: []admin.DeadLetter{}}
	cursor := ""
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		page, err := admin.ListDeadLetters(pctx, q, cfg.KeyPrefix, cursor, 1000)
		cancel()
		if err != nil {
			return err
		}
		all.DeadLetters = append(all.DeadLetters, page.DeadLetters...)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(all)
}

// retryCommand puts a dead letter back in the queue, as POST
// /v1/events/{namespace}/{id}/retry does.
func retryCommand(ctx context.Context, args []string, environ map[string]string, stdout io.Writer) error {
	if len(args) != 2 {
		return usageError(errors.New("usage: webhook-dedup retry NAMESPACE ID"))
	}
	cfg, q, closeStore, err := openQueueForCommand(environ)
	if err != nil {
		return err
	}
	defer closeStore()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = q.Requeue(ctx, dedup.EventKey(cfg.KeyPrefix, args[0], args[1]))
	switch {
	case errors.Is(err, dedup.ErrNotFound):
		return fmt.Errorf("no record for %s %s", args[0], args[1])
	case errors.Is(err, dedup.ErrNotFailed):
		return fmt.Errorf("%s %s is not dead-lettered (it is queued, being delivered or completed)", args[0], args[1])
	case err != nil:
		return err
	}
	_, err = fmt.Fprintf(stdout, "queued %s %s again\n", args[0], args[1])
	return err
}
