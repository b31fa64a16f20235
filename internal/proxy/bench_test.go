package proxy

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// The benchmarks of proxies (docs/benchmarks.md, "Proxies"). Each compares
// a proxy with a full replica of the same data, in the same run, in
// alternating phases, in one process (stores, replication servers and the
// replica pool as in production, on loopback):
//
//	QS_BENCH=1 go test -run TestProxyBenchmarks -v -timeout 30m ./internal/proxy/
//
// QS_BENCH_ONLY=latency|mix|negative|disk runs one of them.

func benchOn(t *testing.T, name string) {
	if os.Getenv("QS_BENCH") != "1" {
		t.Skip("set QS_BENCH=1 to run the proxy benchmarks")
	}
	if only := os.Getenv("QS_BENCH_ONLY"); only != "" && only != name {
		t.Skip("QS_BENCH_ONLY=" + only)
	}
}

func TestProxyBenchmarks(t *testing.T) {
	t.Run("latency", benchLatency)
	t.Run("mix", benchMix)
	t.Run("negative", benchNegative)
	t.Run("disk", benchDisk)
}

// load writes n keys of size-byte random values to root, in entries of
// per keys.
func load(t *testing.T, root *store.Store, n, size, per int) {
	t.Helper()
	for i := 0; i < n; i += per {
		ops := make([]wal.Op, 0, per)
		for j := i; j < min(n, i+per); j++ {
			v := make([]byte, size)
			rand.Read(v)
			ops = append(ops, wal.Op{Type: wal.OpSet, Key: []byte(fmt.Sprintf("key%08d", j)), Value: v})
		}
		if _, err := root.Write(context.Background(), store.Batch{Ops: ops}); err != nil {
			t.Fatal(err)
		}
	}
}

func benchKey(i int) []byte { return []byte(fmt.Sprintf("key%08d", i)) }

func quantiles(h *hdrhistogram.Histogram) string {
	us := func(q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1000 }
	return fmt.Sprintf("p50 %7.1f µs  p99 %7.1f µs  p99.9 %7.1f µs  (%d reads)", us(50), us(99), us(99.9), h.TotalCount())
}

// lookupOne reads one key and fails the test on error or absence.
func lookupOne(t *testing.T, st *store.Store, k []byte, wantFound bool) {
	found := false
	if _, err := st.Lookup([][]byte{k}, func(_ uint64, _ int, _ []byte, _ uint64, f bool) error { found = f; return nil }); err != nil {
		t.Fatal(err)
	}
	if found != wantFound {
		t.Fatalf("%s: found %v", k, found)
	}
}

// benchLatency: a proxy's hits against a replica's reads, single keys,
// one reader, alternating phases; with the in-memory read cache (the
// default) and without it (every read goes to Pebble). Then misses: a
// proxy that keeps nothing, reading each key once, so every read fetches
// from the replica.
func benchLatency(t *testing.T) {
	benchOn(t, "latency")
	const keys = 100_000
	for _, readCache := range []int64{0, -1} {
		t.Run(fmt.Sprintf("read_cache=%v", readCache == 0), func(t *testing.T) {
			c := newCluster(t)
			root := c.root()
			load(t, root.st, keys, 100, 1000)
			rep := &node{st: c.open(store.Options{DBID: root.st.DBID(), ReadCacheBytes: readCache}), pid: repl.NewProcessID()}
			c.serve(rep)
			c.follow(rep, root.addr)
			po := store.ProxyOptions{CacheBytes: 1 << 30}
			px := &node{st: c.open(store.Options{DBID: root.st.DBID(), ReadCacheBytes: readCache, Proxy: &po}), pid: repl.NewProcessID()}
			pool, err := New(Config{Database: c.name, DBID: root.st.DBID(), Replicas: []string{rep.addr}, ProcessID: px.pid}, quiet)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			px.st.SetFetcher(pool)
			c.follow(px, root.addr)
			waitApplied(t, rep.st, root.st.AppliedIndex())
			waitApplied(t, px.st, root.st.AppliedIndex())
			if s := px.st.ProxyStats(); s.CachedValues != keys {
				t.Fatalf("proxy holds %d values, want all %d", s.CachedValues, keys)
			}
			hr, hp := hdrhistogram.New(1, 10_000_000_000, 3), hdrhistogram.New(1, 10_000_000_000, 3)
			phase := func(st *store.Store, h *hdrhistogram.Histogram, d time.Duration) {
				end := time.Now().Add(d)
				for time.Now().Before(end) {
					k := benchKey(mrand.IntN(keys))
					t0 := time.Now()
					lookupOne(t, st, k, true)
					h.RecordValue(time.Since(t0).Nanoseconds())
				}
			}
			phase(rep.st, hdrhistogram.New(1, 10_000_000_000, 3), time.Second) // warm both
			phase(px.st, hdrhistogram.New(1, 10_000_000_000, 3), time.Second)
			// Many short alternating phases: load from elsewhere on the
			// machine falls on both alike.
			for i := 0; i < 60; i++ {
				phase(rep.st, hr, 100*time.Millisecond)
				phase(px.st, hp, 100*time.Millisecond)
			}
			t.Logf("hit latency, %d keys of 100 B, read cache %v:", keys, readCache == 0)
			t.Logf("  replica: %s", quantiles(hr))
			t.Logf("  proxy:   %s", quantiles(hp))
			t.Logf("  ratio proxy/replica: p50 %.2f  p99 %.2f  p99.9 %.2f", ratio(hp, hr, 50), ratio(hp, hr, 99), ratio(hp, hr, 99.9))
			if readCache != 0 {
				return
			}
			// Misses: a proxy that keeps nothing; each key read once.
			po0 := store.ProxyOptions{Window: 1, CacheBytes: -1}
			cold := &node{st: c.open(store.Options{DBID: root.st.DBID(), ReadCacheBytes: -1, Proxy: &po0}), pid: repl.NewProcessID()}
			pool0, err := New(Config{Database: c.name, DBID: root.st.DBID(), Replicas: []string{rep.addr}, ProcessID: cold.pid}, quiet)
			if err != nil {
				t.Fatal(err)
			}
			defer pool0.Close()
			cold.st.SetFetcher(pool0)
			c.follow(cold, root.addr)
			waitApplied(t, cold.st, root.st.AppliedIndex())
			time.Sleep(500 * time.Millisecond) // evictions down to the window
			hm, hr2 := hdrhistogram.New(1, 10_000_000_000, 3), hdrhistogram.New(1, 10_000_000_000, 3)
			order := mrand.Perm(keys)
			for i := 0; i < 30; i++ {
				phase(rep.st, hr2, 100*time.Millisecond)
				end := time.Now().Add(100 * time.Millisecond)
				for ; time.Now().Before(end) && len(order) > 0; order = order[1:] {
					t0 := time.Now()
					lookupOne(t, cold.st, benchKey(order[0]), true)
					hm.RecordValue(time.Since(t0).Nanoseconds())
				}
			}
			t.Logf("miss latency (proxy → replica over loopback, each key read once):")
			t.Logf("  proxy miss: %s", quantiles(hm))
			t.Logf("  replica read (same run, read cache on): %s", quantiles(hr2))
		})
	}
}

