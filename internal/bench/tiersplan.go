package bench

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"strings"

	"github.com/quicksilver-kv/qs/internal/cache"
)

// The pure parts of the tiers scenario: its workloads, its stages, and
// the arithmetic of its report. The processes are in tiers.go.

// Workloads of the tiers scenario.
const (
	WorkloadZipf     = "zipf"     // Zipf (s = 1.1) over every key
	WorkloadRegional = "regional" // Zipf over a region of the keys, 1% uniform outside it
)

// tierWorkloads lists the workloads in the order the scenario runs them.
var tierWorkloads = []string{WorkloadZipf, WorkloadRegional}

const (
	// zipfS is the exponent of both workloads' Zipf distributions.
	zipfS = 1.1
	// regionFraction is the region's share of the keys: 50,000 of
	// 1,000,000 (at least one key).
	regionFraction = 20
	// outsidePerMille is how many reads of the regional workload go,
	// uniformly, to keys outside the region.
	outsidePerMille = 10
	// keyStride spreads Zipf ranks over the key space: rank j reads key
	// (j·keyStride + keyOffset) mod n, a bijection for every n ≤ 1,000,000
	// since keyStride is a prime above that. Hot keys are then neither
	// neighbours in the key space nor loaded in the same batch.
	keyStride = 1_000_003
	keyOffset = 7_919
)

// tierKey is the name of key i of the tiers scenario.
func tierKey(i int) string { return fmt.Sprintf("t%07d", i) }

// regionSize is the number of keys of the regional workload's region.
func regionSize(keys int) int { return max(1, keys/regionFraction) }

// keyOfRank is the key index the rank-th key of the workloads is.
func keyOfRank(rank, keys int) int {
	return int((uint64(rank)*keyStride + keyOffset) % uint64(keys))
}

// keyPicker draws the key indexes of one reader. Not safe for concurrent
// use: each reader has its own.
type keyPicker struct {
	keys, region int
	regional     bool
	r            *rand.Rand
	zipf         *rand.Zipf
}

// newKeyPicker returns the picker of workload over keys keys, seeded with
// (seed, stream): a reader's sequence is the same in every stage.
func newKeyPicker(workload string, keys int, seed uint64, stream int) (*keyPicker, error) {
	if keys < 1 {
		return nil, fmt.Errorf("bench: %d keys: want at least 1", keys)
	}
	p := &keyPicker{keys: keys, region: regionSize(keys), r: newRand(seed, stream)}
	span := keys
	switch workload {
	case WorkloadZipf:
	case WorkloadRegional:
		p.regional = true
		span = p.region
	default:
		return nil, fmt.Errorf("bench: unknown workload %q (want %s)", workload, strings.Join(tierWorkloads, " or "))
	}
	p.zipf = rand.NewZipf(p.r, zipfS, 1, uint64(span-1))
	return p, nil
}

// next returns the index of the next key to read.
func (p *keyPicker) next() int {
	if p.regional && p.keys > p.region && p.r.IntN(1000) < outsidePerMille {
		return keyOfRank(p.region+p.r.IntN(p.keys-p.region), p.keys)
	}
	return keyOfRank(int(p.zipf.Uint64()), p.keys)
}

// proxyNames returns the node names of n proxies of a data centre of
// shards shards: proxy1, proxy2, .. where each owns a shard no earlier
// one does (proxy3-2: the second name tried for the third proxy), so
// that with n = shards every shard has exactly one owner.
func proxyNames(n, shards int) ([]string, error) {
	m, err := cache.NewShardMap(shards)
	if err != nil {
		return nil, err
	}
	owned := map[int]bool{}
	var names []string
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("proxy%d", i)
		for try := 2; len(owned) < shards && owned[m.OfNode(name)]; try++ {
			if try > 100_000 {
				return nil, fmt.Errorf("bench: no name for proxy %d owning a shard of its own", i)
			}
			name = fmt.Sprintf("proxy%d-%d", i, try)
		}
		owned[m.OfNode(name)] = true
		names = append(names, name)
	}
	return names, nil
}

