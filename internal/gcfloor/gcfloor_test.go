package gcfloor

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, maxPercent},
		{1 << 10, maxPercent}, // tiny heap: capped, the runtime minimum is the floor
		{4 << 20, 1500},       // 4 MB live: goal 64 MB
		{16 << 20, 300},       // 16 MB live: goal 64 MB
		{32 << 20, 100},       // goal 64 MB either way
		{48 << 20, basePercent},
		{1 << 30, basePercent}, // large heap: GOGC's default
	} {
		if got := Percent(c.live, 0, Floor, basePercent); got != c.want {
			t.Errorf("Percent(%d) = %d, want %d", c.live, got, c.want)
		}
	}
	// The heap goal the runtime derives from the percent: the floor for
	// small heaps, twice the live heap for large ones.
	for live := uint64(0); live < 4*Floor; live += 1 << 20 {
		p := uint64(Percent(live, 0, Floor, basePercent))
		goal := max(live*(100+p)/100, runtimeMinHeap*p/100)
		want := max(uint64(Floor), 2*live)
		if goal < want*95/100 || goal > want*105/100 {
			t.Fatalf("live %d: GOGC %d gives a goal of %d, want about %d", live, p, goal, want)
		}
	}
}

// A bounded cache in the live heap (the engine's block cache and
// memtables) adds itself to the heap goal once, not twice: the headroom
// follows the rest of the heap.
func TestPercentCached(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		live, cached, goal uint64
	}{
		{live: 256 * mb, cached: 240 * mb, goal: 240*mb + Floor},  // small rest: the floor
		{live: 320 * mb, cached: 240 * mb, goal: 240*mb + 160*mb}, // rest 80 MB: twice that
		{live: 240 * mb, cached: 240 * mb, goal: 240*mb + Floor},  // all cache
		{live: 100 * mb, cached: 300 * mb, goal: 100*mb + Floor},  // cache figure above live: capped
		{live: 16 * mb, cached: 8 * mb, goal: 8*mb + Floor},
		{live: 1 * mb, cached: 0, goal: Floor},
	} {
		p := uint64(Percent(c.live, c.cached, Floor, basePercent))
		goal := max(c.live*(100+p)/100, runtimeMinHeap*p/100)
		if goal < c.goal*98/100 || goal > c.goal*102/100 {
			t.Errorf("live %d MB, cached %d MB: GOGC %d gives a goal of %.1f MB, want about %.1f MB",
				c.live/mb, c.cached/mb, p, float64(goal)/mb, float64(c.goal)/mb)
		}
	}
	// However large the cache, GOGC stays a positive percent.
	if p := Percent(64<<30, 64<<30-1, Floor, basePercent); p != 1 {
		t.Errorf("Percent with a 64 GiB cache = %d, want 1", p)
	}
}

// With the floor in place, allocating 256 MB in 1 MB pieces on a small
// live heap takes a handful of collections instead of over a hundred.
func TestRunFewerCollections(t *testing.T) {
	if !Enabled() {
		t.Skip("GOGC is set in the environment")
	}
	// The heap goal is what decides when the next collection starts; the
	// number of collections over some allocation depends also on how long
	// each takes (a loaded machine stretches them), so it is only logged.
	goal := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	collections := func() uint32 {
		var sink [][]byte
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 256 {
			sink = append(sink, make([]byte, 1<<20))
			if len(sink) > 2 {
				sink = sink[1:]
			}
		}
		runtime.ReadMemStats(&after)
		return after.NumGC - before.NumGC
	}
	defer debug.SetGCPercent(debug.SetGCPercent(basePercent))
	runtime.GC()
	goalWithout := goal()
	without := collections()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Run(ctx, nil); close(done) }()
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if metrics.Read(gogc); gogc[0].Value.Uint64() != basePercent {
			break // Run has set it
		}
	}
	// Run tunes GOGC to the live heap of the cycle before; the runtime
	// applies it to the next cycle's, which can be smaller (this test's
	// own garbage is gone by then), leaving the goal short of the floor
	// until Run tunes again after that cycle. Give it that cycle.
	runtime.GC()
	goalWith := goal()
	for deadline := time.Now().Add(60 * time.Second); goalWith < Floor*9/10 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		goalWith = goal()
	}
	with := collections()
	cancel()
	<-done
	t.Logf("heap goal %d MB with GOGC=100, %d MB with the floor; collections for 256 MB of allocation: %d and %d",
		goalWithout>>20, goalWith>>20, without, with)
	if goalWithout >= Floor/4 {
		t.Fatalf("heap goal %d bytes before Run: the test needs a small heap", goalWithout)
	}
	if goalWith < Floor*9/10 {
		t.Errorf("heap goal %d bytes with Run, want about the floor %d", goalWith, Floor)
	}
}

// gcCycles signals after each collection, cycle after cycle, with nothing
// polling in between.
func TestGCCyclesSignalsEachCycle(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cycles := gcCycles(ctx)
	for i := range 5 {
		runtime.GC()
		select {
		case <-cycles:
		case <-time.After(60 * time.Second):
			t.Fatalf("no signal 60s after collection %d", i+1)
		}
	}
}
