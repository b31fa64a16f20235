package keyuse

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/quicksilver-kv/qs/internal/tree"
)

const (
	// DefaultRate samples one read in 64.
	DefaultRate = 64
	// MaxPending bounds the distinct keys a Sampler holds between two
	// drains (one report a second): at one read in 64 it takes more than
	// a million reads a second of distinct keys to reach it.
	MaxPending = tree.MaxReads
)

// Hash is the hash of a key every node uses for its samples.
func Hash(key []byte) uint64 { return xxhash.Sum64(key) }

// Counters are a sampler's totals since it was made.
type Counters struct {
	Sampled uint64 // reads sampled here
	Merged  uint64 // samples received from children
	Dropped uint64 // samples dropped: MaxPending distinct keys already held
}

// Sampler counts one read in Rate, by key hash, until drained. A nil
// *Sampler samples nothing. Safe for concurrent use.
type Sampler struct {
	mask uint32

	sampled, merged, dropped atomic.Uint64

	mu struct {
		sync.Mutex
		pending map[uint64]uint64
		samples uint64 // samples in pending, counted once each
	}
}

// NewSampler samples one read in rate, which must be a power of two
// between 1 and 2^20.
func NewSampler(rate int) (*Sampler, error) {
	if rate < 1 || rate > 1<<20 || bits.OnesCount(uint(rate)) != 1 {
		return nil, fmt.Errorf("qs: read sample rate %d must be a power of two in 1..%d", rate, 1<<20)
	}
	s := &Sampler{mask: uint32(rate - 1)}
	s.mu.pending = map[uint64]uint64{}
	return s, nil
}

// Observe counts a read of key, one time in Rate.
func (s *Sampler) Observe(key []byte) {
	if s == nil || rand.Uint32()&s.mask != 0 {
		return
	}
	s.sampled.Add(1)
	h := Hash(key)
	s.mu.Lock()
	s.addLocked(h, 1)
	s.mu.Unlock()
}

// ObserveString is Observe for a key held in a string.
func (s *Sampler) ObserveString(key string) {
	if s == nil || rand.Uint32()&s.mask != 0 {
		return
	}
	s.sampled.Add(1)
	h := xxhash.Sum64String(key)
	s.mu.Lock()
	s.addLocked(h, 1)
	s.mu.Unlock()
}

func (s *Sampler) addLocked(h, n uint64) bool {
	if _, ok := s.mu.pending[h]; !ok && len(s.mu.pending) >= MaxPending {
		s.dropped.Add(1)
		return false
	}
	s.mu.pending[h] += n
	s.mu.samples += n
	return true
}

// Merge adds samples received from a child.
func (s *Sampler) Merge(samples []tree.Sample) {
	if s == nil || len(samples) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range samples {
		if x.Count == 0 {
			continue
		}
		if s.addLocked(x.Hash, x.Count) {
			s.merged.Add(1)
		}
	}
}

// Drain returns the samples held and empties the sampler, with the number
// of samples they add up to.
func (s *Sampler) Drain() ([]tree.Sample, uint64) {
	if s == nil {
		return nil, 0
	}
	s.mu.Lock()
	p, n := s.mu.pending, s.mu.samples
	if len(p) > 0 {
		s.mu.pending, s.mu.samples = make(map[uint64]uint64, len(p)), 0
	}
	s.mu.Unlock()
	if len(p) == 0 {
		return nil, 0
	}
	out := make([]tree.Sample, 0, len(p))
	for h, c := range p {
		out = append(out, tree.Sample{Hash: h, Count: c})
	}
	return out, n
}

// Rate is one read in how many that is sampled; 0 for a nil sampler.
func (s *Sampler) Rate() int {
	if s == nil {
		return 0
	}
	return int(s.mask) + 1
}

// Counters returns the sampler's totals.
func (s *Sampler) Counters() Counters {
	if s == nil {
		return Counters{}
	}
	return Counters{Sampled: s.sampled.Load(), Merged: s.merged.Load(), Dropped: s.dropped.Load()}
}