func ratio(a, b *hdrhistogram.Histogram, q float64) float64 {
	return float64(a.ValueAtQuantile(q)) / float64(max(b.ValueAtQuantile(q), 1))
}

// benchMix: reads per second with 4 readers, 90% and 99% of them hits
// (a hot set the proxy holds), the rest misses (keys never read before);
// the replica reads the same mix, all local.
func benchMix(t *testing.T) {
	benchOn(t, "mix")
	const keys, hot = 200_000, 10_000
	c := newCluster(t)
	root := c.root()
	load(t, root.st, keys, 100, 1000)
	rep := c.replica(root.st.DBID(), root.addr)
	po := store.ProxyOptions{Window: 1, CacheBytes: 1 << 30}
	px := c.proxy(root.st.DBID(), po, Config{Replicas: []string{rep.addr}}, root.addr)
	waitApplied(t, rep.st, root.st.AppliedIndex())
	waitApplied(t, px.st, root.st.AppliedIndex())
	for i := 0; i < hot; i++ { // the hot set, fetched and admitted
		lookupOne(t, px.st, benchKey(i), true)
	}
	time.Sleep(300 * time.Millisecond)
	var next atomic.Int64 // cold keys, each read once
	next.Store(hot)
	run := func(st *store.Store, hitRate float64, d time.Duration) float64 {
		var n atomic.Int64
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		for r := 0; r < 4; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					k := benchKey(mrand.IntN(hot))
					if mrand.Float64() >= hitRate {
						k = benchKey(int(next.Add(1)) % keys)
					}
					lookupOne(t, st, k, true)
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		return float64(n.Load()) / d.Seconds()
	}
	for _, rate := range []float64{0.90, 0.99} {
		const rounds = 12
		var r, p float64
		for i := 0; i < rounds; i++ {
			r += run(rep.st, rate, 250*time.Millisecond)
			p += run(px.st, rate, 250*time.Millisecond)
		}
		t.Logf("%.0f%% hits, 4 readers: replica %.0f reads/s, proxy %.0f reads/s, ratio %.2f", rate*100, r/rounds, p/rounds, p/r)
	}
	t.Logf("misses fetched: %v", c.storeSum(func(m store.Metrics) float64 { return m.ProxyMisses }))
}

