package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/quicksilver-kv/qs/internal/cache"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/checker"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// The consistency test of proxies. Writers change a small hot
// keyspace (sets, overwrites, deletes, re-creates) and a larger cold one
// through the root; three replicas follow the root at different lags
// (links that delay every byte, one of them stalling now and then); two
// proxies with tiny caches — one following the root, one following the
// fastest replica — fetch their misses from the replicas, whose fetch
// connections are cut at random moments. Concurrent clients read single
// keys, groups of keys and prefix scans on the proxies, recording each
// answer with the index it was served at. A checker then replays the
// root's log and verifies every answer against the state at its index,
// and that no client saw its index go back.

type consistencyOpts struct {
	reads     int           // stop after this many reads in all,
	minTime   time.Duration // and at least this long (reads are paced over it),
	maxTime   time.Duration // or after this long, once it has done enough reads
	enough    int           // reads the run must do, however long they take (up to stuckTime)
	window    int64
	naive     bool
	fetchWait time.Duration // proxy FetchTimeout
	// relay: a relay (following the fastest replica) resolves the misses
	// of four proxies, which fall back to the replicas and the root; its
	// fetch connections are cut at random too.
	relay bool
	// l2: with relay, the four proxies are also the L2 cache of their
	// data centre (four shards, one each, tiny shard budgets), asking
	// each other through links cut at random; they follow different
	// sources, so an owner's version of a key may be newer or older than
	// the asking proxy's record.
	l2 bool
}

type consistencyResult struct {
	report               checker.Report
	reads, errors        int
	misses, evictions    float64
	retries, replicaErrs float64
	historyReads         float64
	relayOK, fallback    float64 // requests the relay answered ok; sent to fallback members
	l2Hits               int64   // values the proxies' DC peers answered
	entries              uint64
	elapsed              time.Duration
}

const (
	hotKeys  = 40
	coldKeys = 400
)

func hotKey(i int) string  { return fmt.Sprintf("h%02d", i) }
func coldKey(i int) string { return fmt.Sprintf("c%03d", i) }

