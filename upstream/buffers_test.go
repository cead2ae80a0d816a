package upstream

import "testing"

// TestBufferPool: the relay's buffers come back at their full size, a
// buffer given back costs no allocation (one per answer otherwise), and
// one of another length is dropped rather than pooled.
func TestBufferPool(t *testing.T) {
	var pool BufferPool
	for _, tc := range []struct {
		name string
		buf  func() []byte
	}{
		{"one of its own", pool.Get},
		{"shorter", func() []byte { return make([]byte, bufferSize/2) }},
		{"longer", func() []byte { return make([]byte, 2*bufferSize) }},
		{"its own, resliced short", func() []byte { return pool.Get()[:10] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.buf()
			if n := testing.AllocsPerRun(100, func() { pool.Put(b) }); n != 0 {
				t.Errorf("Put allocates %v times", n)
			}
			if got := pool.Get(); len(got) != bufferSize {
				t.Errorf("Get returned %d bytes, want %d", len(got), bufferSize)
			}
		})
	}
}
