package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The simulated data centre of the tiers scenario.
const (
	tierProxies  = 8
	tierRelays   = 2
	tierReplicas = 2
	// tierLinkRTT is the round trip of the link between the data centre
	// and its storage replicas.
	tierLinkRTT = 20 * time.Millisecond
	// tierValueSize is the size of every value.
	tierValueSize = 1 << 10
	// tierLoadBatch is the keys per write batch of the load; the proxies'
	// window (1 entry) then holds at most this many values.
	tierLoadBatch = 100
	// tierShards is the physical shards of the data centre.
	tierShards = 8
	// The caches, as fractions of the dataset: a proxy's, a relay's (the
	// data centre's largest), and the transient tier of each.
	tierProxyCacheDiv     = 16
	tierRelayCacheDiv     = 4
	tierTransientCacheDiv = 64
	// tierMinCacheBytes keeps the budgets of small runs workable.
	tierMinCacheBytes = 1 << 20
	// A proxy's shard budget holds its whole shard (1/tierShards of the
	// keys) with room to spare for the shards' uneven sizes
	// (tierShardSlackPct percent) and the budget's overhead per value
	// (tierShardEntryOverhead bytes, the key included): the data
	// centre's proxies together hold the dataset in memory.
	tierShardSlackPct      = 10
	tierShardEntryOverhead = 160
)

// tierSizes are the byte budgets of the data centre's nodes for a
// dataset of keys values.
type tierSizes struct {
	proxyCache, relayCache, transient, shard int64
}

func sizesFor(keys int) tierSizes {
	data := int64(keys) * tierValueSize
	return tierSizes{
		proxyCache: max(tierMinCacheBytes, data/tierProxyCacheDiv),
		relayCache: max(tierMinCacheBytes, data/tierRelayCacheDiv),
		transient:  max(tierMinCacheBytes, data/tierTransientCacheDiv),
		shard:      max(tierMinCacheBytes, int64(keys)*(tierValueSize+tierShardEntryOverhead)*(100+tierShardSlackPct)/100/tierShards),
	}
}

// tierStorage is the part of the simulated data centre that lives for the
// whole scenario: the root the keys are written to, the replicas, and
// the links in front of them (one per replica for the proxies, one for
// the relays, so the connections of each are counted apart).
type tierStorage struct {
	root       *Target
	rootRepl   string
	replicas   []*Target
	proxyLinks []*delayLink
	relayLinks []*delayLink
	applied    uint64 // the root's index once the keys are loaded
}

func (s *tierStorage) stop() {
	for _, l := range append(s.proxyLinks, s.relayLinks...) {
		l.Close()
	}
	stopAll(s.replicas)
	if s.root != nil {
		StopTarget(s.root)
	}
}

// storageTargets are the nodes whose fetch answers are remote fetches.
func (s *tierStorage) storageTargets() []*Target {
	return append([]*Target{s.root}, s.replicas...)
}

