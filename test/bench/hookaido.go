package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Hookaido (github.com/nuetzliches/hookaido) is a peer: a Go webhook
// gateway that queues every webhook durably (SQLite, WAL) and delivers it
// (push), without deduplication. Its rows anchor the async ones: what a
// durable queue in front of the app costs elsewhere. The bench does not
// download it: it runs HOOKAIDO_BIN, or builds HOOKAIDO_SRC, and skips
// the rows otherwise.

// peer is the Hookaido the bench runs.
type peer struct {
	bin     string
	version string // how the report names it
}

// Environment variables that give the bench a Hookaido.
const (
	envHookaidoBin = "HOOKAIDO_BIN" // a hookaido binary
	envHookaidoSrc = "HOOKAIDO_SRC" // its source, built with go build ./cmd/hookaido
)

// findHookaido returns the Hookaido that HOOKAIDO_BIN names, or builds
// the source HOOKAIDO_SRC names into tmp. With neither set it returns
// nil and the note the report prints in place of the rows; a binary or a
// source that does not work is an error, since it was asked for.
func findHookaido(tmp string, stderr io.Writer) (*peer, string, error) {
	if bin := os.Getenv(envHookaidoBin); bin != "" {
		version, err := hookaidoVersion(bin)
		if err != nil {
			return nil, "", fmt.Errorf("%s=%s: %w", envHookaidoBin, bin, err)
		}
		return &peer{bin: bin, version: version}, "", nil
	}
	src := os.Getenv(envHookaidoSrc)
	if src == "" {
		return nil, fmt.Sprintf("Hookaido's rows did not run: set %s to a hookaido binary, or %s to its source (github.com/nuetzliches/hookaido), to run them.", envHookaidoBin, envHookaidoSrc), nil
	}
	bin := filepath.Join(tmp, "hookaido")
	fmt.Fprintf(stderr, "bench: go build -trimpath -o %s ./cmd/hookaido (in %s)\n", bin, src)
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/hookaido")
	cmd.Dir = src
	// Its own module, not this one's workspace; pure Go (modernc SQLite),
	// as its release is built.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("%s=%s: go build: %w\n%s", envHookaidoSrc, src, err, out)
	}
	version, err := hookaidoVersion(bin)
	if err != nil {
		return nil, "", err
	}
	// A build from source calls itself 0.0.0-dev: its changelog says
	// which release the source is.
	if release := changelogRelease(filepath.Join(src, "CHANGELOG.md")); release != "" {
		version += ", source of " + release
	}
	return &peer{bin: bin, version: version}, "", nil
}

// hookaidoVersion is the first line `hookaido version` prints.
func hookaidoVersion(bin string) (string, error) {
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s version: %w\n%s", bin, err, out)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return "Hookaido " + line, nil
}

// changelogRelease is the newest release a Keep a Changelog file names
// ("## [2.11.0] - 2026-08-18"), or empty.
func changelogRelease(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		v, ok := strings.CutPrefix(s.Text(), "## [")
		if !ok {
			continue
		}
		if v, _, ok = strings.Cut(v, "]"); ok && v != "Unreleased" {
			return v
		}
	}
	return ""
}

// writeHookaidofile writes Hookaido's configuration: push delivery to the
// app, on the path the load posts to, with everything else as shipped (the
// SQLite queue: WAL, synchronous=FULL, one connection; 20 deliveries at
// once; the queue bounded at 10,000 events; the runtime log at info, a
// line per delivery, to the log file as webhook-dedup's is). Two defaults
// would refuse the bench's app, plain HTTP on loopback, and are turned
// off: https_only, and the refusal of private and loopback addresses
// (dns_rebind_protection). No auth, as the load is unsigned: webhook-
// dedup's async rows verify nothing either. The admin API and the
// metrics listen on loopback ports of their own. maxDepth, unless 0,
// bounds the queue instead (queue_limits.max_depth).
func writeHookaidofile(dir, listen, admin, metrics, upstream string, maxDepth int) (string, error) {
	limits := ""
	if maxDepth > 0 {
		limits = fmt.Sprintf("queue_limits {\n  max_depth %d\n}\n", maxDepth)
	}
	conf := fmt.Sprintf(`ingress {
  listen %s
}
admin_api {
  listen %s
}
defaults {
  egress {
    https_only off
    dns_rebind_protection off
  }
}
observability {
  metrics {
    listen %s
    prefix /metrics
  }
}
/stripe {
  deliver "http://%s/stripe" {}
}
%s`, listen, admin, metrics, upstream, limits)
	path := filepath.Join(dir, "Hookaidofile")
	return path, os.WriteFile(path, []byte(conf), 0o644)
}

// startHookaido starts Hookaido in dir in front of the upstream at upAddr,
// its queue bounded at maxDepth events (0: as shipped).
func (b *bench) startHookaido(dir, upAddr string, maxDepth int, env []string, start startFunc) (target, error) {
	var t target
	if b.peer == nil {
		return t, errors.New("no Hookaido (HOOKAIDO_BIN, HOOKAIDO_SRC)")
	}
	var admin, metrics string
	var err error
	for _, a := range []*string{&t.addr, &admin, &metrics} {
		if *a, err = freeAddr(); err != nil {
			return t, err
		}
	}
	conf, err := writeHookaidofile(dir, t.addr, admin, metrics, upAddr, maxDepth)
	if err != nil {
		return t, err
	}
	if t.proc, err = start("hookaido", env, b.peer.bin, "run", "--config", conf, "--db", filepath.Join(dir, "hookaido.db")); err != nil {
		return t, err
	}
	if err := waitHTTP(t.proc, "http://"+admin+"/healthz", http.StatusOK); err != nil {
		return t, err
	}
	t.metricsURL = "http://" + metrics + "/metrics"
	t.queued = func() (int64, error) {
		n, err := metricValue(t.metricsURL, "hookaido_ingress_enqueued_total")
		return int64(n), err
	}
	t.outcomes = func() (map[string]int64, error) { return hookaidoOutcomes(t.metricsURL) }
	return t, nil
}

// hookaidoOutcomes reads Hookaido's ingress and delivery counters, the
// counterpart of webhook-dedup's outcomes: a check that the load did what
// it says.
func hookaidoOutcomes(url string) (map[string]int64, error) {
	out := map[string]int64{}
	for key, name := range map[string]string{
		"accepted":  "hookaido_ingress_accepted_total",
		"queued":    "hookaido_ingress_enqueued_total",
		"rejected":  "hookaido_ingress_rejected_total",
		"delivered": "hookaido_delivery_acked_total",
		"retried":   "hookaido_delivery_retry_total",
		"dead":      "hookaido_delivery_dead_total",
	} {
		v, err := metricValue(url, name)
		if err != nil {
			return nil, err
		}
		out[key] = int64(v)
	}
	return out, nil
}