func runConsistency(t *testing.T, o consistencyOpts) consistencyResult {
	c := newCluster(t)
	root := c.root()
	dbid := root.st.DBID()
	// Replication paths of different speeds.
	l1 := newLink(t, root.addr, time.Millisecond)
	l2 := newLink(t, root.addr, 20*time.Millisecond)
	l3 := newLink(t, root.addr, 80*time.Millisecond)
	r1 := c.replica(dbid, l1.Addr())
	r2 := c.replica(dbid, l2.Addr())
	r3 := c.replica(dbid, l3.Addr())
	// Fetch paths, cut at random moments.
	f1, f2, f3 := newLink(t, r1.addr, 0), newLink(t, r2.addr, time.Millisecond), newLink(t, r3.addr, 0)
	members := []string{f1.Addr(), f2.Addr(), f3.Addr()}
	po := store.ProxyOptions{Window: o.window, CacheBytes: 2000, EvictInterval: 2 * time.Millisecond, FetchTimeout: o.fetchWait}
	pc := Config{Replicas: members, Fallback: []string{root.addr}, AttemptTimeout: 300 * time.Millisecond,
		SidelineMin: 20 * time.Millisecond, SidelineMax: 200 * time.Millisecond, naive: o.naive}
	// The first proxy lags behind the replicas (their answers then come
	// from their history); the second follows the fastest replica.
	lp := newLink(t, root.addr, 50*time.Millisecond)
	cuts := []*link{f1, f2, f3}
	var proxies []*node
	var l2s []*L2
	if o.relay {
		relay := c.relayProxy(dbid, po, pc, r1.addr)
		rl := newLink(t, relay.addr, 0)
		cuts = append(cuts, rl)
		ppc := pc
		ppc.Replicas, ppc.Fallback = []string{rl.Addr()}, append(append([]string(nil), members...), root.addr)
		// A relay's answer may wait for its own fetch from a replica.
		ppc.AttemptTimeout = 3 * pc.AttemptTimeout
		// Proxies behind the relay (answered "gone" for versions it
		// overwrote since), beside it, and ahead of it ("behind").
		shards, _ := cache.NewShardMap(4)
		names := shardNames(t, shards, 4)
		for i, up := range []string{lp.Addr(), r1.addr, lp.Addr(), root.addr} {
			ppo := po
			if o.l2 {
				ppo.ShardCacheBytes, ppo.Shards, ppo.NodeName = 8000, shards, names[i]
			}
			proxies = append(proxies, c.proxy(dbid, ppo, ppc, up))
		}
		if o.l2 {
			l2s = c.dcPeers(proxies, shards, names, &cuts)
		}
	} else {
		proxies = []*node{c.proxy(dbid, po, pc, lp.Addr()), c.proxy(dbid, po, pc, r1.addr)}
	}

	// Seed every key so cold keys exist from the start.
	ctx := context.Background()
	var seed []wal.Op
	for i := 0; i < coldKeys; i++ {
		seed = append(seed, wal.Op{Type: wal.OpSet, Key: []byte(coldKey(i)), Value: []byte(coldKey(i))})
	}
	for i := 0; i < hotKeys; i++ {
		seed = append(seed, wal.Op{Type: wal.OpSet, Key: []byte(hotKey(i)), Value: []byte(hotKey(i))})
	}
	if _, err := root.st.Write(ctx, store.Batch{Ops: seed}); err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies {
		waitApplied(t, p.st, root.st.AppliedIndex())
	}

	stop := make(chan struct{})
	var bg sync.WaitGroup
	// Writers.
	for w := 0; w < 2; w++ {
		bg.Add(1)
		go func() {
			defer bg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				var ops []wal.Op
				for j := rng.IntN(3) + 1; j > 0; j-- {
					k := hotKey(rng.IntN(hotKeys))
					if rng.IntN(5) < 2 {
						k = coldKey(rng.IntN(coldKeys))
					}
					switch r := rng.IntN(10); {
					case r < 6:
						ops = append(ops, wal.Op{Type: wal.OpSet, Key: []byte(k), Value: []byte(fmt.Sprintf("%s/%d/%d/%s", k, w, n, bytes.Repeat([]byte{'x'}, rng.IntN(300))))})
					case r < 9:
						ops = append(ops, wal.Op{Type: wal.OpDelete, Key: []byte(k)})
					default:
						ops = append(ops, wal.Op{Type: wal.OpSet, Key: []byte(k), Value: []byte("short-lived")}, wal.Op{Type: wal.OpDelete, Key: []byte(k)})
					}
				}
				if _, err := root.st.Write(ctx, store.Batch{Ops: ops}); err != nil && !errors.Is(err, store.ErrClosed) {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(rng.IntN(1500)) * time.Microsecond)
			}
		}()
	}
	// Lags: the slow replica stalls now and then; fetch connections are
	// cut at random.
	bg.Add(1)
	go func() {
		defer bg.Done()
		rng := rand.New(rand.NewPCG(3, 3))
		fl := cuts
		for i := 0; ; i++ {
			select {
			case <-stop:
				l3.stall.Store(false)
				lp.stall.Store(false)
				return
			case <-time.After(time.Duration(20+rng.IntN(60)) * time.Millisecond):
			}
			fl[rng.IntN(len(fl))].cut()
			l3.stall.Store(i%10 >= 7)
			lp.stall.Store(i%10 == 3)
		}
	}()
	// Readers: each a client with its own history.
	const clients = 8
	var total, failed atomic.Int64
	reads := make([][]checker.Read, clients)
	start := time.Now()
	deadline, minEnd, stuck := start.Add(o.maxTime), start.Add(o.minTime), start.Add(stuckTime)
	pace := o.minTime * clients / time.Duration(max(o.reads, 1))
	// The reads go on until the log has moved two windows past the seed,
	// so values have left the window and misses are read, however slowly
	// a loaded machine (or the race detector) lets the writers go.
	windowsPassed := func() bool { return root.st.AppliedIndex() >= uint64(2*o.window) }
	var rwg sync.WaitGroup
	for cl := 0; cl < clients; cl++ {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			px := proxies[cl%len(proxies)].st
			rng := rand.New(rand.NewPCG(uint64(cl), 99))
			for now := time.Now(); (total.Load() < int64(o.reads) || now.Before(minEnd) || !windowsPassed()) && (now.Before(deadline) || total.Load() < int64(o.enough)) && now.Before(stuck); now = time.Now() {
				time.Sleep(pace)
				rd, err := clientRead(px, rng, cl)
				if err != nil {
					if failed.Add(1) <= 5 {
						t.Logf("client %d: read failed: %v", cl, err)
					}
					if !errors.Is(err, store.ErrUnavailable) {
						t.Errorf("client %d: %v", cl, err)
						return
					}
					continue
				}
				reads[cl] = append(reads[cl], rd)
				total.Add(1)
			}
		}()
	}
	rwg.Wait()
	elapsed := time.Since(start)
	close(stop)
	bg.Wait()

	// Replay the root's log and check.
	last := root.st.AppliedIndex()
	m := checker.NewModel()
	for from := uint64(1); from <= last; {
		es, err := root.st.ReadLog(from, 5000, 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if err := m.Apply(e); err != nil {
				t.Fatal(err)
			}
		}
		from = es[len(es)-1].Index + 1
	}
	var all []checker.Read
	for _, rs := range reads {
		all = append(all, rs...)
	}
	res := consistencyResult{report: checker.Check(m, all), reads: len(all), errors: int(failed.Load()), entries: last, elapsed: elapsed}
	for _, p := range proxies {
		m := p.st.Metrics()
		res.misses += m.ProxyMisses
		res.evictions += m.ProxyEvictions
	}
	res.retries = counter(t, c.metrics.fetches.WithLabelValues(c.name, "retried"))
	res.historyReads = c.storeSum(func(m store.Metrics) float64 { return m.HistoryReads })
	for _, a := range members {
		res.replicaErrs += counter(t, c.metrics.replicaRequests.WithLabelValues(c.name, a, "error"))
	}
	if o.relay {
		res.relayOK = counter(t, c.metrics.replicaRequests.WithLabelValues(c.name, cuts[3].Addr(), "ok"))
		res.fallback = counter(t, c.metrics.fetches.WithLabelValues(c.name, "fallback"))
	}
	for _, l := range l2s {
		res.l2Hits += l.Hits()
	}
	return res
}

