package dedup

import (
	"context"
	"strconv"
	"testing"
	"time"
)

func TestMemory(t *testing.T) {
	m := NewMemory()
	t.Cleanup(func() { _ = m.Close() })
	testStore(t, m)
}

func TestMemoryJanitorPurgesExpired(t *testing.T) {
	m := newMemory(10 * time.Millisecond)
	t.Cleanup(func() { _ = m.Close() })
	ctx := context.Background()
	const n = 100
	for i := range n {
		if _, _, err := m.Claim(ctx, "short/"+strconv.Itoa(i), 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := m.Claim(ctx, "long", time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := m.size(); got != n+1 {
		t.Fatalf("size = %d, want %d", got, n+1)
	}
	eventually(t, "the janitor to purge expired records", func() bool { return m.size() == 1 })
	if _, err := m.Lookup(ctx, "long"); err != nil {
		t.Errorf("the janitor purged a live record: %v", err)
	}
}

func TestMemoryCloseIsIdempotent(t *testing.T) {
	m := NewMemory()
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
