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
		if got := Percent(c.live, Floor, basePercent); got != c.want {
			t.Errorf("Percent(%d) = %d, want %d", c.live, got, c.want)
		}
	}
	// The heap goal the runtime derives from the percent: the floor for
	// small heaps, twice the live heap for large ones.
	for live := uint64(0); live < 4*Floor; live += 1 << 20 {
		p := uint64(Percent(live, Floor, basePercent))
		goal := max(live*(100+p)/100, runtimeMinHeap*p/100)
		want := max(uint64(Floor), 2*live)
		if goal < want*95/100 || goal > want*105/100 {
			t.Fatalf("live %d: GOGC %d gives a goal of %d, want about %d", live, p, goal, want)
		}
	}
}

// With the floor in place, allocating 256 MB in 1 MB pieces on a small
// live heap takes a handful of collections instead of over a hundred.
func TestRunFewerCollections(t *testing.T) {
	if !Enabled() {
		t.Skip("GOGC is set in the environment")
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
	without := collections()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Run(ctx); close(done) }()
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if metrics.Read(gogc); gogc[0].Value.Uint64() != basePercent {
			break // Run has set it
		}
	}
	with := collections()
	cancel()
	<-done
	t.Logf("collections for 256 MB of allocation: %d with GOGC=100, %d with the floor", without, with)
	if with*4 > without {
		t.Errorf("%d collections with the floor, %d without: want far fewer", with, without)
	}
}
