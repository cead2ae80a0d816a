package memstore

import (
	"context"
	"crypto/sha256"
	"fmt"
	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/storetest"
	"reflect"
	"runtime"
	"strconv"
	"testing"
	"time"
)

func TestMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (dedup.Backend, func() dedup.Backend) {
		m := New()
		t.Cleanup(func() { _ = m.Close() })
		return m.Backend(), nil
	})
}

func TestMemoryJanitorPurgesExpired(t *testing.T) {
	m := newMemory(10 * time.Millisecond)
	t.Cleanup(func() { _ = m.Close() })
	ctx := context.Background()
	const n = 100
	// Long enough that no record expires before it is counted, on a
	// loaded machine too; the janitor looks every 10ms.
	const shortLease = time.Second
	for i := range n {
		if _, _, err := m.Claim(ctx, "short/"+strconv.Itoa(i), shortLease); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := m.Claim(ctx, "long", time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := m.size(); got != n+1 {
		t.Fatalf("size = %d, want %d", got, n+1)
	}
	storetest.Eventually(t, "the janitor to purge expired records", func() bool { return m.size() == 1 })
	if _, err := m.Lookup(ctx, "long"); err != nil {
		t.Errorf("the janitor purged a live record: %v", err)
	}
}

func TestMemoryCloseIsIdempotent(t *testing.T) {
	m := New()
	for i := range 2 {
		if err := m.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	// The store outlives its janitor.
	if _, _, err := m.Claim(context.Background(), "k", time.Minute); err != nil {
		t.Errorf("Claim after Close: %v", err)
	}
}

// TestMemoryRecordSize measures the heap one completed record costs in the
// embedded store (keys shaped like Stripe's, as TestRecordMemory writes to
// Redis), and bounds it: the store holds every event of the retry window.
func TestMemoryRecordSize(t *testing.T) {
	const n = 50_000
	m := New()
	t.Cleanup(func() { _ = m.Close() })
	ctx := context.Background()
	res := dedup.Result{Status: 200, Fingerprint: sha256.Sum256([]byte(`{"id":"evt_1"}`))}
	before := heapInUse()
	for i := range n {
		key := fmt.Sprintf("webhook-dedup:stripe:evt_1NvYwq2eZvKY%012d", i)
		c, _, err := m.Claim(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Complete(ctx, c, res, 96*time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	perRecord := float64(heapInUse()-before) / n
	t.Logf("%d completed records: %.0f bytes of heap each", n, perRecord)
	if perRecord > 160 {
		t.Errorf("a completed record costs %.0f bytes of heap, want at most 160", perRecord)
	}
	runtime.KeepAlive(m)
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestMemoryEntryHasNoPointers: the map of records holds no pointers, so
// the garbage collector never scans it, however many records it holds.
func TestMemoryEntryHasNoPointers(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeFor[memoryKey](), reflect.TypeFor[memoryEntry]()} {
		if path := pointerIn(typ); path != "" {
			t.Errorf("%s holds a pointer: %s", typ, path)
		}
	}
}

// pointerIn names a field of typ that holds a pointer, or returns "".
func pointerIn(typ reflect.Type) string {
	switch typ.Kind() {
	case reflect.Struct:
		for i := range typ.NumField() {
			if p := pointerIn(typ.Field(i).Type); p != "" {
				return typ.Field(i).Name + "." + p
			}
		}
		return ""
	case reflect.Array:
		return pointerIn(typ.Elem())
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return ""
	default:
		return typ.Kind().String()
	}
}

func BenchmarkMemory(b *testing.B) {
	m := New()
	b.Cleanup(func() { _ = m.Close() })
	storetest.Bench(b, m.Backend())
}
