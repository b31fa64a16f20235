package bench

import (
	"bufio"
	"bytes"
	"github.com/quicksilver-kv/qs/internal/cache"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestKeyOfRankIsABijection(t *testing.T) {
	for _, n := range []int{1, 2, 7, 1000, 5000, 99_991, 100_000} {
		seen := make([]bool, n)
		for rank := range n {
			k := keyOfRank(rank, n)
			if k < 0 || k >= n || seen[k] {
				t.Fatalf("n=%d: rank %d gives key %d (out of range or seen)", n, rank, k)
			}
			seen[k] = true
			if r := rankOfKey(k, n); r != rank {
				t.Fatalf("n=%d: rankOfKey(%d) = %d, want %d", n, k, r, rank)
			}
		}
	}
}

func TestKeyPickerZipf(t *testing.T) {
	const keys, draws = 10_000, 200_000
	p, err := newKeyPicker(WorkloadZipf, keys, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, keys)
	for range draws {
		counts[rankOfKey(p.next(), keys)]++
	}
	// Zipf: the first ranks are drawn far more often than the tail.
	if !(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[1000]) {
		t.Errorf("counts by rank 0, 1, 10, 1000: %d %d %d %d: not decreasing", counts[0], counts[1], counts[10], counts[1000])
	}
	top := 0
	for _, c := range counts[:keys/10] {
		top += c
	}
	if share := float64(top) / draws; share < 0.6 {
		t.Errorf("the top tenth of the keys got %.2f of the reads, want most", share)
	}
	// Same seed and stream, same sequence; another stream, another one.
	a, _ := newKeyPicker(WorkloadZipf, keys, 7, 3)
	b, _ := newKeyPicker(WorkloadZipf, keys, 7, 3)
	c, _ := newKeyPicker(WorkloadZipf, keys, 7, 4)
	same, differ := true, false
	for range 1000 {
		x, y, z := a.next(), b.next(), c.next()
		same = same && x == y
		differ = differ || x != z
	}
	if !same || !differ {
		t.Errorf("same seed and stream gave the same sequence: %v; another stream a different one: %v", same, differ)
	}
}

func TestKeyPickerRegional(t *testing.T) {
	const keys, draws = 100_000, 200_000
	region := regionSize(keys)
	if region != 5000 {
		t.Fatalf("region of %d keys: %d, want 5000", keys, region)
	}
	if regionSize(1_000_000) != 50_000 || regionSize(10) != 1 {
		t.Errorf("regions of 1M and 10 keys: %d, %d; want 50000, 1", regionSize(1_000_000), regionSize(10))
	}
	p, err := newKeyPicker(WorkloadRegional, keys, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	outside := 0
	for range draws {
		if rankOfKey(p.next(), keys) >= region {
			outside++
		}
	}
	// 1% uniform outside the region (a fixed seed: the count is the same
	// every run; the bounds only say it is about 1%).
	if share := float64(outside) / draws; share < 0.008 || share > 0.012 {
		t.Errorf("%.4f of the reads outside the region, want about 0.01", share)
	}
}

func TestNewKeyPickerRejects(t *testing.T) {
	if _, err := newKeyPicker("uniform", 100, 1, 0); err == nil || !strings.Contains(err.Error(), "unknown workload") {
		t.Errorf("unknown workload: %v", err)
	}
	if _, err := newKeyPicker(WorkloadZipf, 0, 1, 0); err == nil {
		t.Error("0 keys accepted")
	}
}

func TestTierStagesResolve(t *testing.T) {
	rs, err := resolveStages(TierStages)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]resolvedStage{}
	for _, r := range rs {
		by[r.Name] = r
	}
	if got := by["replicas"]; got.Relays || !slices.Equal(got.proxy, []string{"--replicas", "{replicas}"}) {
		t.Errorf("replicas: %+v", got)
	}
	pf := by["prefetch"]
	if !pf.Relays || !slices.Equal(pf.proxy, []string{"--replicas", "{replicas}", "--relays", "{relays}", "--transient-bytes", "{transient-bytes}"}) ||
		!slices.Equal(pf.relay, []string{"--transient-bytes", "{transient-bytes}"}) {
		t.Errorf("prefetch: relays %v, proxy %q, relay %q", pf.Relays, pf.proxy, pf.relay)
	}
	if tr := by["transient"]; tr.Relays || slices.Contains(tr.proxy, "--relays") {
		t.Errorf("transient has relays: %+v", tr)
	}
	// L2 is prefetch (relays, transient tiers) plus each proxy's shard
	// budget and its DC peers; no other stage has either.
	l2 := by["l2"]
	wantL2 := append(slices.Clone(pf.proxy), "--dc-peers", "{dc-peers}", "--shard-cache-bytes", "{shard-cache-bytes}")
	if !l2.Relays || !l2.L2 || !slices.Equal(l2.proxy, wantL2) || !slices.Equal(l2.relay, pf.relay) {
		t.Errorf("l2: relays %v, proxy %q, relay %q", l2.Relays, l2.proxy, l2.relay)
	}
	var names []string
	for _, r := range rs {
		names = append(names, r.Name)
		if r.Name != "l2" && (r.L2 || slices.Contains(r.proxy, "--dc-peers") || slices.Contains(r.proxy, "--shard-cache-bytes")) {
			t.Errorf("%s has an L2 flag: %q", r.Name, r.proxy)
		}
	}
	if want := []string{"replicas", "relays", "prefetch", "l2", "transient"}; !slices.Equal(names, want) {
		t.Errorf("stages %q, want %q", names, want)
	}
}

func TestTierStagesExpand(t *testing.T) {
	rs, err := resolveStages(TierStages)
	if err != nil {
		t.Fatal(err)
	}
	// The variables the data centre provides (startTierDC): every flag
	// of every stage expands, and none is left with a brace.
	vars := map[string]string{"replicas": "r1,r2", "relays": "y1,y2", "dc-peers": "p1,p2",
		"transient-bytes": "1", "shard-cache-bytes": "2"}
	for _, r := range rs {
		for _, flags := range [][]string{r.proxy, r.relay} {
			got, err := expandFlags(flags, vars)
			if err != nil {
				t.Errorf("%s: %v", r.Name, err)
			}
			for _, f := range got {
				if strings.ContainsAny(f, "{}") {
					t.Errorf("%s: %q left unexpanded", r.Name, f)
				}
			}
		}
	}
	l2 := rs[slices.IndexFunc(rs, func(r resolvedStage) bool { return r.Name == "l2" })]
	got, _ := expandFlags(l2.proxy, vars)
	if i := slices.Index(got, "--dc-peers"); i < 0 || got[i+1] != "p1,p2" {
		t.Errorf("l2 proxy flags %q: --dc-peers not the peers", got)
	}
	// Without the peers' addresses the stage cannot start.
	delete(vars, "dc-peers")
	if _, err := expandFlags(l2.proxy, vars); err == nil || !strings.Contains(err.Error(), "{dc-peers}") {
		t.Errorf("l2 without dc-peers: %v", err)
	}
}

func TestFullestStage(t *testing.T) {
	rs, err := resolveStages(TierStages)
	if err != nil {
		t.Fatal(err)
	}
	if got := fullestStage(rs); got != "l2" {
		t.Errorf("fullest of the tier stages: %q, want l2", got)
	}
	noRelays, err := resolveStages([]TierStage{{Name: "a"}, {Name: "b", Proxy: []string{"--x", "1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := fullestStage(noRelays); got != "a" {
		t.Errorf("without relays: %q, want the first stage", got)
	}
	tie, err := resolveStages([]TierStage{{Name: "a", Relays: true, Proxy: []string{"--x"}}, {Name: "b", Relays: true, Proxy: []string{"--y"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := fullestStage(tie); got != "a" {
		t.Errorf("on a tie: %q, want the first", got)
	}
	if got := fullestStage(nil); got != "" {
		t.Errorf("no stage: %q", got)
	}
}

func TestTierStagesRejects(t *testing.T) {
	for name, stages := range map[string][]TierStage{
		"no name":        {{About: "x"}},
		"defined twice":  {{Name: "a"}, {Name: "a"}},
		"not an earlier": {{Name: "a", Base: "b"}, {Name: "b"}},
		"no relays":      {{Name: "a", Relay: []string{"--x"}}},
	} {
		if _, err := resolveStages(stages); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestExpandFlags(t *testing.T) {
	got, err := expandFlags([]string{"--a", "{x}", "--b={x},{y}", "plain"}, map[string]string{"x": "1", "y": "2"})
	if err != nil || !slices.Equal(got, []string{"--a", "1", "--b=1,2", "plain"}) {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := expandFlags([]string{"{dc-peers}"}, map[string]string{}); err == nil || !strings.Contains(err.Error(), "no value for {dc-peers}") {
		t.Errorf("missing variable: %v", err)
	}
	if _, err := expandFlags([]string{"{x"}, map[string]string{"x": "1"}); err == nil || !strings.Contains(err.Error(), "unterminated") {
		t.Errorf("unterminated: %v", err)
	}
}

func TestTierRow(t *testing.T) {
	before := tierCounters{l1Hits: 100, fetched: 50, admissions: 10, remoteKeys: 40}
	after := tierCounters{l1Hits: 100 + 9990, fetched: 50 + 10, admissions: 10 + 4, remoteKeys: 40 + 5}
	r := tierRow(TierStage{Name: "relays", Relays: true}, WorkloadRegional, after.minus(before), 1024)
	if r.Reads != 10_000 || r.L1 != 99.9 || r.L1L2 != -1 || r.RemotePer1000 != 0.5 || r.CacheWriteBytes != 4096 || !r.Relays {
		t.Errorf("row %+v", r)
	}
	after.hasL2, after.l2Hits, after.fetched = true, 9, 50+1
	r = tierRow(TierStage{Name: "l2", Relays: true, L2: true}, WorkloadRegional, after.minus(before), 1024)
	if r.Reads != 10_000 || r.L1 != 99.9 || r.L1L2 < 99.989 || r.L1L2 > 99.991 {
		t.Errorf("with L2: %+v", r)
	}
	// Proxies with shards report L2 counters in every stage; only a stage
	// with the tier has an L1+L2 figure.
	if r := tierRow(TierStage{Name: "relays", Relays: true}, WorkloadRegional, after.minus(before), 1024); r.L1L2 != -1 {
		t.Errorf("L1+L2 of a stage without L2: %+v", r)
	}
	if r := tierRow(TierStage{Name: "x"}, WorkloadZipf, tierCounters{}, 1024); r.Reads != 0 || r.L1 != 0 || r.RemotePer1000 != 0 {
		t.Errorf("no reads: %+v", r)
	}
}

func TestTierChecks(t *testing.T) {
	rows := []TierRow{
		{Stage: "replicas", Workload: WorkloadZipf, L1: 90, RemotePer1000: 100, ReplicaConnsProxies: 32, CacheWriteBytes: 1000},
		{Stage: "relays", Workload: WorkloadZipf, Relays: true, L1: 90, RemotePer1000: 40, ReplicaConnsRelays: 4},
		{Stage: "prefetch", Workload: WorkloadZipf, Relays: true, L1: 95, RemotePer1000: 15, ReplicaConnsRelays: 4},
		{Stage: "transient", Workload: WorkloadZipf, L1: 89.95, RemotePer1000: 100, ReplicaConnsProxies: 32, CacheWriteBytes: 400},
		{Stage: "replicas", Workload: WorkloadRegional, L1: 99, RemotePer1000: 10, ReplicaConnsProxies: 32, CacheWriteBytes: 1000},
		{Stage: "prefetch", Workload: WorkloadRegional, Relays: true, L1: 99.5, L1L2: -1, ReplicaConnsProxies: 2, ReplicaConnsRelays: 4},
		{Stage: "transient", Workload: WorkloadRegional, L1: 98, CacheWriteBytes: 400},
	}
	got := strings.Join(tierChecks(rows, "replicas", "prefetch", "replicas", "transient"), "\n")
	for _, want := range []string{
		"regional, stage prefetch: L1 99.500% (target ≥ 99.9%): NOT met",
		"regional: L1+L2 (target ≥ 99.99%): not measured",
		"zipf: remote fetches per 1,000 reads 15.0 (prefetch) vs 100.0 (replicas), 0.15× (target ≤ 0.20×): met",
		"zipf: replicas held connections only from relays in stages relays, prefetch: met",
		"regional: replicas held connections from proxies too in stages prefetch: NOT met",
		"zipf: cache disk writes 0.4 kB (transient) vs 1.0 kB (replicas), 0.40× at L1 89.95% vs 90.00% (target ≤ 0.50× at ±0.1 points): met",
		"regional: cache disk writes 0.4 kB (transient) vs 1.0 kB (replicas), 0.40× at L1 98.00% vs 99.00% (target ≤ 0.50× at ±0.1 points): NOT met (hit rates differ by 1.00 points",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	rows[4].CacheWriteBytes = 0
	rows[0].RemotePer1000 = 0
	got = strings.Join(tierChecks(rows, "replicas", "prefetch", "replicas", "transient"), "\n")
	for _, want := range []string{"regional: no cache writes in stage replicas", "zipf: no remote fetch in stage replicas"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
}

func TestTierConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Scenarios = []string{ScenarioTiers}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--spawn") {
		t.Errorf("tiers without --spawn: %v", err)
	}
	cfg.Spawn = true
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(ExpandScenarios([]string{"all"}), ScenarioTiers) {
		t.Error("all includes tiers")
	}
	for name, mod := range map[string]func(c *Config){
		"tiers stage":    func(c *Config) { c.TiersStages = []string{"relays", "l9"} },
		"tiers workload": func(c *Config) { c.TiersWorkloads = []string{"uniform"} },
		"tiers keys":     func(c *Config) { c.TiersKeys = 10 },
		"warm-up":        func(c *Config) { c.TiersWarmup = -1 },
	} {
		c := cfg
		mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestTierSizes(t *testing.T) {
	s := sizesFor(1_000_000)
	if s.proxyCache != 64_000_000 || s.relayCache != 256_000_000 || s.transient != 16_000_000 || s.shard != 162_800_000 {
		t.Errorf("1M keys: %+v", s)
	}
	if s := sizesFor(1000); s.proxyCache != tierMinCacheBytes || s.transient != tierMinCacheBytes || s.shard != tierMinCacheBytes {
		t.Errorf("1000 keys: %+v", s)
	}
}

func TestTierReportTable(t *testing.T) {
	res := Result{Scenario: ScenarioTiers, Tiers: []TierRow{{Stage: "relays", Workload: WorkloadZipf, Reads: 1000, L1: 99.5, L1L2: -1,
		RemotePer1000: 2.5, ReplicaConnsRelays: 4, CacheWriteBytes: 2_500_000, Latency: Latency{P50: 300, P99: 20_000, P999: 40_000}, Load1: 1.5}}}
	res.Tiers[0].L3Latency = TierLatency{Count: 5, P50: 17_800, P99: 31_600, P999: beyondBuckets}
	rep := &Report{Results: []Result{res}}
	var b bytes.Buffer
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	want := "| relays | zipf | 1000 | 99.500% | - | 2.50 | 0 / 4 | 2.5 MB | 300.0µs / 20.00ms / 40.00ms | - | - | 17.80ms / 31.60ms / ∞ | 1.50 |"
	if !strings.Contains(b.String(), want) {
		t.Errorf("no row %q in:\n%s", want, b.String())
	}
}

// TestDelayLink: bytes cross the link intact and in order both ways, and
// the link counts the connections it holds.
func TestDelayLink(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait() // after the listener and the link are closed
	defer echo.Close()
	wg.Go(func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { defer c.Close(); io.Copy(c, c) })
		}
	})
	l, err := newDelayLink(echo.Addr().String(), 2*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	payload := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB: several chunks
	for i, c := range conns {
		go c.Write(payload)
		got := make([]byte, len(payload))
		if _, err := io.ReadFull(bufio.NewReader(c), got); err != nil {
			t.Fatalf("conn %d: %v", i, err)
		}
		if !bytes.Equal(got, payload) {
			t.Fatalf("conn %d: the echo differs", i)
		}
	}
	if n := l.Open(); n != 3 {
		t.Errorf("open %d, want 3", n)
	}
	conns[0].Close()
	conns[1].Close()
	waitFor(t, func() bool { return l.Open() == 1 })
	if p := l.TakePeak(); p != 3 {
		t.Errorf("peak %d, want 3", p)
	}
	if p := l.TakePeak(); p != 1 {
		t.Errorf("peak after taking it %d, want the 1 still open", p)
	}
	conns[2].Close()
}

// waitFor polls cond for up to 30 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNamesVar: only stages that name {dc-peers} need ports chosen before
// their proxies start.
func TestNamesVar(t *testing.T) {
	if !namesVar([]string{"--relays", "{relays}", "--dc-peers", "{dc-peers}"}, "dc-peers") {
		t.Fatal("{dc-peers} not found")
	}
	for _, flags := range [][]string{nil, {"--relays", "{relays}"}, {"--dc-peers", "dc-peers"}} {
		if namesVar(flags, "dc-peers") {
			t.Fatalf("%q: found {dc-peers}", flags)
		}
	}
}

// TestProxyNames: the proxies of the scenario own distinct shards, so
// every shard has an owner; more proxies than shards share them.
func TestProxyNames(t *testing.T) {
	m, _ := cache.NewShardMap(tierShards)
	names, err := proxyNames(tierProxies, tierShards)
	if err != nil {
		t.Fatal(err)
	}
	owned := map[int]string{}
	for _, n := range names {
		if o, ok := owned[m.OfNode(n)]; ok {
			t.Fatalf("%s and %s own shard %d", o, n, m.OfNode(n))
		}
		owned[m.OfNode(n)] = n
	}
	if len(owned) != tierShards || names[0] != "proxy1" {
		t.Fatalf("names %v", names)
	}
	if names, err := proxyNames(3, 2); err != nil || len(names) != 3 {
		t.Fatalf("3 proxies, 2 shards: %v %v", names, err)
	}
	if _, err := proxyNames(2, 3); err == nil {
		t.Fatal("3 shards accepted")
	}
}
