package gcfloor

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"

	"github.com/prometheus/client_golang/prometheus"
	qsmetrics "github.com/quicksilver-kv/qs/internal/metrics"
)

const (
	// Floor is the heap size below which no collection starts.
	Floor = 64 << 20
	// basePercent is GOGC's default, kept for heaps above the floor.
	basePercent = 100
	// runtimeMinHeap is the Go runtime's minimum heap goal at GOGC=100; it
	// scales with GOGC.
	runtimeMinHeap = 4 << 20
	// maxPercent bounds GOGC while the live heap is tiny (at startup): the
	// runtime's minimum goal is then the floor.
	maxPercent = Floor / runtimeMinHeap * 100
)

// Percent returns the GOGC that makes the heap goal
// cached + max(floor, (live−cached) × (1 + base/100)) for a live heap of
// live bytes, of which cached bytes are long-lived caches of bounded size
// (the storage engine's block cache and memtables, when they are in the Go
// heap): the usual proportional rule, with the floor for small heaps,
// applied to the rest of the heap. With cached 0, the result is never less
// than base; it is at least 1.
func Percent(live, cached, floor uint64, base int) int {
	if live == 0 {
		return maxPercent
	}
	cached = min(cached, live)
	rest := live - cached
	goal := cached + max(floor, rest*uint64(100+base)/100)
	p := int(min(goal*100/live, maxPercent+100)) - 100
	return max(1, min(p, maxPercent))
}

// Enabled reports whether Run will tune the collector: not if GOGC is set
// in the environment.
func Enabled() bool { return os.Getenv("GOGC") == "" }

// Run sets GOGC after every collection until ctx ends, then restores
// GOGC's default. It returns at once if !Enabled(). cached, if not nil,
// reports the bytes of the live heap that are bounded long-lived caches
// (see Percent).
func Run(ctx context.Context, cached func() uint64) {
	if !Enabled() {
		return
	}
	defer debug.SetGCPercent(basePercent)
	samples := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/live:bytes"}}
	lastCycle := ^uint64(0)
	cycles := gcCycles(ctx)
	for {
		metrics.Read(samples)
		if cycles := samples[0].Value.Uint64(); cycles != lastCycle {
			lastCycle = cycles
			var c uint64
			if cached != nil {
				c = cached()
			}
			p := Percent(samples[1].Value.Uint64(), c, Floor, basePercent)
			debug.SetGCPercent(p)
			gcPercent.Set(float64(p))
			gcCached.Set(float64(c))
		}
		select {
		case <-ctx.Done():
			return
		case <-cycles:
		}
	}
}

// gcCycles returns a channel that receives after each garbage collection
// cycle, until ctx ends: a sentinel object is allocated and dropped, and
// its cleanup, which runs once a cycle found it unreachable, signals and
// drops the next. A process that does not collect is not woken at all
// (polling the cycle count woke every server ten times a second).
func gcCycles(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	var arm func()
	arm = func() {
		if ctx.Err() != nil {
			return
		}
		runtime.AddCleanup(new(sentinel), func(struct{}) {
			// The next sentinel before the signal: a collection that
			// starts once the signal is taken finds it.
			arm()
			select {
			case ch <- struct{}{}:
			default: // Run has not taken the last one yet
			}
		}, struct{}{})
	}
	arm()
	return ch
}

// sentinel holds a pointer, so that it is never allocated together with
// other small objects (whose lifetimes would delay its cleanup).
type sentinel struct{ _ [2]*byte }

var gcPercent = qsmetrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
	Namespace: qsmetrics.Namespace, Subsystem: "gc", Name: "percent",
	Help: "GOGC as last set by the heap floor (see internal/gcfloor); absent when GOGC is set in the environment.",
}))

var gcCached = qsmetrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
	Namespace: qsmetrics.Namespace, Subsystem: "gc", Name: "cached_heap_bytes",
	Help: "Bytes of the live Go heap held by the storage engine's block caches and memtables, left out of the collector's proportional headroom when GOGC was last set (0 in a build with cgo, where they are outside the Go heap).",
}))