// Tiers runs the tiers scenario: a data centre of tierProxies proxies and
// tierRelays relays in front of tierReplicas replicas behind a
// tierLinkRTT link, all on this machine; for each workload and each of
// TierStages, fresh proxies and relays are started, warmed up for
// cfg.TiersWarmup and measured for cfg.Duration. The scenario's targets
// are not used.
func Tiers(ctx context.Context, cfg Config, targets []*Target, logf Logf) (*Result, error) {
	stages, err := resolveStages(TierStages)
	if err != nil {
		return nil, err
	}
	keys := cfg.TiersKeys
	sz := sizesFor(keys)
	desc := fmt.Sprintf("a data centre of %d proxies and %d relays reads %d keys of %d bytes from %d replicas behind a %s link (loopback, delayed in this process); caches: proxy %s, relay %s, transient tier %s, shard budget %s (the whole shard of 1/%d of the keys, in memory); workloads: Zipf (s = %.1f) over every key, and regional (Zipf over %d keys, %d‰ uniform outside); per stage fresh proxies and relays, %d readers, %s of warm-up, then %s measured",
		tierProxies, tierRelays, keys, tierValueSize, tierReplicas, tierLinkRTT, fmtBytes(sz.proxyCache), fmtBytes(sz.relayCache), fmtBytes(sz.transient), fmtBytes(sz.shard), tierShards,
		zipfS, regionSize(keys), outsidePerMille, cfg.Conns, cfg.TiersWarmup, cfg.Duration)
	s := newScenarioRun(&cfg, ScenarioTiers, desc, targets, logf)
	for _, t := range targets {
		s.skip(t, "the tiers scenario measures the data centre it starts")
	}
	for _, st := range stages {
		if len(cfg.TiersStages) > 0 && !slices.Contains(cfg.TiersStages, st.Name) {
			continue
		}
		s.note("stage %s: %s (proxies: %s%s)", st.Name, st.About, strings.Join(st.proxy, " "), relayNote(st))
	}
	store, err := startTierStorage(ctx, &cfg, keys, logf)
	if err != nil {
		return s.res, err
	}
	defer store.stop()
	orAll := func(names []string, all []string) []string {
		if len(names) == 0 {
			return all
		}
		return names
	}
	var stageNames []string
	for _, st := range stages {
		stageNames = append(stageNames, st.Name)
	}
	stageNames = orAll(cfg.TiersStages, stageNames)
	for _, w := range orAll(cfg.TiersWorkloads, tierWorkloads) {
		for _, st := range stages {
			if !slices.Contains(stageNames, st.Name) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return s.res, err
			}
			row, ph, err := runTierStage(ctx, &cfg, store, st, w, keys, sz, logf)
			if err != nil {
				s.res.Failures = append(s.res.Failures, fmt.Sprintf("%s, %s: %v", w, st.Name, err))
				logf("tiers: FAILED: %s, %s: %v", w, st.Name, err)
				continue
			}
			s.res.Tiers = append(s.res.Tiers, row)
			s.res.Phases = append(s.res.Phases, ph)
		}
	}
	for _, c := range tierChecks(s.res.Tiers, stages[0].Name, fullestStage(stages), "replicas", "transient") {
		s.note("%s", c)
	}
	return s.res, nil
}

func relayNote(st resolvedStage) string {
	if !st.Relays {
		return ""
	}
	if len(st.relay) == 0 {
		return "; relays: --relay"
	}
	return "; relays: --relay " + strings.Join(st.relay, " ")
}

// startTierStorage starts the root and the replicas, loads the keys and
// waits for the replicas to hold them.
func startTierStorage(ctx context.Context, cfg *Config, keys int, logf Logf) (st *tierStorage, err error) {
	st = &tierStorage{}
	defer func() {
		if err != nil {
			st.stop()
		}
	}()
	root, found, err := spawnQSWith(ctx, cfg.QSBin, cfg.QSConfig, cfg.WorkDir, cfg.SpawnTimeout, "--repl", "127.0.0.1:0", "--node-name", "root")
	if err != nil {
		return st, fmt.Errorf("start the root: %w", err)
	}
	root.Name = "root"
	st.root, st.rootRepl = root, found["repl"]
	for i := range tierReplicas {
		t, found, err := spawnQSWith(ctx, cfg.QSBin, cfg.QSConfig, cfg.WorkDir, cfg.SpawnTimeout,
			"--repl", "127.0.0.1:0", "--upstream", st.rootRepl, "--node-name", fmt.Sprintf("replica%d", i+1))
		if err != nil {
			return st, fmt.Errorf("start replica %d: %w", i+1, err)
		}
		t.Name = fmt.Sprintf("replica%d", i+1)
		st.replicas = append(st.replicas, t)
		for _, links := range []*[]*delayLink{&st.proxyLinks, &st.relayLinks} {
			l, err := newDelayLink(found["repl"], tierLinkRTT)
			if err != nil {
				return st, err
			}
			*links = append(*links, l)
		}
	}
	logf("tiers: loading %d keys of %d bytes into the root", keys, tierValueSize)
	start := time.Now()
	if st.applied, err = loadTierKeys(ctx, cfg, root.HTTP, keys); err != nil {
		return st, fmt.Errorf("load: %w", err)
	}
	logf("tiers: loaded in %s (index %d); waiting for the replicas", time.Since(start).Round(time.Millisecond), st.applied)
	for _, r := range st.replicas {
		if err := waitApplied(ctx, r, cfg.DB, st.applied, loadWait(cfg, keys)); err != nil {
			return st, err
		}
	}
	return st, nil
}

