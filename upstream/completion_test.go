package upstream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// brokenBody yields its data, then fails: an answer cut off mid-body.
type brokenBody struct{ r io.Reader }

func (b *brokenBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}
func (b *brokenBody) Close() error { return nil }

// TestCapture: a completing answer's body is kept up to ReplayMaxBytes
// (a larger one or one cut short not at all, an empty one as empty), and
// whatever was kept, the body handed on reads unchanged.
func TestCapture(t *testing.T) {
	for _, tc := range []struct {
		name   string
		c      Completion
		body   string
		broken bool
		want   []byte // nil: nothing kept
	}{
		{name: "replay off", c: Completion{ReplayMaxBytes: 100}, body: "ok", want: nil},
		{name: "within the limit", c: Completion{ReplayResponse: true, ReplayMaxBytes: 100}, body: "ok", want: []byte("ok")},
		{name: "exactly the limit", c: Completion{ReplayResponse: true, ReplayMaxBytes: 5}, body: "12345", want: []byte("12345")},
		{name: "one byte over", c: Completion{ReplayResponse: true, ReplayMaxBytes: 5}, body: "123456", want: nil},
		{name: "empty body", c: Completion{ReplayResponse: true, ReplayMaxBytes: 5}, body: "", want: []byte{}},
		{name: "limit zero, empty body", c: Completion{ReplayResponse: true}, body: "", want: []byte{}},
		{name: "limit zero, a body", c: Completion{ReplayResponse: true}, body: "x", want: nil},
		{name: "cut short", c: Completion{ReplayResponse: true, ReplayMaxBytes: 100}, body: "partial", broken: true, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.ReadCloser = io.NopCloser(strings.NewReader(tc.body))
			if tc.broken {
				body = &brokenBody{strings.NewReader(tc.body)}
			}
			resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/plain"}}, Body: body}
			got := tc.c.Capture(resp)
			if (got == nil) != (tc.want == nil) || !bytes.Equal(got, tc.want) {
				t.Errorf("kept %q (nil: %v), want %q (nil: %v)", got, got == nil, tc.want, tc.want == nil)
			}
			rest, err := io.ReadAll(resp.Body)
			if string(rest) != tc.body || (err != nil) != tc.broken {
				t.Errorf("handed on %q, %v; want %q unchanged", rest, err, tc.body)
			}
			if err := resp.Body.Close(); err != nil {
				t.Errorf("closing the body handed on: %v", err)
			}
		})
	}
}

// TestResult: the record keeps the status and the fingerprint, the whole
// of it only for body keys, and the answer's Content-Type only with a
// body kept for replay.
func TestResult(t *testing.T) {
	sum := sha256.Sum256([]byte(`{"id":"e1"}`))
	header := http.Header{"Content-Type": {"text/xml"}}
	for _, tc := range []struct {
		name   string
		c      Completion
		replay []byte
		want   dedup.Result
	}{
		{name: "plain", c: Completion{}, replay: nil,
			want: dedup.Result{Status: 201, Fingerprint: sum}},
		{name: "body fingerprint", c: Completion{BodyFingerprint: true}, replay: nil,
			want: dedup.Result{Status: 201, Fingerprint: sum, FullFingerprint: true}},
		{name: "replayed body", c: Completion{ReplayResponse: true}, replay: []byte("<Response/>"),
			want: dedup.Result{Status: 201, Fingerprint: sum, ContentType: "text/xml", Body: []byte("<Response/>")}},
		{name: "replayed empty body", c: Completion{ReplayResponse: true}, replay: []byte{},
			want: dedup.Result{Status: 201, Fingerprint: sum, ContentType: "text/xml", Body: []byte{}}},
		{name: "nothing kept", c: Completion{ReplayResponse: true}, replay: nil,
			want: dedup.Result{Status: 201, Fingerprint: sum}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.c.Result(201, header, sum, tc.replay)
			if got.Status != tc.want.Status || got.Fingerprint != tc.want.Fingerprint || got.FullFingerprint != tc.want.FullFingerprint ||
				got.ContentType != tc.want.ContentType || !bytes.Equal(got.Body, tc.want.Body) || (got.Body == nil) != (tc.want.Body == nil) {
				t.Errorf("Result = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// completions records what a store is asked to complete.
type completions struct {
	*memstore.Store
	results []dedup.Result
}

func (c *completions) Complete(ctx context.Context, cl dedup.Claim, res dedup.Result, ttl time.Duration) error {
	c.results = append(c.results, res)
	return c.Store.Complete(ctx, cl, res, ttl)
}

// TestRememberBody: the body's record carries the event's completion
// (status, replayed answer) for the event's TTL, without asking for the
// whole fingerprint (its key holds it); the first event to record a body
// keeps it.
func TestRememberBody(t *testing.T) {
	ctx := context.Background()
	st := &completions{Store: memstore.New()}
	t.Cleanup(func() { _ = st.Close() })
	sum := sha256.Sum256([]byte("body"))
	key := dedup.BodyKey("p:", "github", sum)
	first := Completion{ReplayResponse: true, BodyFingerprint: true}.Result(201, http.Header{"Content-Type": {"text/plain"}}, sum, []byte("first"))
	if err := RememberBody(ctx, st, key, first, time.Minute, time.Hour); err != nil {
		t.Fatal(err)
	}
	second := first
	second.Status, second.Body = 202, []byte("second")
	if err := RememberBody(ctx, st, key, second, time.Minute, time.Hour); err != nil {
		t.Fatalf("a body already recorded: %v, want nil", err)
	}
	rec, err := st.Lookup(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != dedup.Completed || rec.Result.Status != 201 || string(rec.Result.Body) != "first" || rec.Result.ContentType != "text/plain" ||
		rec.TTL <= 59*time.Minute || rec.TTL > time.Hour || !rec.Result.SameBody(sum) {
		t.Errorf("body record %s %+v, ttl %s; want the first completion, for 1h", rec.State, rec.Result, rec.TTL)
	}
	if len(st.results) != 1 || st.results[0].FullFingerprint {
		t.Errorf("completions %+v: want one, not asking for the whole fingerprint", st.results)
	}
	if !first.FullFingerprint {
		t.Error("RememberBody changed the caller's result")
	}
}

// failingStore fails every claim, as a store that is down.
type failingStore struct{ BodyStore }

var errDown = errors.New("fake: connection refused")

func (failingStore) Claim(context.Context, string, time.Duration) (dedup.Claim, dedup.Record, error) {
	return dedup.Claim{}, dedup.Record{}, errDown
}

// TestRememberBodyStoreDown: a store failure comes back wrapped, naming
// the key.
func TestRememberBodyStoreDown(t *testing.T) {
	err := RememberBody(context.Background(), failingStore{}, "p:github#sha256:00", dedup.Result{Status: 200}, time.Minute, time.Hour)
	if !errors.Is(err, errDown) || !strings.Contains(err.Error(), "p:github#sha256:00") {
		t.Errorf("RememberBody on a store that is down: %v", err)
	}
}
