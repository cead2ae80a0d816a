package cli

import (
	"context"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/diskstore"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
)

// TestRetryAll: retry --all queues again the dead letters its flags
// choose, straight on the store without ADMIN_TOKEN and through the
// admin API with it; a second run finds none.
func TestRetryAll(t *testing.T) {
	dir := t.TempDir()
	st, err := diskstore.Open(diskstore.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	gh := []string{"wd:github:1", "wd:github:2", "wd:github:3"}
	storetest.DeadLetter(t, st, append(gh, "wd:stripe:evt_1")...)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// Without ADMIN_TOKEN the command opens DATA_DIR itself, which no
	// proxy holds here.
	direct := map[string]string{"DATA_DIR": dir, "KEY_PREFIX": "wd:"}
	if out, err := runCommand(direct, "retry", "--all", "--namespace", "github", "--failed-after", "2000-01-01T00:00:00Z"); err != nil || out != "dead letters queued again: 3\n" {
		t.Errorf("retry --all --namespace github: %q, %v; want 3 queued", out, err)
	}
	if out, err := runCommand(direct, "retry", "--all", "--namespace", "github"); err != nil || out != "dead letters queued again: 0\n" {
		t.Errorf("again: %q, %v; want none", out, err)
	}

	// With ADMIN_TOKEN it asks the admin API, over the same file.
	st, err = diskstore.Open(diskstore.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	for _, key := range gh {
		if rec, err := st.Lookup(context.Background(), key); err != nil || rec.State != dedup.Queued {
			t.Errorf("%s after retry --all: %v %v, want queued", key, rec.State, err)
		}
	}
	api := httptest.NewServer(admin.New(admin.Config{Store: st, DeadLetters: st, Gatherer: prometheus.NewRegistry(), Token: "t", KeyPrefix: "wd:"}))
	t.Cleanup(api.Close)
	u, _ := url.Parse(api.URL)
	viaAPI := map[string]string{"ADMIN_ADDR": u.Host, "ADMIN_TOKEN": "t"}
	if out, err := runCommand(viaAPI, "retry", "--all", "--failed-before", "2000-01-01T00:00:00Z"); err != nil || out != "dead letters queued again: 0\n" {
		t.Errorf("retry --all of those failed before 2000: %q, %v; want none", out, err)
	}
	if out, err := runCommand(viaAPI, "retry", "--all"); err != nil || out != "dead letters queued again: 1\n" {
		t.Errorf("retry --all through the admin API: %q, %v; want the stripe one", out, err)
	}
	if rec, err := st.Lookup(context.Background(), "wd:stripe:evt_1"); err != nil || rec.State != dedup.Queued {
		t.Errorf("stripe evt_1 after retry --all: %v %v, want queued", rec.State, err)
	}

	for _, args := range [][]string{
		{"retry", "--all", "github"},
		{"retry", "--namespace", "github", "github", "1"},
		{"retry", "--all", "--failed-before", "yesterday"},
		{"retry", "--every"},
	} {
		if _, err := runCommand(viaAPI, args...); exitCode(err) != 2 || !strings.Contains(err.Error(), "Run 'webhook-dedup retry -h'") {
			t.Errorf("%q: %v (exit %d), want a usage error", args, err, exitCode(err))
		}
	}
}