// rankOfKey inverts keyOfRank.
func rankOfKey(i, keys int) int {
	n := big.NewInt(int64(keys))
	inv := new(big.Int).ModInverse(big.NewInt(keyStride%int64(keys)), n)
	if keys == 1 || inv == nil {
		return 0
	}
	d := new(big.Int).Mod(big.NewInt(int64(i)-keyOffset), n)
	return int(d.Mul(d, inv).Mod(d, n).Int64())
}

// TierStage is one configuration of the simulated data centre. A stage
// is the flags of its base stage plus its own: Proxy to every proxy,
// Relay to every relay. Relays says whether the data centre has relays
// (inherited). Flag values may name the data centre's addresses and
// sizes, filled in when the nodes start (tierVars): {replicas} (the
// replicas, as the proxies reach them), {relays}, {dc-peers} (the
// proxies' replication addresses), {transient-bytes} and
// {shard-cache-bytes}.
type TierStage struct {
	Name string `json:"name"`
	// Base is the stage whose flags this one adds to; "" for none.
	Base  string   `json:"base,omitempty"`
	About string   `json:"about"`
	Proxy []string `json:"proxy_flags,omitempty"`
	Relay []string `json:"relay_flags,omitempty"`
	// Relays: the data centre runs relays in this stage.
	Relays bool `json:"relays,omitempty"`
	// L2: the proxies ask their DC peers for the keys of the shards
	// those own (inherited). Only then does the report give L1+L2: the
	// proxies report an l2_hits counter whenever they have shards.
	L2 bool `json:"l2,omitempty"`
}

// TierStages are the stages the tiers scenario compares, in order. A
// proxy subscribes to its relays' prefetch streams only when it has a
// transient tier, where it holds what they send: prefetch comes with the
// tier. Every proxy runs with --shards and its own --node-name; only in
// the "l2" stage does it hold a shard budget and know its DC peers, so
// only there is the L1+L2 hit rate measured. The last stage isolates the
// transient tier: against "replicas", the disk writes it saves at
// (nearly) the same hit rate.
var TierStages = []TierStage{
	{Name: "replicas", About: "proxies fetch their misses straight from the replicas",
		Proxy: []string{"--replicas", "{replicas}"}},
	{Name: "relays", Base: "replicas", About: "proxies fetch through the 2 relays, which alone fetch from the replicas",
		Proxy: []string{"--relays", "{relays}"}, Relays: true},
	{Name: "prefetch", Base: "relays", About: "relays publish what they resolve; proxies hold it in a transient tier",
		Proxy: []string{"--transient-bytes", "{transient-bytes}"}, Relay: []string{"--transient-bytes", "{transient-bytes}"}},
	{Name: "l2", Base: "prefetch", About: "each proxy keeps its shard's values and answers its DC peers for them: a proxy asks the key's owner before the relays",
		Proxy: []string{"--dc-peers", "{dc-peers}", "--shard-cache-bytes", "{shard-cache-bytes}"}, L2: true},
	{Name: "transient", Base: "replicas", About: "the transient tier alone, no relays: fetched values reach the disk cache only when read again",
		Proxy: []string{"--transient-bytes", "{transient-bytes}"}},
}

// resolvedStage is a stage with its base's flags included.
type resolvedStage struct {
	TierStage
	proxy, relay []string
}