// loadWait is how long a node may take to catch up with the load.
func loadWait(cfg *Config, keys int) time.Duration {
	return cfg.SpawnTimeout + time.Duration(keys/1000)*time.Second
}

// tierValues is the value of every key: a window of a random pool.
var tierValues = sync.OnceValue(func() []byte { return randomBytes(2, 1<<20+tierValueSize) })

func tierValue(i int) []byte {
	pool := tierValues()
	off := (i * 7919) % (len(pool) - tierValueSize + 1)
	return pool[off : off+tierValueSize]
}

// loadTierKeys writes every key at the root in batches of tierLoadBatch
// and returns the highest index acknowledged.
func loadTierKeys(ctx context.Context, cfg *Config, httpAddr string, keys int) (uint64, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	bc := newBatchClient(httpAddr, cfg.DB, cfg.Conns, cfg.Timeout)
	defer bc.Close()
	var next atomic.Int64
	var top atomic.Uint64
	var wg sync.WaitGroup
	for range min(cfg.Conns, 8) {
		wg.Go(func() {
			var body []byte
			ks := make([]string, 0, tierLoadBatch)
			vs := make([][]byte, 0, tierLoadBatch)
			for ctx.Err() == nil {
				lo := int(next.Add(tierLoadBatch)) - tierLoadBatch
				if lo >= keys {
					return
				}
				ks, vs = ks[:0], vs[:0]
				for i := lo; i < min(lo+tierLoadBatch, keys); i++ {
					ks = append(ks, tierKey(i))
					vs = append(vs, tierValue(i))
				}
				body = appendBatch(body[:0], ks, vs)
				idx, err := bc.post(ctx, body)
				if err != nil {
					cancel(err)
					return
				}
				for {
					t := top.Load()
					if idx <= t || top.CompareAndSwap(t, idx) {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	return top.Load(), context.Cause(ctx)
}

var statusClient = &http.Client{Timeout: 5 * time.Second}

// nodeStatus is what the scenario reads from GET /v1/{db}/status.
type nodeStatus struct {
	Applied uint64 `json:"applied_index"`
	Cache   *struct {
		L1Hits         int64  `json:"l1_hits"`
		L2Hits         *int64 `json:"l2_hits"`
		RemoteFetches  int64  `json:"remote_fetches"`
		DiskAdmissions int64  `json:"disk_admissions"`
		ShardValues    int64  `json:"shard_values"`
	} `json:"cache"`
}

func readStatus(ctx context.Context, t *Target, db string) (nodeStatus, error) {
	var st nodeStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+t.HTTP+"/v1/"+db+"/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := statusClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: status: http %d", t.Name, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("%s: status: %w", t.Name, err)
	}
	return st, nil
}

// waitApplied polls t's status until its applied index reaches index.
func waitApplied(ctx context.Context, t *Target, db string, index uint64, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		st, err := readStatus(ctx, t, db)
		if err == nil && st.Applied >= index {
			return nil
		}
		if exit := t.alive(); exit != nil {
			return exit
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not reach index %d within %s (at %d, %v)", t.Name, index, wait, st.Applied, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// tierDC is the part of the data centre one stage starts: its relays and
// proxies.
type tierDC struct {
	relays, proxies []*Target
	l2              bool // the proxies have the L2 tier
}

func (d *tierDC) stop() {
	stopAll(d.proxies)
	stopAll(d.relays)
}

// startTierDC starts the relays (if the stage has them) and the proxies
// of stage st, and waits until every one has applied the loaded keys.
func startTierDC(ctx context.Context, cfg *Config, store *tierStorage, st resolvedStage, keys int, sz tierSizes) (dc *tierDC, err error) {
	dc = &tierDC{l2: st.L2}
	defer func() {
		if err != nil {
			dc.stop()
		}
	}()
	// The proxies' replication ports are chosen first when a stage names
	// them ({dc-peers}); another process may take one in between, so
	// the caller starts the data centre again on "address already in
	// use". Other stages let the kernel choose.
	peers := make([]string, tierProxies)
	for i := range peers {
		peers[i] = "127.0.0.1:0"
		if !namesVar(st.proxy, "dc-peers") && !namesVar(st.relay, "dc-peers") {
			continue
		}
		p, err := freePort()
		if err != nil {
			return dc, err
		}
		peers[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	vars := map[string]string{
		"replicas":          linkAddrs(store.proxyLinks),
		"dc-peers":          strings.Join(peers, ","),
		"transient-bytes":   strconv.FormatInt(sz.transient, 10),
		"shard-cache-bytes": strconv.FormatInt(sz.shard, 10),
	}
	common := []string{"--upstream", store.rootRepl, "--role", "proxy", "--window", "1", "--dc", "bench", "--shards", strconv.Itoa(tierShards), "--log-level", "warn"}
	if st.Relays {
		var addrs []string
		for i := range tierRelays {
			extra, err := expandFlags(st.relay, vars)
			if err != nil {
				return dc, err
			}
			name := fmt.Sprintf("relay%d", i+1)
			args := append(append([]string{}, common...), "--relay", "--replicas", linkAddrs(store.relayLinks),
				"--cache-bytes", strconv.FormatInt(sz.relayCache, 10), "--node-name", name, "--repl", "127.0.0.1:0")
			t, found, err := spawnQSWith(ctx, cfg.QSBin, cfg.QSConfig, cfg.WorkDir, cfg.SpawnTimeout, append(args, extra...)...)
			if err != nil {
				return dc, fmt.Errorf("start %s: %w", name, err)
			}
			t.Name = name
			dc.relays = append(dc.relays, t)
			addrs = append(addrs, found["repl"])
		}
		vars["relays"] = strings.Join(addrs, ",")
	}
	extra, err := expandFlags(st.proxy, vars)
	if err != nil {
		return dc, err
	}
	names, err := proxyNames(tierProxies, tierShards)
	if err != nil {
		return dc, err
	}
	for i := range tierProxies {
		name := names[i]
		args := append(append([]string{}, common...), "--cache-bytes", strconv.FormatInt(sz.proxyCache, 10),
			"--node-name", name, "--repl", peers[i])
		t, _, err := spawnQSWith(ctx, cfg.QSBin, cfg.QSConfig, cfg.WorkDir, cfg.SpawnTimeout, append(args, extra...)...)
		if err != nil {
			return dc, fmt.Errorf("start %s: %w", name, err)
		}
		t.Name = name
		dc.proxies = append(dc.proxies, t)
	}
	for _, t := range append(append([]*Target{}, dc.relays...), dc.proxies...) {
		if err := waitApplied(ctx, t, cfg.DB, store.applied, loadWait(cfg, keys)); err != nil {
			return dc, err
		}
	}
	return dc, nil
}

// namesVar reports whether flags name {name}.
func namesVar(flags []string, name string) bool {
	for _, f := range flags {
		if strings.Contains(f, "{"+name+"}") {
			return true
		}
	}
	return false
}

func linkAddrs(ls []*delayLink) string {
	var a []string
	for _, l := range ls {
		a = append(a, l.Addr())
	}
	return strings.Join(a, ",")
}

// sampleTiers reads the counters of the data centre.
func sampleTiers(ctx context.Context, cfg *Config, store *tierStorage, dc *tierDC) (tierCounters, error) {
	var c tierCounters
	for _, t := range append(append([]*Target{}, dc.proxies...), dc.relays...) {
		st, err := readStatus(ctx, t, cfg.DB)
		if err != nil {
			return c, err
		}
		if st.Cache == nil {
			return c, fmt.Errorf("%s: its status has no cache figures", t.Name)
		}
		c.admissions += st.Cache.DiskAdmissions
		if slices.Contains(dc.relays, t) {
			continue
		}
		mfs, err := scrapeMetrics(ctx, t.HTTP)
		if err != nil {
			return c, fmt.Errorf("%s: %w", t.Name, err)
		}
		c.hists = c.hists.plus(histsOf(mfs, cfg.DB, dc.l2))
		c.l2Skipped += counterSum(mfs["qs_proxy_l2_skipped_total"], map[string]string{"db": cfg.DB})
		c.l2Failed += counterSum(mfs["qs_proxy_l2_requests_total"], map[string]string{"db": cfg.DB, "result": "timeout"}) +
			counterSum(mfs["qs_proxy_l2_requests_total"], map[string]string{"db": cfg.DB, "result": "error"})
		c.shardValues += st.Cache.ShardValues
		c.l1Hits += st.Cache.L1Hits
		c.fetched += st.Cache.RemoteFetches
		if st.Cache.L2Hits != nil {
			c.hasL2 = true
			c.l2Hits += *st.Cache.L2Hits
		}
	}
	for _, t := range store.storageTargets() {
		n, err := fetchKeysAnswered(ctx, t.HTTP)
		if err != nil {
			return c, fmt.Errorf("%s: %w", t.Name, err)
		}
		c.remoteKeys += n
	}
	return c, nil
}

// fetchKeysAnswered is qs_repl_fetch_keys_total{result="ok"} of the node
// at httpAddr: the values it sent to proxies and relays.
func fetchKeysAnswered(ctx context.Context, httpAddr string) (int64, error) {
	mfs, err := scrapeMetrics(ctx, httpAddr)
	if err != nil {
		return 0, err
	}
	return counterSum(mfs["qs_repl_fetch_keys_total"], map[string]string{"result": "ok"}), nil
}

// counterSum sums the counters of family mf whose labels include want.
func counterSum(mf *dto.MetricFamily, want map[string]string) int64 {
	var n float64
	for _, m := range mf.GetMetric() {
		if hasLabels(m, want) {
			n += m.GetCounter().GetValue()
		}
	}
	return int64(n)
}

// runTierStage measures one stage on one workload with a fresh set of
// relays and proxies.
func runTierStage(ctx context.Context, cfg *Config, store *tierStorage, st resolvedStage, workload string, keys int, sz tierSizes, logf Logf) (TierRow, Phase, error) {
	logf("tiers: %s, stage %s: starting the data centre", workload, st.Name)
	dc, err := startTierDC(ctx, cfg, store, st, keys, sz)
	for try := 1; try < 3 && err != nil && strings.Contains(err.Error(), "address already in use"); try++ {
		dc, err = startTierDC(ctx, cfg, store, st, keys, sz)
	}
	if err != nil {
		return TierRow{}, Phase{}, err
	}
	defer dc.stop()
	logf("tiers: %s, stage %s: warming up for %s", workload, st.Name, cfg.TiersWarmup)
	// The readers' sequences continue from the warm-up into the
	// measurement: the same pickers, one per reader.
	pickers := make([]*keyPicker, cfg.Conns)
	for i := range pickers {
		if pickers[i], err = newKeyPicker(workload, keys, cfg.Seed, 2000+i); err != nil {
			return TierRow{}, Phase{}, err
		}
	}
	warm := readTiers(ctx, cfg, dc, pickers, cfg.TiersWarmup, nil)
	if err := ctx.Err(); err != nil {
		return TierRow{}, Phase{}, err
	}
	// How much the proxies learned before the measurement: what their L1
	// hit rate can be (docs/tiers_l1_model.py).
	logf("tiers: %s, stage %s: warm-up read %d keys, %d per proxy", workload, st.Name, warm, warm/int64(len(dc.proxies)))
	before, err := sampleTiers(ctx, cfg, store, dc)
	if err != nil {
		return TierRow{}, Phase{}, err
	}
	for _, l := range append(append([]*delayLink{}, store.proxyLinks...), store.relayLinks...) {
		l.TakePeak()
	}
	logf("tiers: %s, stage %s: measuring for %s (shard budgets hold %d values)", workload, st.Name, cfg.Duration, before.shardValues)
	run := &phaseRun{}
	readTiers(ctx, cfg, dc, pickers, cfg.Duration, run)
	if err := ctx.Err(); err != nil {
		return TierRow{}, Phase{}, err
	}
	after, err := sampleTiers(ctx, cfg, store, dc)
	if err != nil {
		return TierRow{}, Phase{}, err
	}
	for _, t := range append(append([]*Target{}, dc.relays...), dc.proxies...) {
		if exit := t.alive(); exit != nil {
			return TierRow{}, Phase{}, exit
		}
	}
	d := after.minus(before)
	row := tierRow(st.TierStage, workload, d, tierValueSize)
	row.L2Latency, row.L3Latency = latencyOf(d.hists.l2), latencyOf(d.hists.l3)
	for _, l := range store.proxyLinks {
		row.ReplicaConnsProxies += l.TakePeak()
	}
	for _, l := range store.relayLinks {
		row.ReplicaConnsRelays += l.TakePeak()
	}
	row.Load1 = loadAverage()
	ph := run.phase()
	ph.Name, ph.Target = st.Name, workload
	if op := ph.Op("read"); op != nil {
		row.Latency = op.Latency
	}
	if h := run.hist("read"); h != nil {
		row.L1Latency = l1Bound(h, row.L1/100)
	}
	logf("tiers: %s, stage %s: L1 %.2f%%, %.1f remote fetches per 1,000 reads, p99 %s (L2 fetch ≤ %s, L3 fetch ≤ %s); L2: %d keys skipped (no owner in service), %d requests failed or timed out",
		workload, st.Name, row.L1, row.RemotePer1000, fmtUs(row.Latency.P99), fmtUs(row.L2Latency.P99), fmtUs(row.L3Latency.P99), d.l2Skipped, d.l2Failed)
	return row, ph, nil
}

// readTiers runs cfg.Conns readers for d, reader i on proxy i mod
// tierProxies, each drawing its keys from pickers[i] and checking every
// value, and returns how many reads succeeded. With run nil nothing is
// recorded (warm-up).
func readTiers(ctx context.Context, cfg *Config, dc *tierDC, pickers []*keyPicker, d time.Duration, run *phaseRun) (reads int64) {
	env := newPhaseEnv(ctx, cfg)
	n := len(pickers)
	sessions := make([]*mcSession, n)
	counts := make([]*opCounter, n)
	errs := make([]errCounter, n)
	for i := range sessions {
		sessions[i] = &mcSession{addr: dc.proxies[i%len(dc.proxies)].Memcache, env: env}
		defer sessions[i].close()
		_ = sessions[i].dial()
		counts[i] = newOpCounter()
	}
	elapsed := env.work(d, n, func(i int) {
		s, p := sessions[i], pickers[i]
		for env.ctx.Err() == nil {
			c, err := s.conn()
			if err != nil {
				if !s.failed(err, &errs[i]) {
					return
				}
				continue
			}
			k := p.next()
			key := tierKey(k)
			start := time.Now()
			v, found, err := c.getOne(key)
			took := time.Since(start)
			switch {
			case err != nil:
			case !found:
				err = errMiss
			case !bytes.Equal(v, tierValue(k)):
				err = errBadValue
			}
			if err != nil {
				if !s.failed(fmt.Errorf("get %s: %w", key, err), &errs[i]) {
					return
				}
				continue
			}
			counts[i].add(took, 1, len(v))
		}
	})
	for _, c := range counts {
		reads += c.ops
	}
	if run == nil {
		return reads
	}
	all := newOpCounter()
	for i := range n {
		all.merge(counts[i])
		run.errs.merge(&errs[i])
	}
	run.elapsed = elapsed
	run.add("read", all)
	return reads
}

// loadAverage is the machine's 1-minute load average, 0 if unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
