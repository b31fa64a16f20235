package store

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
)

// readCache is the in-memory read tier in front of Pebble: recently read
// keys with their value (or their absence) and index, so that a hit costs
// a hash probe instead of a seek through the memtables and levels. It
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
// Layout: a hit is a few dependent memory reads on a large cache (each
// one a likely CPU cache miss), so each shard is an open-addressing table
// of (hash, entry) slots, and an entry is one immutable byte slice holding
// its index, asOf, key and value together: a probe touches the slot, then
// one contiguous entry. Eviction is random (a sweep over hash order)
// within a shard once the shard is over its share of the budget. Values
// larger than maxCachedValue are not kept.
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
	// entryOverhead approximates the bytes an entry costs besides its key
	// and value: its header, its share of the slot table (32-byte slots,
	// at most 3/4 full, doubled when it grows) and allocation rounding.
	entryOverhead = 96
	// minTableSlots is the size of a shard's table when it first fills.
	minTableSlots = 16
)

type cacheShard struct {
	mu        sync.Mutex
	slots     []cacheSlot // len is 0 or a power of two
	n         int         // occupied slots
	bytes     int64
	watermark uint64 // highest index of a processed write to a key of this shard
	hand      int    // where the eviction sweep resumes
}

// cacheSlot is empty when entry is nil. Slots are kept with linear
// probing and backward-shift deletion, so there are no tombstones: a probe
// stops at the first empty slot.
type cacheSlot struct {
	hash  uint64
	entry cacheEntry
}

// cacheEntry is one immutable byte slice: index (8 bytes), asOf (8),
// found (1), key length (2), client flags (4), expiry (8), key, value. Its value is handed to readers
// without a copy, so it is never written once cached.
type cacheEntry []byte

const entryHeader = 31

func newCacheEntry(key []byte, it Item, asOf uint64, found bool) cacheEntry {
	value := it.Value
	e := make([]byte, entryHeader+len(key)+len(value))
	binary.LittleEndian.PutUint64(e, it.Index)
	binary.LittleEndian.PutUint64(e[8:], asOf)
	if found {
		e[16] = 1
	}
	binary.LittleEndian.PutUint16(e[17:], uint16(len(key)))
	binary.LittleEndian.PutUint32(e[19:], it.Flags)
	binary.LittleEndian.PutUint64(e[23:], uint64(it.Expires))
	copy(e[entryHeader:], key)
	copy(e[entryHeader+len(key):], value)
	return e
}

func (e cacheEntry) index() uint64  { return binary.LittleEndian.Uint64(e) }
func (e cacheEntry) asOf() uint64   { return binary.LittleEndian.Uint64(e[8:]) }
func (e cacheEntry) found() bool    { return e[16] == 1 }
func (e cacheEntry) keyLen() int    { return int(binary.LittleEndian.Uint16(e[17:])) }
func (e cacheEntry) cflags() uint32 { return binary.LittleEndian.Uint32(e[19:]) }
func (e cacheEntry) expires() int64 { return int64(binary.LittleEndian.Uint64(e[23:])) }
func (e cacheEntry) key() []byte    { return e[entryHeader : entryHeader+e.keyLen()] }
func (e cacheEntry) value() []byte  { return e[entryHeader+e.keyLen():] }

// size is what the entry counts against the budget.
func (e cacheEntry) size() int64 { return int64(len(e)) + entryOverhead }

func newReadCache(maxBytes int64, m *storeMetrics) *readCache {
	c := &readCache{seed: maphash.MakeSeed(), shardMax: maxBytes / cacheShards, m: m, valueMax: maxCachedValue}
	if maxBytes <= 0 {
		c.disabled = true
	}
	return c
}

// locate returns the shard of key and the key's hash. The shard is chosen
// by the top bits, the slot by the bottom ones.
func (c *readCache) locate(key []byte) (*cacheShard, uint64) {
	h := maphash.Bytes(c.seed, key)
	return &c.shards[h>>58], h // 64 shards: the top 6 bits
}

// locateString is locate for a key held as a string (same hash).
func (c *readCache) locateString(key string) (*cacheShard, uint64) {
	h := maphash.String(c.seed, key)
	return &c.shards[h>>58], h
}

