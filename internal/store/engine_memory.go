package store

import "sync"

// openStores are the stores open in the process. A store joins at open and
// leaves at close, which waits for a reader holding mu, so that a closed
// engine is never asked for its metrics.
var openStores = storeSet{stores: map[*Store]struct{}{}}

type storeSet struct {
	mu     sync.Mutex
	stores map[*Store]struct{}
}

func (c *storeSet) add(s *Store) {
	c.mu.Lock()
	c.stores[s] = struct{}{}
	c.mu.Unlock()
}

func (c *storeSet) remove(s *Store) {
	c.mu.Lock()
	delete(c.stores, s)
	c.mu.Unlock()
}

// GoHeapEngineBytes is the memory of the open stores' block caches and
// memtables when the storage engine allocates them from the Go heap, and 0
// when it allocates them from the C library. The engine takes its manual
// memory from the C allocator in a build with cgo; without cgo (the
// container image) it takes it from the Go heap, where the collector
// counts it as live heap like any other. It is long-lived and bounded by
// each store's CacheBytes, so the garbage collector's headroom need not
// grow with it (see internal/gcfloor).
func GoHeapEngineBytes() uint64 {
	if !engineInGoHeap {
		return 0
	}
	openStores.mu.Lock()
	defer openStores.mu.Unlock()
	var n uint64
	for s := range openStores.stores {
		s.engine.RLock()
		m := s.db.Metrics()
		s.engine.RUnlock()
		n += uint64(max(m.BlockCache.Size, 0)) + m.MemTable.Size
	}
	return n
}