// resolveStages expands every stage's base, in order, and checks that
// each base comes before the stage that names it.
func resolveStages(stages []TierStage) ([]resolvedStage, error) {
	byName := map[string]resolvedStage{}
	var out []resolvedStage
	for _, s := range stages {
		if s.Name == "" {
			return nil, fmt.Errorf("bench: a tier stage has no name")
		}
		if _, dup := byName[s.Name]; dup {
			return nil, fmt.Errorf("bench: tier stage %q defined twice", s.Name)
		}
		r := resolvedStage{TierStage: s}
		if s.Base != "" {
			b, ok := byName[s.Base]
			if !ok {
				return nil, fmt.Errorf("bench: tier stage %q: base %q is not an earlier stage", s.Name, s.Base)
			}
			r.proxy = append(r.proxy, b.proxy...)
			r.relay = append(r.relay, b.relay...)
			r.Relays = r.Relays || b.Relays
			r.L2 = r.L2 || b.L2
		}
		r.proxy = append(r.proxy, s.Proxy...)
		r.relay = append(r.relay, s.Relay...)
		if len(r.relay) > 0 && !r.Relays {
			return nil, fmt.Errorf("bench: tier stage %q has relay flags but no relays", s.Name)
		}
		byName[s.Name] = r
		out = append(out, r)
	}
	return out, nil
}

// fullestStage is the stage with every tier on, the one the targets
// judge: the one with relays and the most flags (proxies' and relays'),
// the first of those on a tie; "" for no stage.
func fullestStage(stages []resolvedStage) string {
	best, most := "", -1
	for _, st := range stages {
		n := len(st.proxy) + len(st.relay)
		if !st.Relays {
			n = -1
		}
		if best == "" || n > most {
			best, most = st.Name, n
		}
	}
	return best
}

// expandFlags fills the {name} variables of flags from vars; a variable
// without a value is an error (the stage needs something this build of
// the scenario does not provide).
func expandFlags(flags []string, vars map[string]string) ([]string, error) {
	out := make([]string, len(flags))
	for i, f := range flags {
		var err error
		out[i] = f
		for strings.Contains(out[i], "{") {
			lo := strings.IndexByte(out[i], '{')
			hi := strings.IndexByte(out[i][lo:], '}')
			if hi < 0 {
				return nil, fmt.Errorf("bench: flag %q: unterminated {", f)
			}
			name := out[i][lo+1 : lo+hi]
			v, ok := vars[name]
			if !ok {
				err = fmt.Errorf("bench: flag %q: no value for {%s}", f, name)
				return nil, err
			}
			out[i] = out[i][:lo] + v + out[i][lo+hi+1:]
		}
	}
	return out, nil
}

// tierCounters are the counters the report subtracts: the sum over the
// proxies (not the relays) of their cache figures, the sum over every
// node's cache of its disk admissions, and the keys the replicas (and the
// root, a fall-back source) answered.
type tierCounters struct {
	l1Hits, l2Hits, fetched int64 // proxies
	admissions              int64 // proxies and relays: values written to a disk cache
	remoteKeys              int64 // fetch keys answered by the storage nodes
	hasL2                   bool
	hists                   tierHists // proxies: fetch time per tier
	shardValues             int64     // proxies: values their shard budgets hold
	l2Skipped, l2Failed     int64     // proxies: keys not asked of L2, L2 requests failed
}

func (c tierCounters) minus(o tierCounters) tierCounters {
	return tierCounters{
		l1Hits: c.l1Hits - o.l1Hits, l2Hits: c.l2Hits - o.l2Hits, fetched: c.fetched - o.fetched,
		admissions: c.admissions - o.admissions, remoteKeys: c.remoteKeys - o.remoteKeys,
		hasL2: c.hasL2 || o.hasL2, hists: c.hists.minus(o.hists), shardValues: c.shardValues,
		l2Skipped: c.l2Skipped - o.l2Skipped, l2Failed: c.l2Failed - o.l2Failed,
	}
}

