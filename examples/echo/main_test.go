package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHandler(t *testing.T) {
	var out bytes.Buffer
	srv := httptest.NewServer(handler(&out))
	defer srv.Close()

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/hooks/gh?x=1", strings.NewReader(`{"zen":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Delivery", "72d3162e")
	req.Header.Set("Authorization", "Bearer not-printed")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "{\"ok\":true}\n" {
		t.Errorf("answer = %d %q, want 200 {\"ok\":true}", resp.StatusCode, body)
	}
	want := "POST /hooks/gh?x=1\n" +
		"  Content-Type: application/json\n" +
		"  X-GitHub-Delivery: 72d3162e\n" +
		"  body: {\"zen\":\"hi\"}\n"
	if got := out.String(); got != want {
		t.Errorf("printed:\n%s\nwant:\n%s", got, want)
	}
}

func TestRunListensOnAddrAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, func(string) string { return "" }, pw) }()

	line := make([]byte, 256)
	n, err := pr.Read(line)
	if err != nil {
		t.Fatal(err)
	}
	first := string(line[:n])
	url, ok := strings.CutPrefix(strings.TrimSpace(first), "echo: listening on ")
	if !ok {
		t.Fatalf("first line %q does not say where it listens", first)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	resp, err := http.Get(url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET / = %d, want 200", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run = %v, want nil after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}
