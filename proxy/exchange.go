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
)

// exchange wraps the sender's ResponseWriter while the upstream's answer is
// relayed: it marks the answer with its outcome and records the status.
type exchange struct {
	http.ResponseWriter
	outcome     string
	status      int
	upstreamErr error
}

func newExchange(w http.ResponseWriter, outcome string) *exchange {
	return &exchange{ResponseWriter: w, outcome: outcome}
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
	body := answerBody{Status: outcome, EventID: wh.id, Message: message}
	b, _ := json.Marshal(body)
	b = append(b, '\n')
	hdr.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

type answerBody struct {
	Status  string `json:"status"`
	EventID string `json:"event_id,omitempty"`
	Message string `json:"message,omitempty"`
}

// readBody reads the whole body, at most MaxBodyBytes, into a pooled
// buffer. A declared Content-Length over the limit is refused before reading.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) (*bytes.Buffer, error) {
	limit := h.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	buf := h.pool.get()
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return buf, err
		}
		return buf, errors.Join(errBodyRead, err)
	}
	return buf, nil
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
