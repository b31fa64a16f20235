package store

import (
	"math"
	"slices"
	"sync"
	"testing"
)

func TestCounter(t *testing.T) {
	t.Parallel()
	var c counter
	c.Inc()
	c.Add(2)
	c.Add(0.25)
	c.Add(-5)         // a counter never goes down
	c.Add(math.NaN()) // nor takes what is not a number
	if got := c.value(); got != 3.25 {
		t.Fatalf("counter %v, want 3.25", got)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.Inc()
				c.Add(0.5)
			}
		}()
	}
	wg.Wait()
	if got := c.value(); got != 3.25+4*1000*1.5 {
		t.Fatalf("counter %v after concurrent adds, want %v", got, 3.25+4*1000*1.5)
	}
}

func TestGauge(t *testing.T) {
	t.Parallel()
	var g gauge
	if g.value() != 0 {
		t.Fatal("a new gauge is not 0")
	}
	g.Set(7.5)
	g.Set(-2)
	if got := g.value(); got != -2 {
		t.Fatalf("gauge %v, want the last value set", got)
	}
}

// An observation falls in the first bucket whose bound is not below it
// (a value equal to a bound counts in that bound's bucket), as in
// Prometheus.
func TestHistogram(t *testing.T) {
	t.Parallel()
	h := newHistogram([]float64{1, 2, 4})
	for _, v := range []float64{0.5, 1, 1.5, 2, 3, 4, 5, 100} {
		h.Observe(v)
	}
	s := h.snapshot()
	if want := []uint64{2, 4, 6}; !slices.Equal(s.Cumulative, want) {
		t.Errorf("cumulative counts %v, want %v", s.Cumulative, want)
	}
	if s.Count != 8 || s.Sum != 117 {
		t.Errorf("count %d, sum %v; want 8, 117", s.Count, s.Sum)
	}
	if !slices.Equal(s.Bounds, []float64{1, 2, 4}) {
		t.Errorf("bounds %v", s.Bounds)
	}
}

func TestCounterVec(t *testing.T) {
	t.Parallel()
	var v counterVec[TierResult]
	if len(v.snapshot()) != 0 {
		t.Fatal("a new family has series")
	}
	v.WithLabelValues(TierResult{"l2", "hit"}).Inc()
	v.WithLabelValues(TierResult{"l2", "hit"}).Add(2)
	v.WithLabelValues(TierResult{"l2", "miss"})
	got := v.snapshot()
	if len(got) != 2 || got[TierResult{"l2", "hit"}] != 3 || got[TierResult{"l2", "miss"}] != 0 {
		t.Fatalf("family %v", got)
	}
	hv := histogramVec{bounds: []float64{1}}
	hv.WithLabelValues("l3").Observe(0.5)
	hv.WithLabelValues("l3").Observe(2)
	if hs := hv.snapshot(); len(hs) != 1 || hs["l3"].Count != 2 || hs["l3"].Cumulative[0] != 1 {
		t.Fatalf("histogram family %+v", hs)
	}
}

// Counting in a family of two labels allocates nothing once the counter
// exists: a proxy counts every key it serves from its own cache so.
func TestCounterVecNoAllocs(t *testing.T) {
	var v counterVec[TierResult]
	var s counterVec[string]
	allocs := testing.AllocsPerRun(100, func() {
		v.WithLabelValues(TierResult{"l1", "hit"}).Inc()
		s.WithLabelValues("value_crc").Inc()
	})
	if allocs != 0 {
		t.Errorf("counting in a family allocates %.1f times per call", allocs)
	}
}

// The bounds of the latency histograms are Prometheus's, bit for bit
// (their le labels name them).
func TestBounds(t *testing.T) {
	t.Parallel()
	if got := exponentialBounds(1, 2, 4); !slices.Equal(got, []float64{1, 2, 4, 8}) {
		t.Errorf("exponential bounds %v", got)
	}
	if got := latencyBounds; len(got) != 25 || got[0] != 10e-6 || math.Abs(got[24]-10) > 1e-9 {
		t.Errorf("latency bounds %v", got)
	}
}
