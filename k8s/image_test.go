package k8s

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/redistest"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/timing"
)

func TestImageBinaryIsStatic(t *testing.T) {
	b := builtBinary(t)
	f, err := elf.Open(b.binary)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_INTERP:
			t.Error("the binary has a PT_INTERP program header: it needs a dynamic loader, which distroless static lacks")
		case elf.PT_DYNAMIC:
			t.Error("the binary has a PT_DYNAMIC program header: it links shared libraries")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("imported libraries: %v (%v), want none", libs, err)
	}

	info, err := buildinfo.ReadFile(b.binary)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings CGO_ENABLED=%q -trimpath=%q, want 0 and true", settings["CGO_ENABLED"], settings["-trimpath"])
	}
	data, err := os.ReadFile(b.binary)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(b.context)) {
		t.Errorf("the binary contains the build directory %s: -trimpath did not apply", b.context)
	}
}

func TestImageBinaryVersionIsStamped(t *testing.T) {
	b := builtBinary(t)
	info, err := buildinfo.ReadFile(b.binary)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(b.binary, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("webhook-dedup version: %v\n%s", err, out)
	}
	file, err := os.ReadFile(filepath.Join(repoRoot(t), "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("webhook-dedup %s (commit %s, %s)\n", strings.TrimSpace(string(file)), buildCommit, info.GoVersion)
	if string(out) != want {
		t.Errorf("webhook-dedup version printed %q, want %q", out, want)
	}
}

// The image's HEALTHCHECK command, run as Docker would: it fails while
// nothing serves, passes once webhook-dedup is ready, and fails again after
// it stopped.
func TestImageHealthcheck(t *testing.T) {
	b := builtBinary(t)
	stages, err := readDockerfile(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	hc, _ := stages[len(stages)-1].last("HEALTHCHECK")
	rest, _ := stripFlags(hc.args)
	argv, ok := execForm(strings.TrimSpace(strings.TrimPrefix(rest, "CMD")))
	if !ok {
		t.Fatalf("HEALTHCHECK %q is not in exec form", hc.args)
	}
	adminAddr := redistest.FreeAddr(t)
	healthcheck := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, b.binary, argv[1:]...)
		cmd.Env = []string{"ADMIN_ADDR=" + adminAddr}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	if err := healthcheck(); err == nil {
		t.Fatal("healthcheck passed with nothing listening on ADMIN_ADDR")
	}

	env := map[string]string{
		"UPSTREAM_URL": "http://" + redistest.FreeAddr(t),
		"LISTEN_ADDR":  redistest.FreeAddr(t),
		"ADMIN_ADDR":   adminAddr,
		"LOG_LEVEL":    "error",
	}
	// The exit's deadline comes from the configuration the process
	// loads: it exits within SHUTDOWN_DELAY + SHUTDOWN_TIMEOUT + 2 s
	// (SPEC, Shutdown), and a loaded machine may add timing.LoadMargin.
	cfg, err := config.Load(env)
	if err != nil {
		t.Fatal(err)
	}
	exitBound := cfg.ShutdownDelay + cfg.ShutdownTimeout + 2*time.Second + timing.LoadMargin
	serve := exec.Command(b.binary)
	for k, v := range env {
		serve.Env = append(serve.Env, k+"="+v)
	}
	// A file, not a buffer: the process writes it directly, so reading it
	// while the process runs is no data race.
	logPath := filepath.Join(t.TempDir(), "webhook-dedup.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	logs := func() string { data, _ := os.ReadFile(logPath); return string(data) }
	serve.Stdout, serve.Stderr = logFile, logFile
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = serve.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = serve.Process.Kill() // fails harmlessly if it already exited
		<-exited
	})

	// Ready once started: with the memory store, no store's bound is in
	// its way.
	deadline := time.Now().Add(timing.LoadMargin)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for err := healthcheck(); err != nil; err = healthcheck() {
		select {
		case <-exited:
			t.Fatalf("webhook-dedup exited before it was ready: %v\n%s", waitErr, logs())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthcheck still failing after %s: %v\nlogs:\n%s", timing.LoadMargin, err, logs())
		}
	}

	if err := serve.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("webhook-dedup after SIGINT: %v\n%s", waitErr, logs())
		}
	case <-time.After(exitBound):
		t.Fatalf("webhook-dedup did not exit within %s of SIGINT", exitBound)
	}
	if err := healthcheck(); err == nil {
		t.Error("healthcheck passed after webhook-dedup exited")
	}
}
