package tests

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// TestPropagationLatency measures the time from the root acknowledging a
// write to the write being readable on a leaf two hops down (root →
// intermediate → leaf, three tiers), at a fixed write rate. Each write is
// followed by a read on the leaf with min_index = the acknowledged index,
// which returns as soon as the leaf has applied it. Gated: QS_BENCH=1
// (QS_BENCH_RATE writes/s, default 100; QS_BENCH_WRITES, default 2000).
func TestPropagationLatency(t *testing.T) {
	if os.Getenv("QS_BENCH") == "" {
		t.Skip("benchmark: set QS_BENCH=1")
	}
	rate, writes := 100, 2000
	if v, err := strconv.Atoi(os.Getenv("QS_BENCH_RATE")); err == nil && v > 0 {
		rate = v
	}
	if v, err := strconv.Atoi(os.Getenv("QS_BENCH_WRITES")); err == nil && v > 0 {
		writes = v
	}
	root := startQS(t, t.TempDir())
	mid := startQS(t, t.TempDir(), "--upstream", root.Addr["repl"])
	leaf := startQS(t, t.TempDir(), "--upstream", mid.Addr["repl"])
	rc, lc := root.client(t), leaf.client(t)
	ctx := context.Background()
	val := make([]byte, 100)
	var delays []time.Duration
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	start := time.Now()
	for i := 0; i < writes; i++ {
		<-tick.C
		w, err := rc.Put(ctx, fmt.Sprintf("k%d", i%1000), append(val[:0:0], fmt.Sprint(i)...), nil)
		if err != nil {
			t.Fatal(err)
		}
		acked := time.Now()
		if _, err := lc.Get(ctx, fmt.Sprintf("k%d", i%1000), client.ReadOptions{MinIndex: w.Index, Wait: 10 * time.Second}); err != nil {
			t.Fatalf("write %d (index %d) not readable on the leaf: %v", i, w.Index, err)
		}
		delays = append(delays, time.Since(acked))
	}
	elapsed := time.Since(start)
	slices.Sort(delays)
	pct := func(p float64) time.Duration { return delays[min(len(delays)-1, int(p*float64(len(delays))))] }
	t.Logf("%d writes at %d/s (achieved %.0f/s): ack → readable on leaf p50 %v p99 %v p99.9 %v max %v",
		writes, rate, float64(writes)/elapsed.Seconds(), pct(0.50), pct(0.99), pct(0.999), delays[len(delays)-1])
	leaf.stop()
	mid.stop()
	root.stop()
}