// get returns what the cache can vouch for at applied index a. The value
// is immutable and may be kept.
func (c *readCache) get(key []byte, a uint64) (it Item, found, ok bool) {
	if c.disabled {
		return Item{}, false, false
	}
	s, h := c.locate(key)
	s.mu.Lock()
	e := s.lookupLocked(key, h)
	s.mu.Unlock()
	switch {
	case e == nil:
		return Item{}, false, false
	case e.found() && e.index() <= a:
		return Item{Value: e.value(), Index: e.index(), Flags: e.cflags(), Expires: e.expires()}, true, true
	case !e.found() && e.asOf() <= a:
		return Item{}, false, true
	}
	return Item{}, false, false // newer than the reader: not for it
}

// put offers what a view at index asOf read for key.
func (c *readCache) put(key []byte, it Item, found bool, asOf uint64) {
	if c.disabled || len(it.Value) > c.valueMax {
		return
	}
	s, h := c.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watermark > asOf {
		c.m.cacheRefused.Inc()
		return
	}
	i, old := findLocked(s, key, h)
	if old != nil && old.asOf() >= asOf {
		return
	}
	if !found {
		it = Item{}
	}
	e := newCacheEntry(key, it, asOf, found)
	if old != nil {
		s.bytes += e.size() - old.size()
		s.slots[i].entry = e
	} else {
		s.insertLocked(h, e)
	}
	for s.bytes > c.shardMax && s.evictOneLocked(h) {
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
		s, h := c.locateString(k)
		s.mu.Lock()
		if i, e := findLocked(s, k, h); e != nil {
			s.bytes -= e.size()
			s.deleteLocked(i)
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
		s.slots, s.n, s.bytes, s.hand = nil, 0, 0, 0
		s.watermark = max(s.watermark, index)
		s.mu.Unlock()
	}
}

// size returns the entries and bytes held.
func (c *readCache) size() (n int, bytes int64) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += s.n
		bytes += s.bytes
		s.mu.Unlock()
	}
	return n, bytes
}

// lookupLocked returns the entry of key, or nil.
func (s *cacheShard) lookupLocked(key []byte, h uint64) cacheEntry {
	_, e := findLocked(s, key, h)
	return e
}

// findLocked returns the slot of s holding key and its entry, or the
// empty slot where the probe ended and nil.
func findLocked[K ~string | ~[]byte](s *cacheShard, key K, h uint64) (int, cacheEntry) {
	if len(s.slots) == 0 {
		return -1, nil
	}
	mask := len(s.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		sl := &s.slots[i]
		if sl.entry == nil {
			return i, nil
		}
		if sl.hash == h && string(sl.entry.key()) == string(key) {
			return i, sl.entry
		}
	}
}

// insertLocked adds an entry for a key the shard does not hold.
func (s *cacheShard) insertLocked(h uint64, e cacheEntry) {
	if (s.n+1)*4 > len(s.slots)*3 {
		s.growLocked()
	}
	mask := len(s.slots) - 1
	i := int(h) & mask
	for s.slots[i].entry != nil {
		i = (i + 1) & mask
	}
	s.slots[i] = cacheSlot{hash: h, entry: e}
	s.n++
	s.bytes += e.size()
}

func (s *cacheShard) growLocked() {
	old := s.slots
	s.slots = make([]cacheSlot, max(minTableSlots, 2*len(old)))
	mask := len(s.slots) - 1
	for _, sl := range old {
		if sl.entry == nil {
			continue
		}
		i := int(sl.hash) & mask
		for s.slots[i].entry != nil {
			i = (i + 1) & mask
		}
		s.slots[i] = sl
	}
	s.hand &= mask
}

// deleteLocked empties slot i and moves later entries of its probe run
// back, so that every entry stays reachable from its home slot.
func (s *cacheShard) deleteLocked(i int) {
	mask := len(s.slots) - 1
	for j := (i + 1) & mask; s.slots[j].entry != nil; j = (j + 1) & mask {
		home := int(s.slots[j].hash) & mask
		// The entry at j may fill the hole at i if its home is not in
		// (i, j], cyclically.
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			s.slots[i] = s.slots[j]
			i = j
		}
	}
	s.slots[i] = cacheSlot{}
	s.n--
}

// evictOneLocked removes the next entry of the sweep, skipping any with
// hash keep (the entry just inserted). It reports false if there was
// none to remove.
func (s *cacheShard) evictOneLocked(keep uint64) bool {
	mask := len(s.slots) - 1
	for range len(s.slots) {
		i := s.hand
		s.hand = (s.hand + 1) & mask
		sl := &s.slots[i]
		if sl.entry == nil || sl.hash == keep {
			continue
		}
		s.bytes -= sl.entry.size()
		s.deleteLocked(i)
		return true
	}
	return false
}
