package storetest

import (
	"testing"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// Open opens an empty store for one test, closing it when the test ends.
// again opens another instance on the same data, as a restarted process
// would (closing the first where two instances cannot share the data); it
// may be nil for a store that keeps nothing across a restart.
type Open func(t *testing.T) (b dedup.Backend, again func() dedup.Backend)

// Run runs every case a store's declared features promise: the store
// cases on one Backend from open (in parallel, each on a key of its own),
// and, when the Backend keeps a queue, the queue cases, each on a Backend
// of its own. It first checks that the Backend is what its features
// declare: a queue exactly when Features.Queue, a wake-up exactly when
// Features.Wake, and a Close.
func Run(t *testing.T, open Open) {
	b, _ := open(t)
	checkDeclared(t, b)
	t.Run("store", func(t *testing.T) {
		t.Parallel()
		runStore(t, b.Store)
	})
	if b.Features.Queue {
		t.Run("queue", func(t *testing.T) {
			t.Parallel()
			runQueue(t, open)
		})
	}
}

// checkDeclared fails the test where b does not offer what its features
// declare, or offers what they do not.
func checkDeclared(t *testing.T, b dedup.Backend) {
	t.Helper()
	if b.Store == nil {
		t.Fatal("Backend.Store is nil")
	}
	if b.Close == nil {
		t.Error("Backend.Close is nil")
	}
	if b.Features.Queue != (b.Queue != nil) {
		t.Errorf("Features.Queue is %v, but Backend.Queue is %v", b.Features.Queue, b.Queue)
	}
	if b.Features.Wake != (b.Wake != nil) {
		t.Errorf("Features.Wake is %v, but Backend.Wake is set: %v", b.Features.Wake, b.Wake != nil)
	}
	if b.Features.Queue && !b.Features.Durable {
		t.Error("Features.Queue without Durable: a queue that a restart loses breaks the 202's promise")
	}
}
