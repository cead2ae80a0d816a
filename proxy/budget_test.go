package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/webhook-dedup/webhook-dedup/internal/testenv/timing"
)

func budgetHandler(t *testing.T, maxBody, maxBuffered int64) *Handler {
	t.Helper()
	u, _ := url.Parse("http://127.0.0.1:1")
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	m := NewMetrics(prometheus.NewRegistry())
	h, err := New(Config{Upstream: u, Store: st, Metrics: m, MaxBodyBytes: maxBody, Bodies: NewBodyBudget(maxBuffered, m)})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// bodyRequest is a POST whose body is r, declaring length (-1: none, as
// with chunked encoding).
func bodyRequest(r io.Reader, length int64) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/hooks", r)
	req.ContentLength = length
	if length < 0 {
		req.Body = io.NopCloser(r) // no length known to net/http either
	}
	return req
}

// loadMargin is what a wait in this package's internal tests allows for
// an event with no configured timeout in its way: the time a loaded
// 2-core machine may add to scheduling it: timing.LoadMargin, as
// proxy_test's (fixture_test.go).
const loadMargin = timing.LoadMargin

// A body's buffer grows as its bytes arrive: a request that declares 10
// MiB and sends nothing holds firstChunk, not 10 MiB.
func TestReadBodyGrowsAsBytesArrive(t *testing.T) {
	h := budgetHandler(t, 10<<20, 0)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	var got *heldBody
	go func() {
		b, err := h.readBody(httptest.NewRecorder(), bodyRequest(pr, 10<<20))
		got = b
		done <- err
	}()
	// Nothing configured stands between the call and its first charge:
	// the deadline is only what a loaded machine may add (loadMargin).
	deadline := time.Now().Add(loadMargin)
	for h.budget.held.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("readBody charged nothing within %s", loadMargin)
		}
		time.Sleep(time.Millisecond)
	}
	// readBody is blocked on the pipe: nothing more can be charged.
	if held := h.budget.held.Load(); held != firstChunk {
		t.Fatalf("before any byte arrived, %d bytes are held; want %d", held, firstChunk)
	}
	body := bytes.Repeat([]byte("x"), 10<<20)
	if _, err := pw.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.bytes(), body) {
		t.Fatal("the body read differs from the body sent")
	}
	if c := cap(got.buf); c != 10<<20 {
		t.Errorf("a 10 MiB body ended in a buffer of %d bytes", c)
	}
	h.putBody(got)
	if held := h.budget.held.Load(); held != 0 {
		t.Errorf("after putBody, %d bytes are still held", held)
	}
}

// A body ends in a buffer no larger than its length, or than MaxBodyBytes
// when its length is not declared.
func TestReadBodyBufferSize(t *testing.T) {
	const limit = 10 << 20
	for _, tc := range []struct {
		name     string
		size     int
		declared bool
		wantCap  int
		wantErr  bool
	}{
		{"9 MiB declared", 9 << 20, true, 9 << 20, false},
		{"9 MiB chunked", 9 << 20, false, limit, false},
		{"limit, chunked", limit, false, limit, false},
		{"limit + 1, chunked", limit + 1, false, limit, true},
		{"1 KiB declared", 1 << 10, true, 1 << 10, false},
		{"1 KiB chunked", 1 << 10, false, firstChunk, false},
		{"empty", 0, true, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := budgetHandler(t, limit, 0)
			body := bytes.Repeat([]byte("y"), tc.size)
			length := int64(-1)
			if tc.declared {
				length = int64(tc.size)
			}
			b, err := h.readBody(httptest.NewRecorder(), bodyRequest(bytes.NewReader(body), length))
			defer h.putBody(b)
			var tooLarge *http.MaxBytesError
			if tc.wantErr != errors.As(err, &tooLarge) {
				t.Fatalf("readBody: %v; want a MaxBytesError: %v", err, tc.wantErr)
			}
			if c := cap(b.buf); c > tc.wantCap {
				t.Errorf("buffer of %d bytes, want at most %d", c, tc.wantCap)
			}
			if !tc.wantErr && !bytes.Equal(b.bytes(), body) {
				t.Error("the body read differs from the body sent")
			}
			if h.budget.held.Load() != int64(cap(b.buf)) {
				t.Errorf("charged %d bytes for a buffer of %d", h.budget.held.Load(), cap(b.buf))
			}
		})
	}
}

// Beyond MaxBufferedBytes, a body is refused at once; once the bodies
// held are put back, bodies are read again.
func TestReadBodyBudget(t *testing.T) {
	const limit = 64 << 10
	h := budgetHandler(t, limit, 2*limit)
	read := func(size int) (*heldBody, error) {
		return h.readBody(httptest.NewRecorder(), bodyRequest(strings.NewReader(strings.Repeat("z", size)), int64(size)))
	}
	first, err := read(limit)
	if err != nil {
		t.Fatal(err)
	}
	second, err := read(limit)
	if err != nil {
		t.Fatal(err)
	}
	if h.budget.held.Load() != 2*limit {
		t.Fatalf("held %d, want %d", h.budget.held.Load(), 2*limit)
	}
	third, err := read(10)
	if !errors.Is(err, errOverBudget) {
		t.Fatalf("a body beyond the budget: %v, want errOverBudget", err)
	}
	h.putBody(third)
	h.putBody(first)
	// Room for one more: a body that would grow past it is refused midway.
	fourth, err := read(limit)
	if err != nil {
		t.Fatal(err)
	}
	fifth, err := read(firstChunk * 2)
	if !errors.Is(err, errOverBudget) {
		t.Fatalf("a body growing beyond the budget: %v, want errOverBudget", err)
	}
	h.putBody(fifth)
	h.putBody(fourth)
	h.putBody(second)
	if held := h.budget.held.Load(); held != 0 {
		t.Errorf("after every putBody, %d bytes are still held", held)
	}
}
