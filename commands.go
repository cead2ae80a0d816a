package main

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
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

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

// adminURL is the base URL of this pod's admin port, from ADMIN_ADDR: a
// wildcard host (":9090") is reached on loopback.
func adminURL(environ map[string]string) (string, error) {
	addr := environ["ADMIN_ADDR"]
	if addr == "" {
		addr = ":9090"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("ADMIN_ADDR: %w", err)
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
	if len(args) != 2 {
		return usageError(fmt.Errorf("usage: webhook-dedup %s NAMESPACE ID", cmd))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if environ["ADMIN_TOKEN"] != "" {
		return adminCommand(ctx, cmd, args[0], args[1], environ, stdout)
	}
	cfg, err := config.LoadForStore(environ)
	if err != nil {
		return usageError(fmt.Errorf("configuration:\n%w", err))
	}
	if cfg.Store.Kind == config.StoreMemory {
		return usageError(errors.New("ADMIN_TOKEN (with ADMIN_ADDR): required to reach the running proxy's admin API, since the embedded store lives inside that process; or configure the shared store (REDIS_URL, …) to reach it directly"))
	}
	// The one line that says the store is unreachable is this command's
	// error; go-redis's own log of each failed dial would bury it.
	redis.SetLogger(newRedisLogger(zap.NewNop()))
	st, err := openStore(cfg, zap.NewNop())
	if err != nil {
		return usageError(err)
	}
	defer st.Close()
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
	base, err := adminURL(environ)
	if err != nil {
		return usageError(err)
	}
	method := http.MethodGet
	if cmd == "forget" {
		method = http.MethodDelete
	}
	u := base + "/v1/events/" + url.PathEscape(ns) + "/" + url.PathEscape(id)
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+environ["ADMIN_TOKEN"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("admin API at %s: %w", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("admin API at %s: %w", base, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && strings.Contains(string(body), "no record"):
		return fmt.Errorf("no record for %s %s", ns, id)
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("admin API at %s: not enabled there (the proxy has no ADMIN_TOKEN)", base)
	case resp.StatusCode == http.StatusUnauthorized:
		return usageError(errors.New("ADMIN_TOKEN: the admin API refused it"))
	case resp.StatusCode >= 300:
		return fmt.Errorf("admin API at %s answered %s: %s", base, resp.Status, strings.TrimSpace(string(body)))
	case cmd == "forget":
		_, err = fmt.Fprintf(stdout, "forgot %s %s\n", ns, id)
	default:
		_, err = stdout.Write(body)
	}
	return err
}
