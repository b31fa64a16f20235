package cache

import (
	"container/list"
	"hash/crc32"
	"sync"
)

// ShardCache is the budget a node keeps for the values of its own shard of
// the data centre's L2 cache: the values the other nodes of the data
// centre ask it for (the L2 request) and that it reads itself. It is
// filled from the prefetch stream and from the node's own fetches.
//
//   - One version per key: Put of a newer version replaces the held one,
//     Put of an older one is ignored (the data centre reads forward).
//   - Get answers only the exact version asked: another version held is a
//     miss (Other), never a substitute.
//   - Each value is held with its CRC-32C, checked on every Get: a value
//     that changed in memory is dropped and counted (Corrupt), never
//     handed back.
//   - Least recently used values leave first when the budget is exceeded;
//     a value larger than the budget is not held.
//
// A cache with no budget holds nothing. ShardCache is safe for
// concurrent use.
type ShardCache struct {
	max int64

	mu struct {
		sync.Mutex
		bytes   int64
		entries map[string]*list.Element // of *shardEntry
		lru     list.List                // most recently used at the front
		stats   ShardStats
	}
}

type shardEntry struct {
	key   string
	index uint64
	crc   uint32
	value []byte
}

func (e *shardEntry) size() int64 { return int64(len(e.key)+len(e.value)) + transientOverhead }

// ShardResult is what Get found.
type ShardResult int

const (
	// ShardHit: the version asked, checked.
	ShardHit ShardResult = iota
	// ShardAbsent: no version of the key is held.
	ShardAbsent
	// ShardOther: another version of the key is held.
	ShardOther
	// ShardCorrupt: the held value no longer matches its CRC; dropped.
	ShardCorrupt
)

var shardResultNames = [...]string{"hit", "absent", "other_version", "corrupt"}

func (r ShardResult) String() string { return shardResultNames[r] }

// ShardStats are a shard cache's contents and counters.
type ShardStats struct {
	Values, Bytes, Budget int64
	// Since it was made: values put (held), values evicted for room, and
	// Gets by result.
	Puts, Evicted int64
	Gets          [len(shardResultNames)]int64
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// NewShardCache returns a shard cache of maxBytes (≤ 0: none).
func NewShardCache(maxBytes int64) *ShardCache {
	c := &ShardCache{max: max(maxBytes, 0)}
	c.mu.entries = map[string]*list.Element{}
	return c
}

// Enabled reports whether the cache has a budget.
func (c *ShardCache) Enabled() bool { return c.max > 0 }

// Put holds version index of key, unless a newer version is held or the
// value is larger than the budget. The cache keeps key and value: the
// caller must not change them afterwards. It reports whether the value
// is held, and how many values left to make room.
func (c *ShardCache) Put(key []byte, index uint64, value []byte) (held bool, evicted int) {
	e := &shardEntry{key: string(key), index: index, value: value}
	if c.max <= 0 || index == 0 || e.size() > c.max {
		return false, 0
	}
	e.crc = crc32.Checksum(value, castagnoli)
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.mu.entries[e.key]; ok {
		old := el.Value.(*shardEntry)
		if old.index > index {
			return false, 0
		}
		c.removeLocked(el)
	}
	c.mu.entries[e.key] = c.mu.lru.PushFront(e)
	c.mu.bytes += e.size()
	c.mu.stats.Puts++
	for c.mu.bytes > c.max {
		c.removeLocked(c.mu.lru.Back())
		evicted++
	}
	c.mu.stats.Evicted += int64(evicted)
	return true, evicted
}

// Get returns version index of key if it is held and still matches its
// CRC. The value must not be changed.
func (c *ShardCache) Get(key []byte, index uint64) ([]byte, ShardResult) {
	if c.max <= 0 {
		return nil, ShardAbsent
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, v := c.getLocked(key, index)
	c.mu.stats.Gets[r]++
	return v, r
}

func (c *ShardCache) getLocked(key []byte, index uint64) (ShardResult, []byte) {
	el, ok := c.mu.entries[string(key)]
	if !ok {
		return ShardAbsent, nil
	}
	e := el.Value.(*shardEntry)
	if e.index != index {
		return ShardOther, nil
	}
	if crc32.Checksum(e.value, castagnoli) != e.crc {
		c.removeLocked(el)
		return ShardCorrupt, nil
	}
	c.mu.lru.MoveToFront(el)
	return ShardHit, e.value
}

// Holds reports whether version index of key (or a newer one) is held,
// without counting a Get or changing the recency of the key.
func (c *ShardCache) Holds(key []byte, index uint64) bool {
	if c.max <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.mu.entries[string(key)]
	return ok && el.Value.(*shardEntry).index >= index
}

// Drop forgets version index of key (a value found not to match the
// key's record); another version held stays.
func (c *ShardCache) Drop(key []byte, index uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.mu.entries[string(key)]; ok && el.Value.(*shardEntry).index == index {
		c.removeLocked(el)
	}
}

// Stats returns the cache's contents and counters.
func (c *ShardCache) Stats() ShardStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.mu.stats
	s.Values, s.Bytes, s.Budget = int64(len(c.mu.entries)), c.mu.bytes, c.max
	return s
}

func (c *ShardCache) removeLocked(el *list.Element) {
	e := c.mu.lru.Remove(el).(*shardEntry)
	delete(c.mu.entries, e.key)
	c.mu.bytes -= e.size()
}
