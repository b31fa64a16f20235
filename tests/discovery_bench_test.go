package tests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDiscoveryScaleBenchmark (QS_BENCH=1) runs one root and
// QS_BENCH_REPLICAS (default 200) replica processes that find their place
// through gossip (QS_BENCH_MAX_CHILDREN each, default 8: three tiers or
// more), then 1,000 writes at 100/s, and reports: time from a write's ack
// to visible on every replica (one watch stream per replica), root CPU,
// memory per replica, gossip bytes per node, and the time the tree takes
// to heal after 10% of the intermediates are killed at once. Figures
// only: nothing is asserted on them (docs/benchmarks.md, "Discovery").
func TestDiscoveryScaleBenchmark(t *testing.T) {
	if os.Getenv("QS_BENCH") != "1" {
		t.Skip("a benchmark: QS_BENCH=1")
	}
	n := envInt("QS_BENCH_REPLICAS", 200)
	maxChildren := envInt("QS_BENCH_MAX_CHILDREN", 8)
	writes := envInt("QS_BENCH_WRITES", 1000)

	parallel := envInt("QS_BENCH_START_PARALLEL", 8)
	t.Logf("load average before: %s", loadAvg())
	start := time.Now()
	root := startSmallQS(t, "root", "", maxChildren)
	nodes := map[string]*proc{}
	var gossipSeeds []string // of nodes started so far
	// Start in waves of parallel processes; each knows the root and two
	// nodes of earlier waves as seeds, so that the joins do not all
	// land on the root.
	for i := 0; i < n; i += parallel {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for j := i; j < min(n, i+parallel); j++ {
			name := fmt.Sprintf("r%03d", j+1)
			seeds := []string{root.Addr["gossip"]}
			if k := len(gossipSeeds); k >= 2 {
				seeds = append(seeds, gossipSeeds[(j*7)%k], gossipSeeds[(j*13+1)%k])
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := startSmallQS(t, name, strings.Join(seeds, ","), maxChildren)
				mu.Lock()
				nodes[name] = p
				mu.Unlock()
			}()
		}
		wg.Wait()
		for j := i; j < min(n, i+parallel); j++ {
			gossipSeeds = append(gossipSeeds, nodes[fmt.Sprintf("r%03d", j+1)].Addr["gossip"])
		}
	}
	t.Logf("%d replicas started in %v", n, time.Since(start).Round(time.Second))
	sts := waitTreeFor(t, root, nodes, maxChildren, "formation", 10*time.Minute)
	depths := map[int]int{}
	for _, st := range sts {
		if st.Depth != nil {
			depths[*st.Depth]++
		}
	}
	t.Logf("converged %v after the start: nodes per depth %v", time.Since(start).Round(time.Second), depths)

	// One watch stream per replica, then the writes.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := make([][]time.Time, writes) // [write][replica]
	for i := range seen {
		seen[i] = make([]time.Time, n)
	}
	var seenMu sync.Mutex
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range nodes {
			if !yield(k) {
				return
			}
		}
	})
	var ready sync.WaitGroup
	for j, name := range names {
		ready.Add(1)
		go watchKeys(ctx, nodes[name].Addr["http"], &ready, func(i int, at time.Time) {
			if i < writes {
				seenMu.Lock()
				if seen[i][j].IsZero() {
					seen[i][j] = at
				}
				seenMu.Unlock()
			}
		})
	}
	ready.Wait()
	rc := root.client(t)
	cpu0, _ := procCPU(root.cmd.Process.Pid)
	gossip0 := gossipBytes(nodes, names)
	acks := make([]time.Time, writes)
	tick := time.NewTicker(10 * time.Millisecond)
	t0 := time.Now()
	var wwg sync.WaitGroup
	for i := range writes {
		<-tick.C
		// Each write on its own: a slow answer does not hold back the
		// next, so the rate stays 100/s.
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			defer wcancel()
			if _, err := rc.Put(wctx, fmt.Sprintf("bench/%04d", i), []byte("v"), nil); err != nil {
				t.Errorf("write %d: %v", i, err)
				return
			}
			seenMu.Lock()
			acks[i] = time.Now()
			seenMu.Unlock()
		}()
	}
	wwg.Wait()
	tick.Stop()
	elapsed := time.Since(t0)
	cpu1, _ := procCPU(root.cmd.Process.Pid)
	gossip1 := gossipBytes(nodes, names)
	// Wait (bounded) for the last write to arrive everywhere.
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		seenMu.Lock()
		done := !slices.ContainsFunc(seen[writes-1], time.Time.IsZero)
		seenMu.Unlock()
		if done {
			break
		}
	}
	seenMu.Lock()
	var all, each []time.Duration
	missing := 0
	failed := 0
	for i := range writes {
		if acks[i].IsZero() {
			failed++ // not acknowledged: no delay to measure
			continue
		}
		var worst time.Duration
		for j := range n {
			if seen[i][j].IsZero() {
				missing++
				continue
			}
			d := seen[i][j].Sub(acks[i])
			each = append(each, d)
			worst = max(worst, d)
		}
		all = append(all, worst)
	}
	seenMu.Unlock()
	slices.Sort(all)
	slices.Sort(each)
	pct := func(ds []time.Duration, p float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(100 * time.Microsecond)
	}
	if len(all) == 0 {
		t.Fatalf("none of the %d writes was acknowledged", writes)
	}
	t.Logf("%d writes in %v (%.0f/s), %d not acknowledged: ack to visible on all %d replicas p50 %v p99 %v max %v; per replica p50 %v p99 %v; %d deliveries missing",
		writes, elapsed.Round(time.Millisecond), float64(writes)/elapsed.Seconds(), failed, n, pct(all, 0.5), pct(all, 0.99), all[len(all)-1].Round(100*time.Microsecond),
		pct(each, 0.5), pct(each, 0.99), missing)
	rate, sampled := gossipRate(gossip0, gossip1, elapsed)
	t.Logf("root CPU %.1f%% of one core during the writes; gossip %.0f bytes/s per node (in+out, mean over %d nodes)",
		100*(cpu1-cpu0).Seconds()/elapsed.Seconds(), rate, sampled)
	var rss, pss, private []float64
	for _, name := range names {
		_, r := procCPU(nodes[name].cmd.Process.Pid)
		rss = append(rss, float64(r))
		m := smapsRollup(nodes[name].cmd.Process.Pid)
		pss = append(pss, float64(m["Pss"]))
		private = append(private, float64(m["Private_Dirty"]+m["Private_Clean"]))
	}
	slices.Sort(rss)
	slices.Sort(pss)
	slices.Sort(private)
	t.Logf("replica memory (median / max): RSS %.1f / %.1f MiB, PSS %.1f / %.1f MiB, private %.1f / %.1f MiB (RSS counts the binary's pages all processes share)",
		rss[len(rss)/2]/(1<<20), rss[len(rss)-1]/(1<<20), pss[len(pss)/2]/(1<<20), pss[len(pss)-1]/(1<<20), private[len(private)/2]/(1<<20), private[len(private)-1]/(1<<20))
	t.Logf("load average after the writes: %s", loadAvg())
	cancel()

	// Kill 10% of the intermediates at once.
	var mids []string
	for _, name := range names {
		if st := sts[name]; st.Children > 0 {
			mids = append(mids, name)
		}
	}
	kill := max(1, len(mids)/10)
	for _, name := range mids[:kill] {
		nodes[name].kill()
		delete(nodes, name)
	}
	t1 := time.Now()
	sts = waitTreeFor(t, root, nodes, maxChildren, "healing", 5*time.Minute)
	heal := time.Since(t1)
	boots := 0
	for _, st := range sts {
		boots += st.Bootstraps
	}
	t.Logf("killed %d of %d intermediates: tree whole again after %v, %d bootstraps; load average %s", kill, len(mids), heal.Round(10*time.Millisecond), boots, loadAvg())
}