// TierRow is what one stage achieved on one workload, after warm-up.
type TierRow struct {
	Stage    string `json:"stage"`
	Workload string `json:"workload"`
	// Reads served by the proxies while measuring.
	Reads int64 `json:"reads"`
	// L1 is the share of reads the proxy answered itself (its cache,
	// window and transient tier), in percent; L1L2 adds the reads
	// answered by the owner of the key's shard, and is -1 when the
	// proxies report no such tier.
	L1   float64 `json:"l1_pct"`
	L1L2 float64 `json:"l1_l2_pct"`
	// RemotePer1000 is keys fetched from the storage nodes per 1,000
	// reads.
	RemotePer1000 float64 `json:"remote_per_1000"`
	// Relays: the data centre had relays in this stage.
	Relays bool `json:"relays"`
	// Connections the replicas held while measuring (the most seen at
	// once, on the links in front of them), by who opened them.
	ReplicaConnsProxies int `json:"replica_conns_from_proxies"`
	ReplicaConnsRelays  int `json:"replica_conns_from_relays"`
	// CacheWriteBytes is the bytes of values written to the disk caches
	// of the data centre (proxies and relays) while measuring.
	CacheWriteBytes int64   `json:"cache_write_bytes"`
	Latency         Latency `json:"latency"`
	// Read latency per tier (tierlat.go): L1's an upper bound from the
	// readers' latencies; L2's and L3's the proxies' fetch histograms,
	// each quantile its bucket's upper bound.
	L1Latency TierLatency `json:"l1_latency"`
	L2Latency TierLatency `json:"l2_latency"`
	L3Latency TierLatency `json:"l3_latency"`
	// Load1 is the machine's 1-minute load average at the end.
	Load1 float64 `json:"load1"`
}

// tierRow computes the row of stage st (its base included) from the
// counters' difference over the measurement.
func tierRow(st TierStage, workload string, d tierCounters, valueSize int) TierRow {
	r := TierRow{Stage: st.Name, Workload: workload, Relays: st.Relays, L1L2: -1}
	r.Reads = d.l1Hits + d.l2Hits + d.fetched
	if r.Reads > 0 {
		r.L1 = 100 * float64(d.l1Hits) / float64(r.Reads)
		if d.hasL2 && st.L2 {
			r.L1L2 = 100 * float64(d.l1Hits+d.l2Hits) / float64(r.Reads)
		}
		r.RemotePer1000 = 1000 * float64(d.remoteKeys) / float64(r.Reads)
	}
	r.CacheWriteBytes = d.admissions * int64(valueSize)
	return r
}

// Targets of the tiers scenario.
const (
	targetRegionalL1   = 99.9  // percent, regional workload
	targetRegionalL1L2 = 99.99 // percent, regional workload
	targetFetchShare   = 0.2   // all tiers' remote fetches over the replicas stage's, Zipf
	targetWriteShare   = 0.5   // transient tier's cache writes over the replicas stage's
	targetSameHitPts   = 0.1   // percentage points: "the same hit rate"
	targetL2P99Us      = 2000  // µs: an L2 request's p99 on loopback
)

