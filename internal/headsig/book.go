package headsig

import (
	"sort"
	"sync"
)

// BookSize is how many heads a Book keeps at most.
const BookSize = 4096

// Book keeps the signed heads a replica verified, so that it can forward
// them with the entries it serves to its own replicas. It keeps the
// newest heads densely and thins the older half when full: the tail of
// the log, where replicas stream, has a head for every batch received,
// and older positions have heads further apart. Safe for concurrent use.
type Book struct {
	mu    sync.Mutex
	heads []Head // ascending Index
}

// Add records a verified head; a head not beyond the newest is ignored.
func (b *Book) Add(h Head) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := len(b.heads); n > 0 && h.Index <= b.heads[n-1].Index {
		return
	}
	if len(b.heads) == BookSize {
		b.heads = thin(b.heads)
	}
	b.heads = append(b.heads, h)
}

// thin drops every other head of the older half of heads.
func thin(heads []Head) []Head {
	half := len(heads) / 2
	out := heads[:0]
	for i, h := range heads {
		if i >= half || i%2 == 0 {
			out = append(out, h)
		}
	}
	return out
}

// Covering returns the first head at or after index.
func (b *Book) Covering(index uint64) (Head, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := sort.Search(len(b.heads), func(i int) bool { return b.heads[i].Index >= index })
	if i == len(b.heads) {
		return Head{}, false
	}
	return b.heads[i], true
}

// Latest returns the newest head.
func (b *Book) Latest() (Head, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.heads) == 0 {
		return Head{}, false
	}
	return b.heads[len(b.heads)-1], true
}

// Reset forgets every head (the log was replaced by a snapshot).
func (b *Book) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.heads = nil
}