// smapsRollup reads the memory summary of a process, in bytes by field
// (Rss, Pss, Private_Dirty, ...); empty if it cannot be read.
func smapsRollup(pid int) map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[2] == "kB" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			out[strings.TrimSuffix(f[0], ":")] = v << 10
		}
	}
	return out
}

// loadAvg is the machine's load average (1, 5 and 15 minutes).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// startSmallQS starts a node with the small-footprint settings of
// docs/benchmarks.md ("Discovery": many of them share the machine):
// one OS thread for Go code, the smallest block cache (64 MiB, filled
// only as data is read), no read cache, no disk ballast, gossip every
// 300ms and a probe every 2s; join "" makes the root.
func startSmallQS(t *testing.T, name, join string, maxChildren int) *proc {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`data = %q
http = "127.0.0.1:0"
repl = "127.0.0.1:0"
gossip = "127.0.0.1:0"
node_name = %q
max_children = %d
log_level = "warn"
max_http_conns = 2048
watch_max_watchers = 64
gossip_interval = "300ms"
probe_interval = "2s"
[[database]]
name = "default"
cache_bytes = 67108864
read_cache_bytes = -1
ballast_bytes = -1
discover = %v
`, filepath.Join(dir, "data"), name, maxChildren, join != "")
	if join != "" {
		cfg = strings.Replace(cfg, "log_level", fmt.Sprintf("join = [\"%s\"]\nlog_level", strings.ReplaceAll(join, ",", `", "`)), 1)
	}
	path := filepath.Join(dir, "qs.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(qsBin, "serve", "--config", path)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	return startCmdWithin(t, dir, cmd, 3, 120*time.Second)
}

