package server

import (
	"testing"

	"github.com/quicksilver-kv/qs/internal/statuspage"
	"github.com/quicksilver-kv/qs/internal/store"
)

// TestTierCounters: the read cache is the memory tier; a proxy's reads
// answered from its own store, values held and keys known absent, are
// disk hits, and those it had to fetch disk misses.
func TestTierCounters(t *testing.T) {
	m := store.Metrics{ReadCacheHits: 7, ReadCacheMisses: 3, ProxyHits: 11, ProxyNegative: 2, ProxyMisses: 5}
	want := statuspage.Counters{MemoryHits: 7, MemoryMisses: 3, DiskHits: 13, DiskMisses: 5}
	if got := tierCounters(m); got != want {
		t.Fatalf("tierCounters = %+v, want %+v", got, want)
	}
}