// clientRead does one read: a single key (60%), several keys at one
// index (35%), or a prefix scan (5%).
func clientRead(px *store.Store, rng *rand.Rand, client int) (checker.Read, error) {
	pick := func() string {
		if rng.IntN(2) == 0 {
			return hotKey(rng.IntN(hotKeys))
		}
		return coldKey(rng.IntN(coldKeys))
	}
	rd := checker.Read{Client: client}
	switch r := rng.IntN(100); {
	case r < 95:
		n := 1
		if r >= 60 {
			n = 2 + rng.IntN(5)
		}
		keys := make([][]byte, n)
		for i := range keys {
			keys[i] = []byte(pick())
			rd.Keys = append(rd.Keys, string(keys[i]))
		}
		rd.Found = make([]bool, n)
		rd.Values = make([][]byte, n)
		at, err := px.Lookup(keys, func(_ uint64, i int, v []byte, _ uint64, found bool) error {
			rd.Found[i], rd.Values[i] = found, bytes.Clone(v)
			return nil
		})
		rd.At = at
		return rd, err
	default:
		prefix := fmt.Sprintf("h%d", rng.IntN(4))
		v, err := px.View()
		if err != nil {
			return rd, err
		}
		defer v.Close()
		rd.At, rd.Exact, rd.From, rd.To = v.Index(), true, prefix, prefix[:1]+string(prefix[1]+1)
		_, err = v.Scan([]byte(prefix), nil, 0, func(k, val []byte, _ uint64) error {
			rd.Keys = append(rd.Keys, string(k))
			rd.Found = append(rd.Found, true)
			rd.Values = append(rd.Values, bytes.Clone(val))
			return nil
		})
		return rd, err
	}
}

