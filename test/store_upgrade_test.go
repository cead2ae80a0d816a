package test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/buildcache"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
)

// previousRelease is the commit of the previous release, 0.3.0
// (CHANGELOG.md), whose binary runs beside this one in a rolling upgrade.
const previousRelease = "9764cc5"

// errNoHistory means the checkout has no git history to build the
// previous release from (an exported tree, a shallow clone).
var errNoHistory = errors.New("e2e: no git history holding the previous release")

// buildPrevious builds previousRelease's binary: its tree from git history
// (git archive) into dir, built as a release is (asReleased). The binary
// is kept in the user's cache directory under the commit's full hash,
// which names its whole tree, and the flags, so only the first run on a
// machine pays for the build (20-30 s on two cores).
func buildPrevious(dir string) (string, error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return "", fmt.Errorf("e2e: module root: %w", err)
	}
	commit, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "--quiet", previousRelease+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("%w (git rev-parse %s: %v)", errNoHistory, previousRelease, err)
	}
	key := strings.TrimSpace(string(commit)) + " " + strings.Join(asReleased, " ")
	return buildcache.Binary("webhook-dedup-previous", key, func(bin string) error {
		src := filepath.Join(dir, "previous-src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			return fmt.Errorf("e2e: %w", err)
		}
		archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, previousRelease, src)
		if out, err := archive.CombinedOutput(); err != nil {
			return fmt.Errorf("e2e: git archive %s: %w\n%s", previousRelease, err, out)
		}
		cmd := exec.Command("go", append(append([]string{"build", "-o", bin}, asReleased...), ".")...)
		cmd.Dir = src
		cmd.Env = releasedEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("e2e: building %s: %w\n%s", previousRelease, err, out)
		}
		return nil
	})
}

// TestRollingUpgrade: the previous release and this one, side by side on
// one Redis as in a rolling upgrade or a rollback, read each other's
// records: an event completed through one is a duplicate at the other,
// an event at the app through one is in flight at the other, and every
// event reaches the app exactly once. Both orders, and this release with
// REDIS_COMPACT_RECORDS, whose records the previous release cannot read
// (why the setting is off by default): it answers 503 rather than forward
// again (ON_STORE_ERROR=reject, the default), while this release reads
// the previous one's records whatever the setting.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	start := time.Now()
	prev, err := previousBinary()
	if errors.Is(err, errNoHistory) {
		t.Skipf("cannot build the previous release (%s) to run beside this one: %v", previousRelease, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the previous release's binary (%s): ready in %s", previousRelease, time.Since(start).Round(time.Millisecond))
	type side struct {
		name string
		bin  string
		env  map[string]string
	}
	previous := side{"0.3.0", prev, nil}
	current := side{"this release", binary, nil}
	compact := side{"this release, compact records", binary, map[string]string{"REDIS_COMPACT_RECORDS": "true"}}
	for _, tc := range []struct {
		first, second side
		// unreadable: the first cannot read what the second writes (0.3.0
		// a compact record): it answers 503 store-unavailable rather than
		// forward the event again.
		unreadable bool
	}{
		{first: previous, second: current},
		{first: current, second: previous},
		{first: previous, second: compact, unreadable: true},
		{first: compact, second: current},
	} {
		t.Run(tc.first.name+" then "+tc.second.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.New(t)
			app := newUpstream(t)
			start := func(s side) *proxy {
				env := map[string]string{"UPSTREAM_URL": app.URL, "ROUTES": routes(stripe), "STRIPE_WEBHOOK_SECRET": stripeSecret, "REDIS_URL": srv.URL()}
				for k, v := range s.env {
					env[k] = v
				}
				return startProxyBinary(t, s.bin, env)
			}
			first, second := start(tc.first), start(tc.second)
			ctx, client := testContext(t), newClient(t)

			// Completed through the first: a duplicate at either. This
			// release answers the sender before it completes the record, so
			// a copy at another process may find it in flight for one
			// round trip (settledSend waits that out; the app still sees
			// the event once).
			done := stripe.Event(1)
			expect(t, "first delivery, to the first", mustSend(t, ctx, client, first, stripe, done), 200, "forwarded")
			expect(t, "redelivery to the second", settledSend(t, ctx, client, second, stripe, done), 200, "duplicate")
			expect(t, "redelivery to the first", mustSend(t, ctx, client, first, stripe, done), 200, "duplicate")

			// At the app through the first: in flight at the second, then
			// a duplicate once the first completes it.
			held := stripe.Event(2)
			k := key(stripe, held.ID)
			release := app.Hold()
			t.Cleanup(release)
			firstDone := make(chan answer, 1)
			go func() {
				a, err := stripe.send(ctx, client, first.Addr, held)
				if err != nil {
					a = answer{Status: -1, Body: []byte(err.Error())}
				}
				firstDone <- a
			}()
			app.awaitEntered(t, k, first.bounds().claimed())
			expect(t, "copy to the second while the first holds it", mustSend(t, ctx, client, second, stripe, held), http.StatusConflict, "in-flight")
			release()
			expect(t, "the held delivery", <-firstDone, 200, "forwarded")
			expect(t, "copy to the second after completion", settledSend(t, ctx, client, second, stripe, held), 200, "duplicate")

			// Completed through the second: a duplicate at the first.
			back := stripe.Event(3)
			expect(t, "delivery to the second", mustSend(t, ctx, client, second, stripe, back), 200, "forwarded")
			if tc.unreadable {
				expect(t, "redelivery to the first, which cannot read the record", settledSend(t, ctx, client, first, stripe, back), http.StatusServiceUnavailable, "store-unavailable")
			} else {
				expect(t, "redelivery to the first", settledSend(t, ctx, client, first, stripe, back), 200, "duplicate")
			}

			for _, ev := range []event{done, held, back} {
				if n := app.Attempts(key(stripe, ev.ID)); n != 1 {
					t.Errorf("%s reached the app %d times, want once", ev.ID, n)
				}
			}
		})
	}
}
