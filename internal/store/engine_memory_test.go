package store

import (
	"fmt"
	"testing"
)

// GoHeapEngineBytes counts an open store's block cache and memtables when
// the engine keeps them in the Go heap (a build without cgo), stops
// counting it once it is closed, and is 0 in a build with cgo.
func TestGoHeapEngineBytes(t *testing.T) {
	s := openTest(t, Options{Logger: quietLogger()})
	for i := range 100 {
		mustWrite(t, s, set(fmt.Sprintf("k%03d", i), "value"))
	}
	got := GoHeapEngineBytes()
	if !engineInGoHeap {
		if got != 0 {
			t.Fatalf("GoHeapEngineBytes = %d with cgo, want 0", got)
		}
		return
	}
	m := s.db.Metrics()
	own := uint64(m.BlockCache.Size) + m.MemTable.Size
	if own == 0 || got < own {
		t.Fatalf("GoHeapEngineBytes = %d, want at least this store's %d (block cache %d, memtables %d)",
			got, own, m.BlockCache.Size, m.MemTable.Size)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if after := GoHeapEngineBytes(); after > got-own {
		t.Fatalf("after Close: GoHeapEngineBytes = %d, want at most %d (the store no longer counted)", after, got-own)
	}
}
