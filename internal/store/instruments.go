package store

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"
)

// The instruments a store counts with: plain atomics, owned by one store
// instance and read through (*Store).Metrics. Exporting them (names, help
// texts, the Prometheus format) is the job of the metrics collector of the
// process, not of the store.

// counter only goes up. Whole increments (nearly all of them) go to an
// integer; fractional ones (seconds) to a float updated by compare and
// swap.
type counter struct {
	whole atomic.Uint64
	frac  atomic.Uint64 // float64 bits
}

func (c *counter) Inc() { c.whole.Add(1) }

// Add adds v, which must not be negative (a negative v is ignored, as a
// counter never goes down).
func (c *counter) Add(v float64) {
	if !(v > 0) {
		return
	}
	if w := uint64(v); float64(w) == v {
		c.whole.Add(w)
		return
	}
	addFloat(&c.frac, v)
}

func (c *counter) value() float64 {
	return float64(c.whole.Load()) + math.Float64frombits(c.frac.Load())
}

// gauge holds the last value set.
type gauge struct{ bits atomic.Uint64 }

func (g *gauge) Set(v float64) { g.bits.Store(math.Float64bits(v)) }

func (g *gauge) value() float64 { return math.Float64frombits(g.bits.Load()) }

func addFloat(bits *atomic.Uint64, v float64) {
	for {
		old := bits.Load()
		if bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// histogram counts observations in buckets with fixed upper bounds (an
// observation equal to a bound falls in that bound's bucket), as a
// Prometheus histogram does.
type histogram struct {
	bounds []float64       // ascending
	counts []atomic.Uint64 // per bucket (not cumulative); the last is above every bound
	sum    atomic.Uint64   // float64 bits
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

func (h *histogram) Observe(v float64) {
	h.counts[sort.SearchFloat64s(h.bounds, v)].Add(1)
	addFloat(&h.sum, v)
}

// Histogram is a snapshot of a histogram.
type Histogram struct {
	// Bounds are the buckets' upper bounds, ascending (the bucket above
	// the last bound is not listed).
	Bounds []float64
	// Cumulative[i] counts the observations at most Bounds[i].
	Cumulative []uint64
	// Count counts every observation, Sum adds them up.
	Count uint64
	Sum   float64
}

func (h *histogram) snapshot() Histogram {
	s := Histogram{Bounds: h.bounds, Cumulative: make([]uint64, len(h.bounds))}
	for i := range h.counts {
		s.Count += h.counts[i].Load()
		if i < len(h.bounds) {
			s.Cumulative[i] = s.Count
		}
	}
	s.Sum = math.Float64frombits(h.sum.Load())
	return s
}

// counterVec is a family of counters told apart by a label value K (a
// string, or a struct of several). A counter exists from its first use
// (or from init), as in Prometheus. K is the map key as is, so that
// finding a counter allocates nothing.
type counterVec[K comparable] struct {
	m sync.Map // K → *counter
}

func (v *counterVec[K]) WithLabelValues(k K) *counter {
	if c, ok := v.m.Load(k); ok {
		return c.(*counter)
	}
	c, _ := v.m.LoadOrStore(k, &counter{})
	return c.(*counter)
}

// snapshot returns the value of every counter of the family.
func (v *counterVec[K]) snapshot() map[K]float64 {
	out := map[K]float64{}
	v.m.Range(func(k, c any) bool {
		out[k.(K)] = c.(*counter).value()
		return true
	})
	return out
}

// histogramVec is a family of histograms told apart by one label value.
type histogramVec struct {
	bounds []float64
	m      sync.Map // label value → *histogram
}

func (v *histogramVec) WithLabelValues(value string) *histogram {
	if h, ok := v.m.Load(value); ok {
		return h.(*histogram)
	}
	h, _ := v.m.LoadOrStore(value, newHistogram(v.bounds))
	return h.(*histogram)
}

func (v *histogramVec) snapshot() map[string]Histogram {
	out := map[string]Histogram{}
	v.m.Range(func(k, h any) bool {
		out[k.(string)] = h.(*histogram).snapshot()
		return true
	})
	return out
}

// exponentialBounds returns count bounds from start, each factor times
// the one before (as prometheus.ExponentialBuckets).
func exponentialBounds(start, factor float64, count int) []float64 {
	b := make([]float64, count)
	for i := range b {
		b[i] = start
		start *= factor
	}
	return b
}

// exponentialBoundsRange returns count bounds from lo to hi, each the
// same factor times the one before (as prometheus.ExponentialBucketsRange,
// bit for bit, so that the buckets' names stay the same).
func exponentialBoundsRange(lo, hi float64, count int) []float64 {
	growth := math.Pow(hi/lo, 1.0/float64(count-1))
	b := make([]float64, count)
	for i := 1; i <= count; i++ {
		b[i-1] = lo * math.Pow(growth, float64(i-1))
	}
	return b
}

// latencyBounds are the buckets of the store's latency histograms, from
// 10µs to 10s (as the process's other latency histograms).
var latencyBounds = exponentialBoundsRange(10e-6, 10, 25)