// benchNegative: lookups of keys that do not exist, 4 readers, alternating
// phases; the proxy must answer them without a single remote request.
func benchNegative(t *testing.T) {
	benchOn(t, "negative")
	const keys = 200_000
	c := newCluster(t)
	root := c.root()
	load(t, root.st, keys, 100, 1000)
	rep := c.replica(root.st.DBID(), root.addr)
	po := store.ProxyOptions{Window: 1, CacheBytes: -1}
	px := c.proxy(root.st.DBID(), po, Config{Replicas: []string{rep.addr}}, root.addr)
	waitApplied(t, rep.st, root.st.AppliedIndex())
	waitApplied(t, px.st, root.st.AppliedIndex())
	fetched := func() float64 {
		return valueIn(t, c.metrics, "qs_proxy_fetches_total", map[string]string{"db": c.name}) +
			valueIn(t, c.metrics, "qs_proxy_replica_requests_total", map[string]string{"db": c.name})
	}
	before := fetched()
	run := func(st *store.Store, d time.Duration) float64 {
		var n atomic.Int64
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		for r := 0; r < 4; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					lookupOne(t, st, []byte(fmt.Sprintf("absent%016x", mrand.Uint64())), false)
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		return float64(n.Load()) / d.Seconds()
	}
	// The proxy evicts down to its window (one entry of 1000 keys); then
	// let flushes and compactions of those evictions settle.
	for px.st.ProxyStats().CachedValues > 1000 {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	measure := func(when string) {
		// Short alternating phases, so that load from elsewhere on the
		// machine falls on both alike.
		const rounds = 20
		var r, p float64
		for i := 0; i < rounds; i++ {
			r += run(rep.st, 250*time.Millisecond)
			p += run(px.st, 250*time.Millisecond)
		}
		t.Logf("negative lookups %s, 4 readers, %d keys stored: replica %.0f/s, proxy %.0f/s, ratio %.2f; remote requests during the proxy's phases: %v",
			when, keys, r/rounds, p/rounds, p/r, fetched()-before)
	}
	measure("as loaded")
	for _, st := range []*store.Store{rep.st, px.st} {
		if err := st.Compact(); err != nil {
			t.Fatal(err)
		}
	}
	measure("after a full compaction of both")
	if fetched() != before {
		t.Fatal("negative lookups caused remote requests")
	}
}

// benchDisk: the disk of a proxy with an empty cache against a full
// replica of the same 1M keys with 1 KiB values, both with the options
// `qs serve` gives them (the proxy with --cache-bytes 0 --window 10).
func benchDisk(t *testing.T) {
	benchOn(t, "disk")
	keys, per := 1_000_000, 1000
	if n := os.Getenv("QS_BENCH_KEYS"); n != "" {
		fmt.Sscan(n, &keys)
	}
	c := newCluster(t)
	cfg := config.Default()
	cfg.Data = t.TempDir()
	opts := func(d config.Database) store.Options {
		o, err := cfg.StoreOptions(d)
		if err != nil {
			t.Fatal(err)
		}
		o.MinFreeBytes, o.BallastBytes, o.Logger, o.Name = 1, -1, quiet, c.name+d.Name
		return o
	}
	root := c.root()
	start := time.Now()
	load(t, root.st, keys, 1024, per)
	t.Logf("loaded %d keys of 1 KiB in %d entries in %v", keys, keys/per, time.Since(start).Round(time.Second))
	ro := opts(config.Database{Name: "replica", Upstream: []string{"x"}, Compression: "zstd"})
	ro.DBID = root.st.DBID()
	po := opts(config.Database{Name: "proxy", Upstream: []string{"x"}, Role: "proxy", ProxyCacheBytes: -1, ProxyWindow: 10, Compression: "zstd"})
	po.DBID = root.st.DBID()
	rep, err := store.Open(ro)
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	px, err := store.Open(po)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	for _, st := range []*store.Store{rep, px} {
		start := time.Now()
		for st.AppliedIndex() < root.st.AppliedIndex() {
			// Batches as the replication server sends them.
			es, err := root.st.ReadLog(st.AppliedIndex()+1, 1000, 4<<20)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Apply(context.Background(), es); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%s applied the log in %v", st.Name(), time.Since(start).Round(time.Millisecond))
	}
	deadline := time.Now().Add(5 * time.Minute)
	for px.ProxyStats().CachedValues > int64(10*per) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(30 * time.Second) // background compactions and paced file deletions
	report := func(when string) float64 {
		r, p := dirBytes(t, ro.Dir), dirBytes(t, po.Dir)
		ps := px.ProxyStats()
		t.Logf("%s: replica %s, proxy %s (%d values kept, %s), ratio %.3f", when, mib(r), mib(p), ps.CachedValues, mib(ps.CachedBytes), float64(p)/float64(r))
		t.Logf("  replica files: %s", byKind(t, ro.Dir))
		t.Logf("  proxy files:   %s", byKind(t, po.Dir))
		return float64(p) / float64(r)
	}
	report("after load")
	for _, st := range []*store.Store{rep, px} {
		if err := st.Compact(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Second) // paced deletions of the compacted files
	report("after a full compaction of both")
}

func dirBytes(t *testing.T, dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// byKind sums a directory's files by extension.
func byKind(t *testing.T, dir string) string {
	sum := map[string]int64{}
	filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			sum[filepath.Ext(path)] += fi.Size()
		}
		return nil
	})
	var out []string
	for _, k := range []string{".sst", ".blob", ".log"} {
		out = append(out, fmt.Sprintf("%s %s", k, mib(sum[k])))
		delete(sum, k)
	}
	var other int64
	for _, v := range sum {
		other += v
	}
	return strings.Join(append(out, "other "+mib(other)), ", ")
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
