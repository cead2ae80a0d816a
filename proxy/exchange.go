package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"net/http"
	"strconv"
	"sync"

	"go.uber.org/zap"
)

// exchange wraps the sender's ResponseWriter while the upstream's answer is
// relayed: it marks the answer with its outcome and records the status.
type exchange struct {
	http.ResponseWriter
	outcome     string
	status      int
	upstreamErr error
}

// newExchange starts relaying the upstream's answer to w, marked with outcome.
func (wh *webhook) newExchange(w http.ResponseWriter, outcome string) *exchange {
	wh.ex = exchange{ResponseWriter: w, outcome: outcome}
	return &wh.ex
}

func (e *exchange) WriteHeader(code int) {
	if code < 200 {
		// Informational answers (100 Continue, 103) pass as they are.
		e.ResponseWriter.WriteHeader(code)
		return
	}
	if e.status == 0 {
		e.status = code
		e.Header().Set(HeaderOutcome, e.outcome)
	}
	e.ResponseWriter.WriteHeader(code)
}

func (e *exchange) Write(p []byte) (int, error) {
	if e.status == 0 {
		e.WriteHeader(http.StatusOK)
	}
	return e.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach Flush on the real writer.
func (e *exchange) Unwrap() http.ResponseWriter { return e.ResponseWriter }

// answer writes a response of the proxy's own: a small JSON document.
func (h *Handler) answer(w http.ResponseWriter, wh *webhook, status int, outcome, message string) {
	wh.status, wh.outcome = status, outcome
	hdr := w.Header()
	hdr.Set(HeaderOutcome, outcome)
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	b := appendAnswer(make([]byte, 0, 64+len(wh.id)+len(message)), outcome, wh.id, message)
	hdr.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// answerBody is the JSON document of the proxy's own answers.
type answerBody struct {
	Status  string `json:"status"`
	EventID string `json:"event_id,omitempty"`
	Message string `json:"message,omitempty"`
}

// appendAnswer appends answerBody{status, id, message} as encoding/json
// writes it, and a newline, without its reflection: this is every
// duplicate's answer. Strings it would escape (quotes, controls, <, >, &,
// non-ASCII) are rare in IDs and never in the proxy's own words; they go
// through encoding/json.
func appendAnswer(b []byte, status, id, message string) []byte {
	if !plainJSON(status) || !plainJSON(id) || !plainJSON(message) {
		enc, _ := json.Marshal(answerBody{Status: status, EventID: id, Message: message})
		return append(append(b, enc...), '\n')
	}
	b = append(b, `{"status":"`...)
	b = append(b, status...)
	if id != "" {
		b = append(b, `","event_id":"`...)
		b = append(b, id...)
	}
	if message != "" {
		b = append(b, `","message":"`...)
		b = append(b, message...)
	}
	return append(b, "\"}\n"...)
}

// plainJSON reports whether encoding/json writes s between quotes as it is.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

var errBodyRead = errors.New("proxy: reading the request body")

// bufferPool recycles body buffers; very large ones are dropped so that one
// big request does not pin its memory.
type bufferPool struct{ p sync.Pool }

const maxPooledBuffer = 1 << 20

func (b *bufferPool) get() *bytes.Buffer {
	if v, ok := b.p.Get().(*bytes.Buffer); ok {
		return v
	}
	return new(bytes.Buffer)
}

func (b *bufferPool) put(buf *bytes.Buffer) {
	if buf.Cap() > maxPooledBuffer {
		return
	}
	buf.Reset()
	b.p.Put(buf)
}

// replayBody is a body read into memory, handed on to the upstream.
type replayBody struct{ bytes.Reader }

func (*replayBody) Close() error { return nil }

// forUpstream is the body of the upstream request: a reader net/http knows
// is in memory, so the headers and the body leave in one write. Behind
// ReverseProxy's own wrapper it cannot tell, and flushes the headers on
// their own first: one more write here, and one more read for the upstream.
func (b *replayBody) forUpstream() io.ReadCloser {
	return io.NopCloser(&b.Reader)
}

// fieldPool recycles the fields of the per-webhook log line, about half a
// kilobyte a request: zap encodes them before Write returns, and its cores
// copy what they keep.
type fieldPool struct{ p sync.Pool }

// logLineFields is the most fields a webhook's log line has.
const logLineFields = 9

func (f *fieldPool) get() *[]zap.Field {
	if s, ok := f.p.Get().(*[]zap.Field); ok {
		return s
	}
	s := make([]zap.Field, 0, logLineFields)
	return &s
}

func (f *fieldPool) put(s *[]zap.Field) {
	if cap(*s) > logLineFields {
		return
	}
	clear(*s) // drop the references to this request's strings
	*s = (*s)[:0]
	f.p.Put(s)
}

// copyBufferPool is the httputil.BufferPool that relays answers. Webhook
// answers are small, so its buffers are too: a larger answer takes a few
// more reads, not a larger buffer per request.
type copyBufferPool struct{ p sync.Pool }

const copyBufferSize = 8 << 10

func (c *copyBufferPool) Get() []byte {
	if b, ok := c.p.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, copyBufferSize)
}

func (c *copyBufferPool) Put(b []byte) {
	if cap(b) != copyBufferSize {
		return
	}
	c.p.Put(&b)
}

// hashingBody fingerprints a body as it streams to the upstream. The
// transport reads it on its own goroutine, possibly still after the answer
// arrived, hence the lock.
type hashingBody struct {
	io.ReadCloser
	mu   sync.Mutex
	h    hash.Hash
	left int64 // bytes still to come when the length is known, else -1
	done bool  // the body was read to its end
	err  error // the sender's body broke off (hung up, too slow)
}

func newHashingBody(body io.ReadCloser, length int64) *hashingBody {
	return &hashingBody{ReadCloser: body, h: sha256.New(), left: length}
}

func (b *hashingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	b.h.Write(p[:n])
	if b.left >= 0 {
		b.left -= int64(n)
	}
	if err == io.EOF || b.left == 0 {
		b.done = true
	} else if err != nil {
		b.err = err
	}
	b.mu.Unlock()
	return n, err
}

// readError is the error that broke off the sender's body, if any.
func (b *hashingBody) readError() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// sum returns the fingerprint of the whole body, or false when the upstream
// answered before the body was read to its end (the fingerprint is unknown).
func (b *hashingBody) sum() (fp [32]byte, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		return fp, false
	}
	b.h.Sum(fp[:0])
	return fp, true
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
