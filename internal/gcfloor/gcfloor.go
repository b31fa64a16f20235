package gcfloor

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"

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
	// pollInterval is how often Run looks for a finished cycle.
	pollInterval = 100 * time.Millisecond
)

// Percent returns the GOGC that makes the heap goal at least floor bytes
// for a live heap of live bytes, and never less than base.
func Percent(live, floor uint64, base int) int {
	if live == 0 {
		return maxPercent
	}
	p := int(min(floor*100/live, maxPercent+100)) - 100
	return max(base, min(p, maxPercent))
}

// Enabled reports whether Run will tune the collector: not if GOGC is set
// in the environment.
func Enabled() bool { return os.Getenv("GOGC") == "" }

// Run sets GOGC after every collection until ctx ends, then restores
// GOGC's default. It returns at once if !Enabled().
func Run(ctx context.Context) {
	if !Enabled() {
		return
	}
	defer debug.SetGCPercent(basePercent)
	samples := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/live:bytes"}}
	lastCycle := ^uint64(0)
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		metrics.Read(samples)
		if cycles := samples[0].Value.Uint64(); cycles != lastCycle {
			lastCycle = cycles
			p := Percent(samples[1].Value.Uint64(), Floor, basePercent)
			debug.SetGCPercent(p)
			gcPercent.Set(float64(p))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

var gcPercent = qsmetrics.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{
	Namespace: qsmetrics.Namespace, Subsystem: "gc", Name: "percent",
	Help: "GOGC as last set by the heap floor (see internal/gcfloor); absent when GOGC is set in the environment.",
}))
