package tests

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/client"
)

// TestFanOut starts one root and N replica processes replicating from it
// directly, writes at a fixed rate, and measures for each write the time
// from its acknowledgement until every replica can read it, plus the
// root's CPU time and resident memory. Gated: QS_BENCH=1 (QS_BENCH_REPLICAS,
// default 50; QS_BENCH_WRITES, default 500; QS_BENCH_RATE, default 100/s).
func TestFanOut(t *testing.T) {
	if os.Getenv("QS_BENCH") == "" {
		t.Skip("benchmark: set QS_BENCH=1")
	}
	n, writes, rate := envInt("QS_BENCH_REPLICAS", 50), envInt("QS_BENCH_WRITES", 500), envInt("QS_BENCH_RATE", 100)
	root := startQS(t, t.TempDir())
	reps := make([]*client.Client, n)
	for i := range reps {
		reps[i] = startQS(t, t.TempDir(), "--upstream", root.Addr["repl"]).client(t)
	}
	rc := root.client(t)
	ctx := context.Background()
	cpu0, _ := procCPU(root.cmd.Process.Pid)
	start := time.Now()
	var delays []time.Duration
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 0; i < writes; i++ {
		<-tick.C
		w, err := rc.Put(ctx, fmt.Sprintf("k%d", i%100), []byte(strconv.Itoa(i)), nil)
		if err != nil {
			t.Fatal(err)
		}
		acked := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var slowest time.Duration
		for _, c := range reps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Get(ctx, fmt.Sprintf("k%d", i%100), client.ReadOptions{MinIndex: w.Index, Wait: 10 * time.Second}); err != nil {
					t.Error(err)
				}
				d := time.Since(acked)
				mu.Lock()
				slowest = max(slowest, d)
				mu.Unlock()
			}()
		}
		wg.Wait()
		delays = append(delays, slowest)
	}
	elapsed := time.Since(start)
	cpu1, rss := procCPU(root.cmd.Process.Pid)
	slices.Sort(delays)
	pct := func(p float64) time.Duration { return delays[min(len(delays)-1, int(p*float64(len(delays))))] }
	t.Logf("root → %d replicas, %d writes at %d/s (achieved %.0f/s): ack → readable on all replicas p50 %v p99 %v max %v; root CPU %.1f%% of one core, RSS %d MiB",
		n, writes, rate, float64(writes)/elapsed.Seconds(), pct(0.5), pct(0.99), delays[len(delays)-1],
		100*(cpu1-cpu0).Seconds()/elapsed.Seconds(), rss>>20)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// procCPU returns the user+system CPU time and resident set size of pid,
// from /proc (Linux).
func procCPU(pid int) (time.Duration, int64) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	// After the command: state(0) ... utime(11) stime(12) ... rss(21) in pages.
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	rss, _ := strconv.ParseInt(f[21], 10, 64)
	const hz = 100 // USER_HZ
	return time.Duration(ut+st) * time.Second / hz, rss * int64(os.Getpagesize())
}