func logResult(t *testing.T, what string, r consistencyResult) {
	t.Helper()
	t.Logf("%s: %d reads (%d keys) over %d entries in %v; %d violations, %d read errors; %v misses, %v evictions, %v fetch retries, %v replica request errors, %v replica reads from history",
		what, r.reads, r.report.Keys, r.entries, r.elapsed.Round(time.Millisecond), r.report.Count, r.errors, r.misses, r.evictions, r.retries, r.replicaErrs, r.historyReads)
	vs := append([]checker.Violation(nil), r.report.Violations...)
	sort.Slice(vs, func(i, j int) bool { return vs[i].At < vs[j].At })
	for i, v := range vs {
		if i == 5 {
			break
		}
		t.Logf("  %s", v)
	}
}

// readWait is how long a proxy read waits for its fetches in the
// consistency runs that allow no failed read. A read fails only when no
// member answered within it; on a loaded machine (load average 20 and
// more) dials and answers on loopback were seen to take over 300 ms each
// and five seconds ran out, so the runs give a read room to finish.
const readWait = 20 * time.Second

// A run goes on past its maxTime until it has done enough reads: on a
// loaded machine under the race detector a relay run once did 936 reads
// in 94 s (a relay's answer waits on its own fetch through cut links,
// and dials on loopback timed out), and a run that ends on time checks a
// rate, not correctness. stuckTime only bounds a run that has stopped
// making progress.
const stuckTime = 4 * time.Minute

// shortRelayReads is the length of the relay and L2 runs in -short mode,
// which CI runs under the race detector beside other packages' race
// tests: 500 reads exercise hundreds of misses and thousands of
// evictions.
func shortRelayReads() (reads int, minTime, maxTime time.Duration) {
	return 500, 3 * time.Second, 60 * time.Second
}

// TestProxyConsistency is the consistency test: zero violations, zero
// failed reads, and the run must have exercised misses, evictions and
// retries. QS_BENCH=1 runs the full length (at least 100,000 reads).
func TestProxyConsistency(t *testing.T) {
	o := consistencyOpts{reads: 12000, minTime: 6 * time.Second, maxTime: 40 * time.Second, window: 200, fetchWait: readWait}
	if os.Getenv("QS_BENCH") == "1" {
		o.reads, o.minTime, o.maxTime = 120000, time.Minute, 10*time.Minute
	} else if testing.Short() {
		// CI runs this under the race detector beside the other packages'
		// race tests: 1,000 reads took up to 20.4 s there (921 done at a
		// 20 s limit once), so the limit leaves room; a quick machine ends
		// at 1,000 reads as before.
		o.reads, o.minTime, o.maxTime = 1000, 3*time.Second, 45*time.Second
	}
	o.enough = min(o.reads, 2000)
	r := runConsistency(t, o)
	logResult(t, "consistency", r)
	if r.report.Count != 0 {
		t.Fatalf("%d violations", r.report.Count)
	}
	// A read fails (503, never a wrong value) only when no replica has
	// reached the version it needs within the fetch timeout: the replicas
	// lag beyond the window. In -short mode, which CI runs under the race
	// detector (everything 5–10× slower, on a busy machine), that happened
	// once in ~1,000 reads in one of seven runs; allow 1% there. The
	// default and full runs allow none.
	allowed := 0
	if testing.Short() {
		allowed = r.reads / 100
	}
	if r.errors > allowed {
		t.Fatalf("%d reads failed (%d allowed)", r.errors, allowed)
	}
	if r.reads < o.enough || r.misses == 0 || r.evictions == 0 || r.replicaErrs == 0 || r.historyReads == 0 {
		t.Fatalf("the run did not exercise the proxy enough: %+v", r)
	}
}

