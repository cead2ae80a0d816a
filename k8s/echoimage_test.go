package k8s

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/timing"
)

// echoDockerfile builds the example app's image, released beside
// webhook-dedup's and run by the base as the app.
const echoDockerfile = "examples/echo/Dockerfile"

// TestEchoImage runs the example app's Dockerfile build in the context its
// own ignore file leaves, then starts the binary with the image's ENV ADDR
// moved to a free loopback port, and waits for its answer.
func TestEchoImage(t *testing.T) {
	b, err := buildLikeDockerfile(filepath.Join(t.TempDir(), "echo"), echoDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	stages, err := readStages(filepath.Join(repoRoot(t), echoDockerfile))
	if err != nil {
		t.Fatal(err)
	}
	final := stages[len(stages)-1]
	if env, ok := final.last("ENV"); !ok || !strings.HasPrefix(env.args, "ADDR=") {
		t.Errorf("%s: the runtime stage sets no ADDR: the app would listen on loopback, unreachable in its own pod", echoDockerfile)
	}
	if user, ok := final.last("USER"); !ok || strings.HasPrefix(user.args, "0") {
		t.Errorf("%s: no non-root USER", echoDockerfile)
	}

	addr := redistest.FreeAddr(t)
	cmd := exec.Command(b.binary)
	cmd.Env = []string{"ADDR=" + addr}
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(timing.LoadMargin) // no bound of its own in its way
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Post("http://"+addr+"/webhooks/github", "application/json", strings.NewReader("{}"))
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"ok":true`) {
				t.Fatalf("echo answered %d %s, want 200 {\"ok\":true}", resp.StatusCode, body)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("echo does not answer on ADDR=%s after %s: %v", addr, timing.LoadMargin, err)
		}
		<-tick.C
	}
}
