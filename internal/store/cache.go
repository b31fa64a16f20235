package store

import (
	"hash/maphash"
	"sync"
)

// readCache is the in-memory read tier in front of Pebble: recently read
// keys with their value (or their absence) and index, so that a hit costs
// a map lookup instead of a seek through the memtables and levels. It
// never serves anything the database did not hold at the reader's applied
// index:
//
//   - The committer invalidates every key a group touched, and raises its
//     shard's watermark to the group's last index, before it publishes that
//     index. So a reader that loaded applied index A finds no entry that
//     misses a write ≤ A.
//   - An entry holds the view index it was read at (asOf). A found value is
//     valid at A if the write that set it is ≤ A (nothing changed it up to
//     asOf, nor since, or the entry would be gone); an absence is valid at
//     A if asOf ≤ A.
//   - Readers insert what they read from a view at index V only if their
//     shard's watermark is ≤ V: no write to any key of the shard was
//     processed since V, so the value is still current. A reader racing a
//     write gets its insert refused instead of caching a stale value.
//
// Eviction is random (Go map order) within a shard once the shard is over
// its share of the budget. Values larger than maxCachedValue are not kept.
type readCache struct {
	seed     maphash.Seed
	shardMax int64
	shards   [cacheShards]cacheShard
	m        *storeMetrics
	disabled bool
	valueMax int
}

const (
	cacheShards = 64
	// maxCachedValue: larger values are read from Pebble every time.
	maxCachedValue = 64 << 10
	// entryOverhead approximates the bytes of a map entry and its struct.
	entryOverhead = 96
)

type cacheShard struct {
	mu        sync.Mutex
	entries   map[string]*cacheEntry
	bytes     int64
	watermark uint64 // highest index of a processed write to a key of this shard
}

type cacheEntry struct {
	value []byte // immutable once cached
	index uint64 // the write that set the value; 0 when absent
	asOf  uint64 // the view index it was read at
	found bool
}

func newReadCache(maxBytes int64, m *storeMetrics) *readCache {
	c := &readCache{seed: maphash.MakeSeed(), shardMax: maxBytes / cacheShards, m: m, valueMax: maxCachedValue}
	if maxBytes <= 0 {
		c.disabled = true
	}
	for i := range c.shards {
		c.shards[i].entries = map[string]*cacheEntry{}
	}
	return c
}

func (c *readCache) shard(key []byte) *cacheShard {
	return &c.shards[maphash.Bytes(c.seed, key)%cacheShards]
}

// get returns what the cache can vouch for at applied index a.
func (c *readCache) get(key []byte, a uint64) (value []byte, index uint64, found, ok bool) {
	if c.disabled {
		return nil, 0, false, false
	}
	s := c.shard(key)
	s.mu.Lock()
	e := s.entries[string(key)]
	s.mu.Unlock()
	switch {
	case e == nil:
		return nil, 0, false, false
	case e.found && e.index <= a:
		return e.value, e.index, true, true
	case !e.found && e.asOf <= a:
		return nil, 0, false, true
	}
	return nil, 0, false, false // newer than the reader: not for it
}

// put offers what a view at index asOf read for key.
func (c *readCache) put(key, value []byte, index uint64, found bool, asOf uint64) {
	if c.disabled || len(value) > c.valueMax {
		return
	}
	s := c.shard(key)
	size := int64(len(key)+len(value)) + entryOverhead
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watermark > asOf {
		c.m.cacheRefused.Inc()
		return
	}
	if old := s.entries[string(key)]; old != nil {
		if old.asOf >= asOf {
			return
		}
		s.bytes -= int64(len(key)+len(old.value)) + entryOverhead
	}
	e := &cacheEntry{index: index, asOf: asOf, found: found}
	if found {
		e.value = append([]byte(nil), value...)
	}
	s.entries[string(key)] = e
	s.bytes += size
	for k, v := range s.entries {
		if s.bytes <= c.shardMax {
			break
		}
		if k == string(key) {
			continue
		}
		delete(s.entries, k)
		s.bytes -= int64(len(k)+len(v.value)) + entryOverhead
		c.m.cacheEvictions.Inc()
	}
}

// invalidate drops keys written by entries up to index, before index is
// published.
func (c *readCache) invalidate(keys map[string]*keyState, index uint64) {
	if c.disabled {
		return
	}
	for k := range keys {
		s := c.shard([]byte(k))
		s.mu.Lock()
		if e := s.entries[k]; e != nil {
			delete(s.entries, k)
			s.bytes -= int64(len(k)+len(e.value)) + entryOverhead
		}
		s.watermark = max(s.watermark, index)
		s.mu.Unlock()
	}
}

// reset empties the cache: the database under it was replaced.
func (c *readCache) reset(index uint64) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.entries)
		s.bytes = 0
		s.watermark = max(s.watermark, index)
		s.mu.Unlock()
	}
}

// size returns the entries and bytes held.
func (c *readCache) size() (n int, bytes int64) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.entries)
		bytes += s.bytes
		s.mu.Unlock()
	}
	return n, bytes
}
