package keyuse

import (
	"sync"
	"time"

	"github.com/quicksilver-kv/qs/internal/tree"
)

const (
	// Retention is how long a Window remembers a key was read: the
	// longest window a report can ask about.
	Retention = 7 * 24 * time.Hour
	// MaxWindowKeys bounds the keys a Window remembers (about 40 MB at
	// the bound). A sample of a new key beyond it is dropped and counted.
	MaxWindowKeys = 1 << 20
)

// Window remembers when each key hash was last seen read. Safe for
// concurrent use.
type Window struct {
	start time.Time
	mu    struct {
		sync.Mutex
		last    map[uint64]int64 // key hash → Unix seconds of the last sample
		dropped uint64
		pruned  time.Time
	}
}

// NewWindow returns an empty window that started collecting at now.
func NewWindow(now time.Time) *Window {
	w := &Window{start: now}
	w.mu.last = map[uint64]int64{}
	w.mu.pruned = now
	return w
}

// Since is when the window started collecting.
func (w *Window) Since() time.Time { return w.start }

// Add records samples seen at now.
func (w *Window) Add(samples []tree.Sample, now time.Time) {
	if len(samples) == 0 {
		return
	}
	t := now.Unix()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pruneLocked(now)
	for _, s := range samples {
		if _, ok := w.mu.last[s.Hash]; !ok && len(w.mu.last) >= MaxWindowKeys {
			w.mu.dropped++
			continue
		}
		w.mu.last[s.Hash] = t
	}
}

// pruneLocked forgets keys last read before the retention, at most once a
// minute.
func (w *Window) pruneLocked(now time.Time) {
	if now.Sub(w.mu.pruned) < time.Minute {
		return
	}
	w.mu.pruned = now
	cut := now.Add(-Retention).Unix()
	for h, t := range w.mu.last {
		if t < cut {
			delete(w.mu.last, h)
		}
	}
}

// ReadSince reports whether a read of the key with hash h was seen at or
// after t.
func (w *Window) ReadSince(h uint64, t time.Time) bool {
	w.mu.Lock()
	last, ok := w.mu.last[h]
	w.mu.Unlock()
	return ok && last >= t.Unix()
}

// Stats are a window's size and drops.
type Stats struct {
	Keys    int
	Dropped uint64
}

// Stats returns the keys remembered and the samples dropped for the bound.
func (w *Window) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Stats{Keys: len(w.mu.last), Dropped: w.mu.dropped}
}