// tierChecks states each target and whether the rows meet it. first and
// last are the stages compared for remote fetches (straight to the
// replicas, and every tier on); withT and withoutT for disk writes.
func tierChecks(rows []TierRow, first, last, withoutT, withT string) []string {
	find := func(stage, workload string) *TierRow {
		for i := range rows {
			if rows[i].Stage == stage && rows[i].Workload == workload {
				return &rows[i]
			}
		}
		return nil
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	var out []string
	if r := find(last, WorkloadRegional); r != nil {
		out = append(out, fmt.Sprintf("regional, stage %s: L1 %.3f%% (target ≥ %.1f%%): %s", last, r.L1, targetRegionalL1, verdict(r.L1 >= targetRegionalL1)))
		if r.L1L2 >= 0 {
			out = append(out, fmt.Sprintf("regional, stage %s: L1+L2 %.3f%% (target ≥ %.2f%%): %s", last, r.L1L2, targetRegionalL1L2, verdict(r.L1L2 >= targetRegionalL1L2)))
		} else {
			out = append(out, fmt.Sprintf("regional: L1+L2 (target ≥ %.2f%%): not measured, no stage has an L2 tier", targetRegionalL1L2))
		}
	}
	if a, b := find(first, WorkloadZipf), find(last, WorkloadZipf); a != nil && b != nil {
		if a.RemotePer1000 > 0 {
			share := b.RemotePer1000 / a.RemotePer1000
			out = append(out, fmt.Sprintf("zipf: remote fetches per 1,000 reads %.1f (%s) vs %.1f (%s), %.2f× (target ≤ %.2f×): %s",
				b.RemotePer1000, last, a.RemotePer1000, first, share, targetFetchShare, verdict(share <= targetFetchShare)))
		} else {
			out = append(out, fmt.Sprintf("zipf: no remote fetch in stage %s: the fetch target cannot be judged", first))
		}
	}
	for _, w := range tierWorkloads {
		if r := find(last, w); r != nil {
			out = append(out, l2LatencyCheck(r))
		}
	}
	for _, w := range tierWorkloads {
		var with, bad []string
		for _, r := range rows {
			if r.Workload != w || !r.Relays {
				continue
			}
			with = append(with, r.Stage)
			if r.ReplicaConnsProxies > 0 {
				bad = append(bad, r.Stage)
			}
		}
		switch {
		case len(with) == 0:
		case len(bad) > 0:
			out = append(out, fmt.Sprintf("%s: replicas held connections from proxies too in stages %s: NOT met", w, strings.Join(bad, ", ")))
		default:
			out = append(out, fmt.Sprintf("%s: replicas held connections only from relays in stages %s: met", w, strings.Join(with, ", ")))
		}
	}
	for _, w := range tierWorkloads {
		a, b := find(withoutT, w), find(withT, w)
		if a == nil || b == nil {
			continue
		}
		same := abs(a.L1-b.L1) <= targetSameHitPts
		if a.CacheWriteBytes <= 0 {
			out = append(out, fmt.Sprintf("%s: no cache writes in stage %s: the disk-write target cannot be judged", w, withoutT))
			continue
		}
		share := float64(b.CacheWriteBytes) / float64(a.CacheWriteBytes)
		v := verdict(share <= targetWriteShare && same)
		if !same {
			v += fmt.Sprintf(" (hit rates differ by %.2f points, more than %.1f)", abs(a.L1-b.L1), targetSameHitPts)
		}
		out = append(out, fmt.Sprintf("%s: cache disk writes %s (%s) vs %s (%s), %.2f× at L1 %.2f%% vs %.2f%% (target ≤ %.2f× at ±%.1f points): %s",
			w, fmtBytes(b.CacheWriteBytes), withT, fmtBytes(a.CacheWriteBytes), withoutT, share, b.L1, a.L1, targetWriteShare, targetSameHitPts, v))
	}
	return out
}

// l2LatencyCheck judges the p99 of r's L2 requests against
// targetL2P99Us. The p99 is known to a histogram bucket: met when the
// bucket ends at or below the target, not met when it starts at or above
// it, undecided when it straddles it.
func l2LatencyCheck(r *TierRow) string {
	l := r.L2Latency
	head := fmt.Sprintf("%s, stage %s: L2 request p99", r.Workload, r.Stage)
	switch {
	case l.Count == 0:
		return head + ": not measured, no L2 request"
	case l.P99 <= targetL2P99Us:
		return fmt.Sprintf("%s ≤ %s over %d requests (target ≤ %s): met", head, fmtUs(l.P99), l.Count, fmtUs(targetL2P99Us))
	case l.P99Above >= targetL2P99Us:
		return fmt.Sprintf("%s > %s over %d requests (target ≤ %s): NOT met", head, fmtUs(l.P99Above), l.Count, fmtUs(targetL2P99Us))
	default:
		return fmt.Sprintf("%s between %s and %s over %d requests (target ≤ %s): undecided at the histogram's resolution", head, fmtUs(l.P99Above), fmtUs(l.P99), l.Count, fmtUs(targetL2P99Us))
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

// fmtBytes is a byte count in MB (10^6) with one decimal, or in kB.
func fmtBytes(n int64) string {
	if n < 1e6 {
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}