// waitTreeFor is waitTree with its own deadline.
func waitTreeFor(t *testing.T, root *proc, nodes map[string]*proc, maxChildren int, what string, limit time.Duration) map[string]treeStatus {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		sts, err := checkTree(root, nodes, maxChildren)
		if err == nil {
			return sts
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no tree after %v: %v", what, limit, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// watchKeys follows GET /v1/default/watch?prefix=bench/ and calls seen
// with the number of each bench key as it arrives.
func watchKeys(ctx context.Context, addr string, ready *sync.WaitGroup, seen func(i int, at time.Time)) {
	once := sync.OnceFunc(ready.Done)
	defer once()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/default/watch?prefix=bench/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	once()
	// Events are found by the key's bytes, not decoded: 200 streams of
	// 100 events a second must not make the watcher the bottleneck.
	sc := bufio.NewScanner(resp.Body)
	marker := []byte(`"key":"bench/`)
	for sc.Scan() {
		at := time.Now()
		line := sc.Bytes()
		k := bytes.Index(line, marker)
		if k < 0 {
			continue
		}
		digits := line[k+len(marker):]
		if end := bytes.IndexByte(digits, '"'); end > 0 {
			if i, err := strconv.Atoi(string(digits[:end])); err == nil {
				seen(i, at)
			}
		}
	}
	io.Copy(io.Discard, resp.Body)
}

// gossipBytes sums qs_discovery_gossip_bytes_total (in and out) of the
// first 20 nodes.
// gossipBytes reads the gossip bytes (in and out) of the first 20 of
// names, by name; a node whose metrics cannot be read is left out.
func gossipBytes(nodes map[string]*proc, names []string) map[string]float64 {
	out := map[string]float64{}
	hc := &http.Client{Timeout: 5 * time.Second}
	for _, name := range names[:min(len(names), 20)] {
		resp, err := hc.Get("http://" + nodes[name].Addr["http"] + "/metrics")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		total, seen := 0.0, false
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "qs_discovery_gossip_bytes_total{") {
				f := strings.Fields(l)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				total, seen = total+v, true
			}
		}
		resp.Body.Close()
		if sc.Err() == nil && seen {
			out[name] = total
		}
	}
	return out
}

// gossipRate is the mean gossip bytes a second of the nodes read at
// both samples, and how many they are.
func gossipRate(before, after map[string]float64, elapsed time.Duration) (float64, int) {
	sum, n := 0.0, 0
	for name, b := range before {
		if a, ok := after[name]; ok && a >= b {
			sum, n = sum+a-b, n+1
		}
	}
	if n == 0 {
		return 0, 0
	}
	return sum / elapsed.Seconds() / float64(n), n
}
