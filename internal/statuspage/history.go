package statuspage

import (
	"sync"
	"time"
)

const (
	// Every is how often a History is sampled.
	Every = 2 * time.Second
	// Points is how many samples a History keeps: ten minutes.
	Points = 300
	// tierWindow is the time hit rates are computed over.
	tierWindow = time.Minute
)

// Point is one sample of a database.
type Point struct {
	// T is the time, in Unix milliseconds.
	T            int64   `json:"t"`
	AppliedIndex uint64  `json:"applied_index"`
	LagSeconds   float64 `json:"lag_seconds"`
	// Counters are cumulative cache counters (Counters), kept to compute
	// hit rates; not sent to the page.
	Counters Counters `json:"-"`
}

// History is a fixed ring of Points. Safe for concurrent use.
type History struct {
	mu struct {
		sync.Mutex
		pts  []Point
		next int
	}
}

// NewHistory returns an empty history of Points samples.
func NewHistory() *History {
	h := &History{}
	h.mu.pts = make([]Point, 0, Points)
	return h
}

// Add appends p, forgetting the oldest sample when full.
func (h *History) Add(p Point) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.mu.pts) < Points {
		h.mu.pts = append(h.mu.pts, p)
		return
	}
	h.mu.pts[h.mu.next] = p
	h.mu.next = (h.mu.next + 1) % Points
}

// Points returns the samples, oldest first.
func (h *History) Points() []Point {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Point, 0, len(h.mu.pts))
	out = append(out, h.mu.pts[h.mu.next:]...)
	return append(out, h.mu.pts[:h.mu.next]...)
}
