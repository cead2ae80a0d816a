package upstream

import "sync"

// BufferPool is the httputil.BufferPool that relays the app's answers, on
// sync routes and in async delivery. Webhook answers are small, so its
// buffers are too: a larger answer takes a few more reads, not a larger
// buffer per request. Without one, a ReverseProxy allocates 32 KiB per
// answer. It pools pointers to arrays, which a slice of the full size
// converts back to without an allocation (pooling the slice itself would
// box a new slice header on every Put). The zero value is ready to use.
type BufferPool struct{ p sync.Pool }

const bufferSize = 8 << 10

// Get returns a buffer of the pool, or a new one.
func (c *BufferPool) Get() []byte {
	if b, ok := c.p.Get().(*[bufferSize]byte); ok {
		return b[:]
	}
	return new([bufferSize]byte)[:]
}

// Put gives b back to the pool, unless it is not one of its size.
func (c *BufferPool) Put(b []byte) {
	if len(b) != bufferSize {
		return
	}
	c.p.Put((*[bufferSize]byte)(b))
}