// TestRelayConsistency is the consistency test of a data centre: a relay
// and four proxies that fetch through it, with the relay's and the
// replicas' fetch connections cut at random: every answer must still be
// the version of its index.
func TestRelayConsistency(t *testing.T) {
	o := consistencyOpts{reads: 8000, minTime: 5 * time.Second, maxTime: 40 * time.Second, window: 200, fetchWait: readWait, relay: true}
	if os.Getenv("QS_BENCH") == "1" {
		o.reads, o.minTime, o.maxTime = 120000, time.Minute, 10*time.Minute
	} else if testing.Short() {
		o.reads, o.minTime, o.maxTime = shortRelayReads()
	}
	o.enough = min(o.reads, 1000)
	r := runConsistency(t, o)
	logResult(t, "relay consistency", r)
	t.Logf("relay: %v requests answered ok; %v requests to fallback members", r.relayOK, r.fallback)
	if r.report.Count != 0 {
		t.Fatalf("%d violations", r.report.Count)
	}
	// What this run checks is correctness: a read that could not get its
	// values in time (a loaded machine, every path cut or stalled) fails
	// cleanly with 503, and a few are allowed.
	if allowed := r.reads / 50; r.errors > allowed {
		t.Fatalf("%d reads failed (%d allowed)", r.errors, allowed)
	}
	// The proxies must have asked the relay. That it answered some of them
	// is required of the default run; under the race detector (-short in
	// CI) the relay, itself fetching from replicas behind cut links, can
	// miss every proxy's attempt timeout, and the proxies then fall back,
	// which is what this run checks for correctness.
	relayed := r.relayOK
	if testing.Short() {
		relayed += r.fallback
	}
	if r.reads < o.enough || r.misses == 0 || relayed == 0 {
		t.Fatalf("the run did not exercise the relay enough: %+v", r)
	}
}

// TestL2Consistency is TestRelayConsistency with the four proxies also
// the L2 cache of their data centre: owners that lag or lead the asking
// proxy, tiny shard budgets, L2 connections cut at random. Every answer
// must still be the version of its index.
func TestL2Consistency(t *testing.T) {
	o := consistencyOpts{reads: 8000, minTime: 5 * time.Second, maxTime: 40 * time.Second, window: 200, fetchWait: readWait, relay: true, l2: true}
	if os.Getenv("QS_BENCH") == "1" {
		o.reads, o.minTime, o.maxTime = 120000, time.Minute, 10*time.Minute
	} else if testing.Short() {
		o.reads, o.minTime, o.maxTime = shortRelayReads()
	}
	o.enough = min(o.reads, 1000)
	r := runConsistency(t, o)
	logResult(t, "L2 consistency", r)
	t.Logf("L2: %d values answered by DC peers; relay: %v requests answered ok; %v to fallback members", r.l2Hits, r.relayOK, r.fallback)
	if r.report.Count != 0 {
		t.Fatalf("%d violations", r.report.Count)
	}
	if allowed := r.reads / 50; r.errors > allowed {
		t.Fatalf("%d reads failed (%d allowed)", r.errors, allowed)
	}
	// L2 answered some reads in the default run; under the race detector
	// (-short in CI) every L2 attempt may miss its timeout, and the run
	// checks correctness only.
	if r.reads < o.enough || r.misses == 0 || (!testing.Short() && r.l2Hits == 0) {
		t.Fatalf("the run did not exercise the L2 cache enough: %+v", r)
	}
}

// TestConsistencyCheckerCatchesNaiveProxy: the same run with the naive
// design the reference started from — no sliding window (one entry), ask
// a replica for its current value, believe any answer — must produce
// violations: the checker can fail.
func TestConsistencyCheckerCatchesNaiveProxy(t *testing.T) {
	r := runConsistency(t, consistencyOpts{reads: 3000, minTime: 2 * time.Second, maxTime: 20 * time.Second, window: 1, naive: true, fetchWait: 5 * time.Second})
	logResult(t, "naive proxy", r)
	if r.report.Count == 0 {
		t.Fatal("the naive proxy passed the checker: the test cannot tell a broken proxy")
	}
}

