package proxy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"net/http"
	"sync"
)

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

// maxArrivedBody bounds the declared length of a body that takeArrivedBody
// reads on a route that streams.
const maxArrivedBody = 16 << 10

// takeArrivedBody makes one read of a small body on a route that streams
// it (a header-sourced ID, no signature to check). A webhook's body usually
// arrives with its headers and is already in net/http's buffer, so that
// read does not wait. When it returns the whole body, the body is handed
// on from memory, as on routes that read it: its headers and body then
// reach the upstream in one write, not two. When it returns only a part,
// that part goes first and the rest streams. Either way the proxy holds
// one chunk at most, waits only as a streaming copy waits for its first
// bytes, and answers no 413 (MAX_BODY_BYTES is for routes that must hold
// the body).
func takeArrivedBody(r *http.Request, wh *webhook, buf *bytes.Buffer) error {
	buf.Grow(int(r.ContentLength))
	chunk := buf.AvailableBuffer()[:r.ContentLength]
	n, err := r.Body.Read(chunk)
	if err != nil && !errors.Is(err, io.EOF) {
		return errors.Join(errBodyRead, err)
	}
	if int64(n) == r.ContentLength {
		wh.setBody(r, chunk[:n])
		return nil
	}
	r.Body = readCloser{io.MultiReader(bytes.NewReader(chunk[:n]), r.Body), r.Body}
	return nil
}

// hashingBody follows a body as it streams to the upstream: whether it was
// read to its end or broke off, and, when asked to, its fingerprint. The
// transport reads it on its own goroutine, possibly still after the answer
// arrived, hence the lock.
type hashingBody struct {
	io.ReadCloser
	mu   sync.Mutex
	h    hash.Hash // nil when the fingerprint is not wanted
	left int64     // bytes still to come when the length is known, else -1
	done bool      // the body was read to its end
	err  error     // the sender's body broke off (hung up, too slow)
}

// newHashingBody follows body, of length (-1 when unknown), fingerprinting
// it when hash is set.
func newHashingBody(body io.ReadCloser, length int64, hash bool) *hashingBody {
	b := &hashingBody{ReadCloser: body, left: length}
	if hash {
		b.h = sha256.New()
	}
	return b
}

func (b *hashingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	if b.h != nil {
		b.h.Write(p[:n])
	}
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
// answered before the body was read to its end (the fingerprint is unknown),
// or when it was not fingerprinted.
func (b *hashingBody) sum() (fp [32]byte, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done || b.h == nil {
		return fp, false
	}
	b.h.Sum(fp[:0])
	return fp, true
}

type readCloser struct {
	io.Reader
	io.Closer
}

// fingerprint is the SHA-256 of a body.
func fingerprint(body []byte) [32]byte { return sha256.Sum256(body) }
