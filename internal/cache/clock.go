package cache

import (
	"hash/maphash"
	"sync/atomic"
)

// clockWords sizes the CLOCK reference bits: 2^22 bits (512 KiB), shared
// by key hash. A collision only keeps a value longer.
const clockWords = 1 << 16

// Clock holds the reference bits of a CLOCK eviction: one bit per key
// hash, set by reads (Touch), cleared by the sweeping hand
// (SecondChance). It is safe for concurrent use and never blocks.
type Clock struct {
	seed maphash.Seed
	ref  []atomic.Uint64
}

// NewClock returns reference bits that are all clear.
func NewClock() *Clock {
	return &Clock{seed: maphash.MakeSeed(), ref: make([]atomic.Uint64, clockWords)}
}

func (c *Clock) refBit(key []byte) (*atomic.Uint64, uint64) {
	h := maphash.Bytes(c.seed, key)
	return &c.ref[(h>>6)%clockWords], 1 << (h & 63)
}

// Touch marks key as recently used.
func (c *Clock) Touch(key []byte) {
	w, bit := c.refBit(key)
	if w.Load()&bit == 0 {
		w.Or(bit)
	}
}

// SecondChance clears key's reference bit and reports whether it was set:
// a key used since the hand last passed is kept for another turn.
func (c *Clock) SecondChance(key []byte) bool {
	w, bit := c.refBit(key)
	return w.And(^bit)&bit != 0
}