// TestWindowCoversLaggingReplicas: every replica stalls while the root
// keeps writing and the proxy keeps following it. With a sliding window
// longer than what was written during the stall, every read succeeds:
// the new values are in the window, the old ones on the replicas. With a
// window of one entry, the new values are evicted and no replica has them
// yet: those reads fail (ErrUnavailable) after the fetch timeout — and
// still no wrong value is served.
func TestWindowCoversLaggingReplicas(t *testing.T) {
	// A read that must fail waits 100 ms for its fetch; one that must
	// succeed may wait long on a loaded machine.
	for _, tc := range []struct {
		window       int64
		wantErrors   bool
		fetchTimeout time.Duration
	}{{1, true, 100 * time.Millisecond}, {1000, false, time.Minute}} {
		t.Run(fmt.Sprintf("window=%d", tc.window), func(t *testing.T) {
			c := newCluster(t)
			root := c.root()
			dbid := root.st.DBID()
			l1, l2 := newLink(t, root.addr, 0), newLink(t, root.addr, 0)
			r1, r2 := c.replica(dbid, l1.Addr()), c.replica(dbid, l2.Addr())
			po := store.ProxyOptions{Window: tc.window, CacheBytes: -1, EvictInterval: time.Millisecond, FetchTimeout: tc.fetchTimeout}
			px := c.proxy(dbid, po, Config{Replicas: []string{r1.addr, r2.addr}, SidelineMin: 10 * time.Millisecond, SidelineMax: 50 * time.Millisecond}, root.addr)
			writeMany := func(prefix string, n int) {
				var wg sync.WaitGroup
				for w := 0; w < 8; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := w; i < n; i += 8 {
							k := fmt.Sprintf("%s%04d", prefix, i)
							if _, err := root.st.Write(context.Background(), store.Batch{Ops: []wal.Op{{Type: wal.OpSet, Key: []byte(k), Value: []byte(k)}}}); err != nil {
								t.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
			}
			writeMany("old", 1200) // older than any window here
			waitApplied(t, r1.st, root.st.AppliedIndex())
			waitApplied(t, r2.st, root.st.AppliedIndex())
			l1.stall.Store(true)
			l2.stall.Store(true)
			writeMany("new", 300)
			waitApplied(t, px.st, root.st.AppliedIndex())
			waitFor(t, "the keeper's eviction down to the window", func() bool { return px.st.ProxyStats().CachedValues <= tc.window })
			var got []checker.Read
			errs := 0
			for i := 0; i < 300; i += 10 {
				keys := [][]byte{[]byte(fmt.Sprintf("new%04d", i)), []byte(fmt.Sprintf("old%04d", i*4))}
				rd := checker.Read{Keys: []string{string(keys[0]), string(keys[1])}, Found: make([]bool, 2), Values: make([][]byte, 2)}
				at, err := px.st.Lookup(keys, func(_ uint64, j int, v []byte, _ uint64, found bool) error {
					rd.Found[j], rd.Values[j] = found, bytes.Clone(v)
					return nil
				})
				if err != nil {
					if !errors.Is(err, store.ErrUnavailable) {
						t.Fatal(err)
					}
					errs++
					continue
				}
				rd.At = at
				got = append(got, rd)
			}
			l1.stall.Store(false)
			l2.stall.Store(false)
			m := checker.NewModel()
			es, err := root.st.ReadLog(1, 1<<20, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				m.Apply(e)
			}
			rep := checker.Check(m, got)
			t.Logf("window %d: %d reads answered, %d failed, %d violations", tc.window, len(got), errs, rep.Count)
			if rep.Count != 0 {
				t.Fatalf("violations: %v", rep.Violations)
			}
			if (errs > 0) != tc.wantErrors {
				t.Fatalf("%d reads failed with window %d", errs, tc.window)
			}
		})
	}
}
