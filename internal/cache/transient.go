package cache

import (
	"container/list"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// Transient is the in-memory tier in front of a proxy's disk cache, after
// S3-FIFO ("FIFO queues are all you need for cache eviction", SOSP 2023):
// its small FIFO queue holds the values a proxy just fetched, and its
// ghost list the keys that left the queue without being read again.
//
//   - Offer: a fetched value enters the queue (Hold) and costs no disk
//     write. A key the ghost list remembers was read twice recently: its
//     value is stored at once (Store). A value larger than the tier is
//     not held; its key is remembered, so the next fetch stores it.
//   - Take: a read of a version the queue holds is its second read: the
//     value leaves the queue and the caller stores it on disk.
//   - When the queue is over its budget, the oldest values leave it and
//     their keys enter the ghost list; the ghost list forgets its oldest
//     keys beyond its bound: as many keys as the main cache (the disk
//     cache behind the tier) holds values, as S3-FIFO sizes its ghost
//     queue, so a key read again before the main cache would have
//     evicted it is stored on its next fetch.
//
// A tier with no budget holds nothing: Offer always says Store, as if the
// tier were not there. Transient is safe for concurrent use.
type Transient struct {
	max     int64
	ghosts  int          // the ghost list's bound, in keys
	holding atomic.Int64 // values held: lets Take skip the lock when 0

	mu struct {
		sync.Mutex
		bytes   int64
		entries map[string]*list.Element // of *transientEntry
		fifo    list.List                // oldest at the front
		ghost   map[uint32]uint32        // key fingerprint → its ring slot
		ring    []uint32                 // ghost keys' fingerprints, in the order they came
		next    int                      // the ring slot the next ghost key takes
		stats   TransientStats
	}
}

type transientEntry struct {
	key   string
	index uint64
	value []byte
}

// transientOverhead approximates the bytes an entry costs besides its key
// and value: the entry, its list element and its map slot.
const transientOverhead = 128

// ghostUnit: the ghost list remembers as many keys as the main cache holds
// values of this size, between minGhosts and maxGhosts (a ghost key costs
// about 23 bytes of memory: 23 MiB at the bound).
const (
	ghostUnit = 1 << 10
	minGhosts = 1 << 10
	maxGhosts = 1 << 20
)

func (e *transientEntry) size() int64 {
	return int64(len(e.key)+len(e.value)) + transientOverhead
}

// Decision is what Offer decided for a value.
type Decision int

const (
	// Hold: the value is held in memory; it is stored when read again.
	Hold Decision = iota
	// Store: store the value on disk now.
	Store
	// Skip: neither (larger than the tier); the key is remembered.
	Skip
)

func (d Decision) String() string {
	switch d {
	case Hold:
		return "hold"
	case Store:
		return "store"
	case Skip:
		return "skip"
	}
	return "unknown"
}

// TransientStats are the tier's counters.
type TransientStats struct {
	Values, Bytes int64 // held now
	Ghosts        int64 // keys the ghost list remembers now
	Held          int64 // values that entered the queue
	Taken         int64 // values read again while held (then stored)
	GhostStored   int64 // values stored at once: their key was a ghost
	Evicted       int64 // values that left the queue unread
	Skipped       int64 // values larger than the tier
	Prefetched    int64 // values that entered the queue by Prefetch
}

// NewTransient returns a tier of maxBytes (≤ 0: none) in front of a main
// cache of mainBytes, which sizes the ghost list.
func NewTransient(maxBytes, mainBytes int64) *Transient {
	t := &Transient{max: maxBytes, ghosts: ghostBound(max(maxBytes, mainBytes))}
	t.mu.entries = map[string]*list.Element{}
	t.mu.ghost = map[uint32]uint32{}
	return t
}

// ghostBound is the ghost list's bound, in keys, for a cache of bytes.
func ghostBound(bytes int64) int {
	return int(min(max(bytes/ghostUnit, minGhosts), maxGhosts))
}

// Enabled reports whether the tier has a budget.
func (t *Transient) Enabled() bool { return t.max > 0 }

// Offer gives the tier a value just fetched: version index of key. The
// tier keeps value (it must not change) when it says Hold. evicted is the
// number of values that left the tier unread to make room.
func (t *Transient) Offer(key []byte, index uint64, value []byte) (d Decision, evicted int) {
	if t.max <= 0 {
		return Store, 0
	}
	h := xxhash.Sum64(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	if el, ok := t.mu.entries[string(key)]; ok {
		e := el.Value.(*transientEntry)
		t.removeLocked(el)
		if e.index == index {
			// Fetched again while held: a second read.
			t.mu.stats.Taken++
			return Store, 0
		}
	}
	if _, ok := t.mu.ghost[fingerprint(h)]; ok {
		delete(t.mu.ghost, fingerprint(h))
		t.mu.stats.GhostStored++
		return Store, 0
	}
	e := &transientEntry{key: string(key), index: index, value: value}
	if e.size() > t.max {
		t.addGhostLocked(h)
		t.mu.stats.Skipped++
		return Skip, 0
	}
	t.mu.stats.Held++
	return Hold, t.pushLocked(e)
}

// Prefetch gives the tier a value this proxy did not read: another proxy
// of its data centre missed it, and its relay published it. The value
// enters the queue like a fetched one, but a prefetch is not a read: it
// neither stores a value at once (a held version or a ghost key stays as
// it is) nor makes a ghost. held is false when the tier has no budget,
// already holds that version, or the value is larger than the tier.
// The tier keeps value (it must not change) when held is true.
func (t *Transient) Prefetch(key []byte, index uint64, value []byte) (held bool, evicted int) {
	if t.max <= 0 {
		return false, 0
	}
	e := &transientEntry{key: string(key), index: index, value: value}
	if e.size() > t.max {
		return false, 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if el, ok := t.mu.entries[e.key]; ok {
		if el.Value.(*transientEntry).index == index {
			return false, 0
		}
		t.removeLocked(el) // another version: the newer message wins
	}
	t.mu.stats.Prefetched++
	return true, t.pushLocked(e)
}

// pushLocked queues e at the tail and evicts from the head, each evicted
// key becoming a ghost, until the tier is within its budget. It returns
// how many values it evicted.
func (t *Transient) pushLocked(e *transientEntry) (evicted int) {
	t.mu.entries[e.key] = t.mu.fifo.PushBack(e)
	t.mu.bytes += e.size()
	t.holding.Add(1)
	for t.mu.bytes > t.max {
		el := t.mu.fifo.Front()
		old := el.Value.(*transientEntry)
		t.removeLocked(el)
		t.addGhostLocked(xxhash.Sum64String(old.key))
		t.mu.stats.Evicted++
		evicted++
	}
	return evicted
}

// Take returns the value of version index of key if the tier holds it,
// and lets it go: it was read again and is to be stored. A held value of
// another version is dropped (the key changed).
func (t *Transient) Take(key []byte, index uint64) ([]byte, bool) {
	if t.holding.Load() == 0 {
		return nil, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	el, ok := t.mu.entries[string(key)]
	if !ok {
		return nil, false
	}
	e := el.Value.(*transientEntry)
	t.removeLocked(el)
	if e.index != index {
		return nil, false
	}
	t.mu.stats.Taken++
	return e.value, true
}

// Stats returns the tier's counters.
func (t *Transient) Stats() TransientStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.mu.stats
	st.Values, st.Bytes, st.Ghosts = int64(len(t.mu.entries)), t.mu.bytes, int64(len(t.mu.ghost))
	return st
}

func (t *Transient) removeLocked(el *list.Element) {
	e := t.mu.fifo.Remove(el).(*transientEntry)
	delete(t.mu.entries, e.key)
	t.mu.bytes -= e.size()
	t.holding.Add(-1)
}

// fingerprint is what the ghost list keeps of a key's XXH64: its low 32
// bits (the shard map uses the top ones, which the keys of one shard
// share), so a key costs half the memory its whole hash would. Two keys
// of one fingerprint pass for each other: with the list at its bound, a
// key never seen is taken for a ghost about once in 4,000 fetches, and
// its value is stored one read early.
func fingerprint(h uint64) uint32 { return uint32(h) }

// addGhostLocked remembers key hash h, forgetting the oldest ghost key
// once the list is full.
func (t *Transient) addGhostLocked(h uint64) {
	fp := fingerprint(h)
	if _, ok := t.mu.ghost[fp]; ok {
		return
	}
	slot := uint32(len(t.mu.ring))
	if int(slot) < t.ghosts {
		t.mu.ring = append(t.mu.ring, fp)
	} else {
		slot = uint32(t.mu.next)
		t.mu.next = (t.mu.next + 1) % t.ghosts
		// The slot's key may have left the list already (a ghost hit),
		// or come back to another slot since.
		if old := t.mu.ring[slot]; t.mu.ghost[old] == slot {
			delete(t.mu.ghost, old)
		}
		t.mu.ring[slot] = fp
	}
	t.mu.ghost[fp] = slot
}
