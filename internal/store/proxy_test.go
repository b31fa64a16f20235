package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// storeFetcher fetches from a full store in the same process, as a replica
// answers a proxy: the version current at min(asOf, its applied index),
// which must be the one asked.
type storeFetcher struct {
	src   *Store
	calls atomic.Int64
	keys  atomic.Int64
}

func (f *storeFetcher) Fetch(ctx context.Context, asOf uint64, items []FetchItem) error {
	f.calls.Add(1)
	f.keys.Add(int64(len(items)))
	v, err := f.src.View()
	if err != nil {
		return err
	}
	defer v.Close()
	for i := range items {
		it := &items[i]
		if v.Index() < it.Index {
			return fmt.Errorf("source at %d, behind version %d", v.Index(), it.Index)
		}
		val, idx, found, err := v.GetAt(it.Key, min(asOf, v.Index()))
		if err != nil {
			return err
		}
		if !found || idx != it.Index || !it.Check(val) {
			return fmt.Errorf("key %q as of %d: version %d found=%v, want %d", it.Key, asOf, idx, found, it.Index)
		}
		it.Value = append([]byte(nil), val...)
	}
	return nil
}

func openProxy(t *testing.T, root *Store, po ProxyOptions) (*Store, *storeFetcher) {
	t.Helper()
	p := openTest(t, Options{Name: dbName(t), DBID: root.DBID(), ChunkBytes: 4096, Proxy: &po, Logger: quietLogger()})
	f := &storeFetcher{src: root}
	p.SetFetcher(f)
	return p, f
}

// lookupAll reads keys through Lookup and returns the answers and index.
func lookupAll(t *testing.T, s *Store, keys ...string) (uint64, map[string]string) {
	t.Helper()
	kb := make([][]byte, len(keys))
	for i, k := range keys {
		kb[i] = []byte(k)
	}
	out := map[string]string{}
	at, err := s.Lookup(kb, func(_ uint64, i int, v []byte, _ uint64, found bool) error {
		if found {
			out[keys[i]] = string(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return at, out
}

// TestProxyWindowAndRemoteRecords: a proxy applying the log keeps the
// values of its last Window entries and only the version of the others;
// reads give the same answers as the root, fetching only the remote
// values; absent keys cost no fetch.
func TestProxyWindowAndRemoteRecords(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{ChunkBytes: 4096, Logger: quietLogger()})
	for i := 0; i < 20; i++ {
		mustWrite(t, root, setb(fmt.Sprintf("k%02d", i), pattern(i, 10+i*500)))
	}
	px, f := openProxy(t, root, ProxyOptions{Window: 5, CacheBytes: -1})
	replicate(t, root, px, 7)
	// Applied in batches of 7: values of a batch's last 5 entries were
	// stored; those that left the window since are evicted (budget 0).
	waitFor(t, "eviction down to the window", func() bool { return px.ProxyStats().CachedValues == 5 })
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("k%02d", i)
		rec, err := decodeRecord(rawGet(t, px, dataKey(nil, []byte(k))))
		if err != nil {
			t.Fatal(err)
		}
		if inWindow := i >= 15; (rec.kind == recRemote) == inWindow {
			t.Fatalf("%s written at %d: remote=%v with window floor %d", k, rec.index, rec.kind == recRemote, px.px.floor(px.AppliedIndex()))
		}
	}
	_, got := lookupAll(t, px, "k19", "k18", "absent1", "absent2")
	if f.calls.Load() != 0 || len(got) != 2 {
		t.Fatalf("window and absent keys: %d fetches, %d found", f.calls.Load(), len(got))
	}
	keys := []string{"absent"}
	for i := 0; i < 20; i++ {
		keys = append(keys, fmt.Sprintf("k%02d", i))
	}
	at, got := lookupAll(t, px, keys...)
	if at != root.AppliedIndex() || len(got) != 20 {
		t.Fatalf("at %d, %d found", at, len(got))
	}
	for i := 0; i < 20; i++ {
		if want := pattern(i, 10+i*500); got[fmt.Sprintf("k%02d", i)] != string(want) {
			t.Fatalf("k%02d differs", i)
		}
	}
	if f.calls.Load() != 1 || f.keys.Load() != 15 {
		t.Fatalf("%d fetches of %d keys, want 1 of 15", f.calls.Load(), f.keys.Load())
	}
	// A scan fetches too, and sees the same values.
	v, _ := px.View()
	n := 0
	if _, err := v.Scan([]byte("k"), nil, 0, func(k, val []byte, idx uint64) error {
		if !bytes.Equal(val, pattern(n, 10+n*500)) {
			return fmt.Errorf("scan %s differs", k)
		}
		n++
		return nil
	}); err != nil || n != 20 {
		t.Fatalf("scan: %d keys, %v", n, err)
	}
	v.Close()
	mustVerify(t, px)
	if px.IsProxy() != true || root.IsProxy() {
		t.Fatal("IsProxy")
	}
	if _, err := px.Write(context.Background(), Batch{Ops: []wal.Op{set("a", "b")}}); !errors.Is(err, ErrNotRoot) {
		t.Fatalf("write on a proxy: %v", err)
	}
}

// waitFor polls cond for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestProxyAdmitsAndEvicts: fetched values are admitted; beyond the
// budget the keeper evicts values outside the window, never inside; the
// counters stay exact.
func TestProxyAdmitsAndEvicts(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Logger: quietLogger()})
	for i := 0; i < 50; i++ {
		mustWrite(t, root, setb(fmt.Sprintf("k%02d", i), pattern(i, 1000)))
	}
	px, f := openProxy(t, root, ProxyOptions{Window: 10, CacheBytes: 20_000, EvictInterval: time.Millisecond})
	replicate(t, root, px, 50)
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	lookupAll(t, px, keys...)
	if f.keys.Load() != 40 {
		t.Fatalf("fetched %d keys, want 40", f.keys.Load())
	}
	waitFor(t, "admissions", func() bool { return px.Metrics().ProxyAdmissions["admitted"] == 40 })
	waitFor(t, "evictions", func() bool { return px.ProxyStats().CachedBytes <= 20_000 })
	st := px.ProxyStats()
	if st.CachedValues < 10 {
		t.Fatalf("%d values stored: the window's 10 must stay", st.CachedValues)
	}
	for i := 40; i < 50; i++ {
		rec, _ := decodeRecord(rawGet(t, px, dataKey(nil, []byte(fmt.Sprintf("k%02d", i)))))
		if rec.kind == recRemote {
			t.Fatalf("k%02d in the window was evicted", i)
		}
	}
	// Counted once the keeper has the committer's answer, just after the
	// counters moved.
	waitFor(t, "evictions counted", func() bool { return px.Metrics().ProxyEvictions > 0 })
	mustVerify(t, px)
	// Everything still reads right.
	_, got := lookupAll(t, px, keys...)
	for i, k := range keys {
		if got[k] != string(pattern(i, 1000)) {
			t.Fatalf("%s differs after eviction", k)
		}
	}
}

// TestProxyCacheChangesCheckTheRecord: an admission or eviction that no
// longer fits the key's record (a newer write, an index inside the window)
// changes nothing.
func TestProxyCacheChangesCheckTheRecord(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Logger: quietLogger()})
	mustWrite(t, root, set("a", "old"))
	for i := 0; i < 5; i++ {
		mustWrite(t, root, set(fmt.Sprintf("f%d", i), "x"))
	}
	px, _ := openProxy(t, root, ProxyOptions{Window: 3, CacheBytes: 1 << 20, EvictInterval: time.Hour})
	replicate(t, root, px, 100)
	// a@1 is remote. Admit a wrong value, a wrong version, then the right one.
	ch := &cacheChange{admit: []admission{{key: []byte("a"), index: 1, value: []byte("bad")}, {key: []byte("a"), index: 2, value: []byte("old")}}}
	px.submitCache(ch)
	if ch.admitted != 0 || ch.stale != 2 {
		t.Fatalf("bad admissions: %+v", ch)
	}
	// A newer write arrives; an admission of the old version is stale.
	mustWrite(t, root, set("a", "new"))
	replicate(t, root, px, 100)
	ch = &cacheChange{admit: []admission{{key: []byte("a"), index: 1, value: []byte("old")}}}
	px.submitCache(ch)
	if ch.admitted != 0 {
		t.Fatalf("stale admission applied: %+v", ch)
	}
	// Evicting a value inside the window, or of another version: refused.
	ch = &cacheChange{evict: []eviction{{key: []byte("a"), index: 7}, {key: []byte("f4"), index: 1}}}
	px.submitCache(ch)
	if ch.evicted != 0 {
		t.Fatalf("evictions applied: %+v", ch)
	}
	if _, got := lookupAll(t, px, "a"); got["a"] != "new" {
		t.Fatalf("a = %q", got["a"])
	}
	mustVerify(t, px)
}

// TestProxyLookupConsistentUnderApply is the store-level consistency model
// test of a proxy: the log is applied in random batches while readers read
// single keys and groups of keys; the keeper evicts constantly (tiny
// budget), fetches go to a replica that lags behind the proxy by less than
// the window, and every answer must equal the log's state at the index it
// was read at, with a reader's indexes never going back.
func TestProxyLookupConsistentUnderApply(t *testing.T) {
	t.Parallel()
	for _, readCache := range []int64{64 << 20, -1} {
		t.Run(fmt.Sprintf("read_cache=%d", readCache), func(t *testing.T) { proxyConsistency(t, readCache, 0) })
	}
}

// TestProxyLookupConsistentWithTransientTier is the same with a transient
// tier small enough that values come and go from it all the time.
func TestProxyLookupConsistentWithTransientTier(t *testing.T) {
	t.Parallel()
	for _, readCache := range []int64{64 << 20, -1} {
		t.Run(fmt.Sprintf("read_cache=%d", readCache), func(t *testing.T) { proxyConsistency(t, readCache, 8000) })
	}
}

func proxyConsistency(t *testing.T, readCache, transient int64) {
	const nkeys = 1000
	rng := rand.New(rand.NewPCG(5, 5))
	root := openTest(t, Options{ChunkBytes: 4096, Logger: quietLogger()})
	randomOps(t, root, rng, 600, nkeys)
	replica := openTest(t, Options{DBID: root.DBID(), ChunkBytes: 4096, Logger: quietLogger()})
	po := ProxyOptions{Window: 20, CacheBytes: 4000, EvictInterval: time.Millisecond, TransientBytes: transient}
	px := openTest(t, Options{Name: dbName(t), DBID: root.DBID(), ChunkBytes: 4096, Proxy: &po, ReadCacheBytes: readCache, Logger: quietLogger()})
	px.SetFetcher(&storeFetcher{src: replica})
	m := readModel(t, root)
	last := root.AppliedIndex()

	var wg sync.WaitGroup
	done := make(chan struct{})
	type read struct {
		at   uint64
		keys []string
		got  map[string]string
	}
	reads := make([][]read, 4)
	errs := make(chan error, 4)
	for r := range reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for n := 0; n < 100000; n++ {
				time.Sleep(50 * time.Microsecond)
				select {
				case <-done:
					return
				default:
				}
				keys := []string{fmt.Sprintf("k%d", rng.IntN(nkeys+1))}
				if rng.IntN(2) == 0 {
					keys = append(keys, fmt.Sprintf("k%d", rng.IntN(nkeys+1)), fmt.Sprintf("k%d", rng.IntN(nkeys+1)))
				}
				kb := make([][]byte, len(keys))
				for i, k := range keys {
					kb[i] = []byte(k)
				}
				got := map[string]string{}
				at, err := px.Lookup(kb, func(_ uint64, i int, v []byte, _ uint64, found bool) error {
					if found {
						got[keys[i]] = string(v)
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
				reads[r] = append(reads[r], read{at, keys, got})
			}
		}()
	}
	// Apply the log in random steps; the replica follows, staying behind
	// the proxy by less than the window at every moment: it moves first,
	// to within 10 of where the proxy is about to be (it was let lag by up
	// to 23 after the proxy's step, past the window of 20, and a read could
	// then ask it for a version it did not have yet).
	for px.AppliedIndex() < last {
		to := min(last, px.AppliedIndex()+uint64(1+rng.IntN(8)))
		if lag := to - replica.AppliedIndex(); lag > 15 || rng.IntN(3) == 0 {
			if n := lag - uint64(rng.IntN(int(min(lag, 10)))+1) + 1; n > 0 {
				es, err := root.ReadLog(replica.AppliedIndex()+1, int(n), 1<<30)
				if err != nil {
					t.Fatal(err)
				}
				if err := replica.Apply(context.Background(), es); err != nil {
					t.Fatal(err)
				}
			}
		}
		es, err := root.ReadLog(px.AppliedIndex()+1, int(to-px.AppliedIndex()), 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		if err := px.Apply(context.Background(), es); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // reads while the keeper evicts
	close(done)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	total := 0
	for r, rs := range reads {
		var prev uint64
		for _, rd := range rs {
			if rd.at < prev {
				t.Fatalf("reader %d: index went back from %d to %d", r, prev, rd.at)
			}
			prev = rd.at
			for _, k := range rd.keys {
				wv, _, wf := m.at(k, rd.at)
				gv, gf := rd.got[k]
				if wf != gf || gv != string(wv) {
					t.Fatalf("reader %d: %s at %d: got found=%v len %d, want found=%v len %d", r, k, rd.at, gf, len(gv), wf, len(wv))
				}
			}
			total++
		}
	}
	if total < 100 || px.Metrics().ProxyEvictions == 0 || px.Metrics().ProxyMisses == 0 {
		t.Fatalf("%d reads, %v evictions, %v misses: the test did not exercise the cache", total, px.Metrics().ProxyEvictions, px.Metrics().ProxyMisses)
	}
	if transient > 0 {
		again, evicted := px.Metrics().ProxyTransient["read_again"], px.Metrics().ProxyTransient["evicted"]
		if again == 0 || evicted == 0 {
			t.Fatalf("%v values read again, %v evicted from the transient tier: the test did not exercise it", again, evicted)
		}
	}
	t.Logf("%d reads checked; %v misses, %v evictions, %v admissions", total, px.Metrics().ProxyMisses, px.Metrics().ProxyEvictions, px.Metrics().ProxyAdmissions["admitted"])
	mustVerify(t, px)
}

// TestProxyRoleChanges: a full node's data opened as a proxy becomes one
// (its history dropped, its values counted as stored); a proxy's data
// refuses to open as a full node.
func TestProxyRoleChanges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openTest(t, Options{Dir: dir, Logger: quietLogger()})
	mustWrite(t, s, set("a", "1"))
	mustWrite(t, s, set("a", "22"))
	s.Close()
	po := ProxyOptions{Window: 1}
	p := openTest(t, Options{Dir: dir, Proxy: &po, Logger: quietLogger()})
	if st := p.ProxyStats(); st.CachedValues != 1 || st.CachedBytes != 2 {
		t.Fatalf("converted proxy counts %+v", st)
	}
	if h, _ := p.History(); h.Enabled || h.Entries != 0 {
		t.Fatalf("history kept on a proxy: %+v", h)
	}
	mustVerify(t, p)
	p.Close()
	if _, err := Open(Options{Dir: dir, MinFreeBytes: 1, BallastBytes: -1, Logger: quietLogger()}); !errors.Is(err, ErrRoleMismatch) {
		t.Fatalf("proxy data opened as a full node: %v", err)
	}
}

// TestProxyReadFailsWithoutReplicas: a remote value that cannot be fetched
// is an ErrUnavailable error, never a wrong answer.
func TestProxyReadFailsWithoutReplicas(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Logger: quietLogger()})
	mustWrite(t, root, set("a", "1"))
	mustWrite(t, root, set("b", "2"))
	po := ProxyOptions{Window: 1}
	px := openTest(t, Options{DBID: root.DBID(), Proxy: &po, Logger: quietLogger()})
	replicate(t, root, px, 10)
	if _, err := px.Lookup([][]byte{[]byte("a")}, func(uint64, int, []byte, uint64, bool) error { return nil }); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no fetcher: %v", err)
	}
	// A fetcher that answers with the wrong bytes is caught.
	px.SetFetcher(liar{})
	if _, err := px.Lookup([][]byte{[]byte("a")}, func(uint64, int, []byte, uint64, bool) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("lying fetcher: %v", err)
	}
	// b is in the window: answered.
	if _, got := lookupAll(t, px, "b"); got["b"] != "2" {
		t.Fatalf("b = %q", got["b"])
	}
}

type liar struct{}

func (liar) Fetch(_ context.Context, _ uint64, items []FetchItem) error {
	for i := range items {
		items[i].Value = []byte("x")
	}
	return nil
}

// dbName gives a test its own database name, so its metric series do not
// mix with other tests'.
func dbName(t *testing.T) string {
	return fmt.Sprintf("%s_%d", t.Name(), dbSeq.Add(1))
}

var dbSeq atomic.Int64

// TestProxyOptionsDefaultsTwice: filling defaults is idempotent (the
// configuration fills them, then Open again).
func TestProxyOptionsDefaultsTwice(t *testing.T) {
	t.Parallel()
	o := Options{Dir: "x", Proxy: &ProxyOptions{CacheBytes: -1}}
	o.EnsureDefaults()
	first := *o.Proxy
	o.EnsureDefaults()
	if *o.Proxy != first || o.Proxy.CacheBytes != -1 {
		t.Fatalf("defaults moved: %+v then %+v", first, *o.Proxy)
	}
}

// TestProxyBootstrapFromSnapshot: a proxy that installs a full node's
// snapshot (a bootstrap) becomes a proxy of that data: its history is
// dropped, every value counted as stored, then evicted down to the
// budget; reads stay exact. A proxy's data verifies read-only (qs verify).
func TestProxyBootstrapFromSnapshot(t *testing.T) {
	t.Parallel()
	for _, ret := range []Retention{{}, {MaxEntries: 20, MaxBytes: -1, MaxAge: -1}} {
		t.Run(fmt.Sprintf("retain_entries=%d", ret.MaxEntries), func(t *testing.T) { proxyBootstrap(t, ret) })
	}
}

// proxyBootstrap: with a short retention, the snapshot holds retired log
// blocks whose values the proxy then evicts (counting the blocks down).
func proxyBootstrap(t *testing.T, ret Retention) {
	root := openTest(t, Options{ChunkBytes: 4096, Retention: ret, Logger: quietLogger()})
	rng := rand.New(rand.NewPCG(8, 8))
	randomOps(t, root, rng, 200, 50)
	for i := 0; i < 60; i++ { // large new values, each in its own block: retired once out of the log
		mustWrite(t, root, setb(fmt.Sprintf("big%02d", i), pattern(i, 2000)))
	}
	po := ProxyOptions{Window: 5, CacheBytes: -1, EvictInterval: time.Millisecond}
	dir := t.TempDir()
	px := openTest(t, Options{Name: dbName(t), Dir: dir, DBID: root.DBID(), ChunkBytes: 4096, Proxy: &po, Retention: ret, Logger: quietLogger()})
	px.SetFetcher(&storeFetcher{src: root})
	if _, err := root.Checkpoint(ReadyDir(dir)); err != nil {
		t.Fatal(err)
	}
	// Counted on the (idle) root, whose checkpoint the snapshot is: the
	// proxy's keeper may evict every retired value right after the install.
	retiredBefore := mustVerify(t, root).RetiredBlocks
	if ret.MaxEntries > 0 && retiredBefore == 0 {
		t.Fatal("the snapshot holds no retired log block: the case is not exercised")
	}
	if err := px.Replace(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, px)
	if px.AppliedIndex() != root.AppliedIndex() {
		t.Fatalf("applied %d after install, root at %d", px.AppliedIndex(), root.AppliedIndex())
	}
	if h, _ := px.History(); h.Enabled || h.Entries != 0 {
		t.Fatalf("history kept: %+v", h)
	}
	st, _ := root.Stats()
	waitFor(t, "eviction after the install", func() bool { return px.ProxyStats().CachedBytes < st.ValueBytes })
	keys := []string{"absent"}
	for i := 0; i < 60; i++ {
		keys = append(keys, fmt.Sprintf("k%d", i), fmt.Sprintf("big%02d", i))
	}
	at, got := lookupAll(t, px, keys...)
	rat, want := lookupAll(t, root, keys...) // the root is idle: the same index
	if at != rat || len(got) != len(want) {
		t.Fatalf("proxy at %d has %d keys, root at %d has %d", at, len(got), rat, len(want))
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("%s differs", k)
		}
	}
	if ret.MaxEntries > 0 {
		r := mustVerify(t, px)
		t.Logf("after evictions: %d retired blocks (%d before)", r.RetiredBlocks, retiredBefore)
	}
	mustVerify(t, px)
	px.Close()
	r, err := Verify(Options{Dir: dir, Logger: quietLogger()})
	if err != nil || !r.Clean() {
		t.Fatalf("read-only verify of a proxy: %v %v", err, r)
	}
}

// freeFS reports a settable amount of free disk.
type freeFS struct {
	vfs.FS
	free atomic.Uint64
}

func (f *freeFS) GetDiskUsage(string) (vfs.DiskUsage, error) {
	return vfs.DiskUsage{AvailBytes: f.free.Load(), TotalBytes: 1 << 40}, nil
}

// TestProxyDiskLimits: below the soft free-space limit the keeper evicts
// beyond the budget; below the hard limit reads still work (by fetching)
// but nothing is admitted; both are visible in metrics.
func TestProxyDiskLimits(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Logger: quietLogger()})
	for i := 0; i < 200; i++ {
		mustWrite(t, root, setb(fmt.Sprintf("k%03d", i), pattern(i, 1000)))
	}
	fs := &freeFS{FS: vfs.NewMem()}
	fs.free.Store(1 << 30)
	po := ProxyOptions{Window: 5, CacheBytes: 1 << 30, SoftFreeBytes: 100 << 20, HardFreeBytes: 50 << 20, EvictInterval: time.Millisecond}
	px := openTest(t, Options{Name: dbName(t), Dir: "/px", FS: fs, DBID: root.DBID(), Proxy: &po, Logger: quietLogger()})
	px.SetFetcher(&storeFetcher{src: root})
	replicate(t, root, px, 1) // one entry at a time: every value stored
	full := px.ProxyStats().CachedBytes
	if full != 200*1000 {
		t.Fatalf("stored %d bytes, want every value", full)
	}
	fs.free.Store(80 << 20) // below the soft limit
	waitFor(t, "evictions below the soft limit", func() bool { return px.ProxyStats().CachedBytes < full*8/10 })
	if !px.ProxyStats().SoftLimited || px.Metrics().ProxySoftLimited != 1 {
		t.Fatal("soft limit not reported")
	}
	fs.free.Store(40 << 20) // below the hard limit
	waitFor(t, "hard limit", func() bool { return px.ProxyStats().HardLimited })
	before := px.ProxyStats().CachedBytes
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%03d", i)
	}
	if _, got := lookupAll(t, px, keys...); len(got) != 200 {
		t.Fatalf("%d keys read below the hard limit", len(got))
	}
	waitFor(t, "refused admissions", func() bool { return px.Metrics().ProxyAdmissions["refused_hard_limit"] > 0 })
	if px.ProxyStats().CachedBytes > before {
		t.Fatal("values admitted below the hard limit")
	}
	fs.free.Store(1 << 30)
	waitFor(t, "limits lifted", func() bool { s := px.ProxyStats(); return !s.SoftLimited && !s.HardLimited })
	px.Lookup([][]byte{[]byte("k000")}, func(uint64, int, []byte, uint64, bool) error { return nil })
	mustVerify(t, px)
}

// TestProxyAdmissionOwnsItsKey: a caller may reuse its key buffer as soon
// as Lookup returns (the memcached door parses keys out of a reused
// request line); the admission queued by the fetch stores the key that
// was read, not what the buffer holds by then.
func TestProxyAdmissionOwnsItsKey(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Logger: quietLogger()})
	for i := 0; i < 20; i++ {
		mustWrite(t, root, setb(fmt.Sprintf("k%02d", i), pattern(i, 1000)))
	}
	px, _ := openProxy(t, root, ProxyOptions{Window: 1, CacheBytes: 1 << 20, EvictInterval: time.Hour})
	replicate(t, root, px, 20)
	admitted0 := px.Metrics().ProxyAdmissions["admitted"]
	buf := []byte("k05")
	if _, err := px.Lookup([][]byte{buf}, func(uint64, int, []byte, uint64, bool) error { return nil }); err != nil {
		t.Fatal(err)
	}
	copy(buf, "k06") // the caller's next request
	waitFor(t, "the admission", func() bool {
		return px.Metrics().ProxyAdmissions["admitted"] == admitted0+1
	})
	for _, k := range []string{"k05", "k06"} {
		rec, err := decodeRecord(rawGet(t, px, dataKey(nil, []byte(k))))
		if err != nil {
			t.Fatal(err)
		}
		if want := k == "k05"; (rec.kind == recRemote) == want {
			t.Fatalf("%s: stored locally %v, want %v", k, rec.kind != recRemote, want)
		}
	}
	mustVerify(t, px)
}

// tooLargeFetcher refuses every fetch as a value no replica can send.
type tooLargeFetcher struct{}

func (tooLargeFetcher) Fetch(context.Context, uint64, []FetchItem) error {
	return fmt.Errorf("%w: larger than a fetch answer can carry", ErrTooLarge)
}

// TestProxyFetchTooLargeIsFinal: a fetcher's ErrTooLarge reaches the
// reader as ErrTooLarge (a final answer), not as ErrUnavailable (a 503 to
// retry), and is counted as a read error.
func TestProxyFetchTooLargeIsFinal(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{ChunkBytes: 4096, Logger: quietLogger()})
	mustWrite(t, root, setb("big", pattern(1, 1000)))
	mustWrite(t, root, setb("other", pattern(2, 10)))
	px, _ := openProxy(t, root, ProxyOptions{Window: 1, CacheBytes: -1})
	replicate(t, root, px, 10)
	waitFor(t, "eviction down to the window", func() bool { return px.ProxyStats().CachedValues == 1 })
	px.SetFetcher(tooLargeFetcher{})
	before := px.Metrics().ProxyReadErrors
	_, err := px.Lookup([][]byte{[]byte("big")}, func(uint64, int, []byte, uint64, bool) error { return nil })
	if !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("read of a value too large to fetch: %v, want ErrTooLarge only", err)
	}
	if n := px.Metrics().ProxyReadErrors - before; n != 1 {
		t.Fatalf("read errors counted %v, want 1", n)
	}
}

// TestProxyCorruptRecordOverwriteKeepsCounts: a write that replaces a
// corrupt value record on a proxy (which repairs the key) uncounts the
// value the record held if it was stored here, and nothing if it was
// remote, so the cache counters stay exact (qs verify recounts them).
func TestProxyCorruptRecordOverwriteKeepsCounts(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Logger: quietLogger()})
	mustWrite(t, root, set("remote", "value fetched from replicas"))
	for i := 0; i < 5; i++ {
		mustWrite(t, root, set(fmt.Sprintf("f%d", i), "x"))
	}
	mustWrite(t, root, set("stored", "value stored in the window"))
	px, _ := openProxy(t, root, ProxyOptions{Window: 3, CacheBytes: 1 << 20, EvictInterval: time.Hour})
	replicate(t, root, px, 100)
	for k, remote := range map[string]bool{"remote": true, "stored": false} {
		dk := dataKey(nil, []byte(k))
		raw := rawGet(t, px, dk)
		if rec, err := decodeRecord(raw); err != nil || rec.kind == recRemote != remote {
			t.Fatalf("%s: remote=%v, want %v (%v)", k, rec.kind == recRemote, remote, err)
		}
		rawSet(t, px, dk, flip(raw, len(raw)-1)) // the value's last byte, or its CRC
	}
	before := px.ProxyStats()
	mustWrite(t, root, set("remote", "new"), set("stored", "new too"))
	replicate(t, root, px, 100)
	// Both new values are in the window: stored. The old stored one (26
	// bytes) left the counts; the remote one was never in them.
	want := ProxyStats{CachedValues: before.CachedValues - 1 + 2, CachedBytes: before.CachedBytes - 26 + 3 + 7}
	if st := px.ProxyStats(); st.CachedValues != want.CachedValues || st.CachedBytes != want.CachedBytes {
		t.Fatalf("after overwriting the corrupt records: %d values of %d bytes, want %d of %d",
			st.CachedValues, st.CachedBytes, want.CachedValues, want.CachedBytes)
	}
	mustVerify(t, px)
}
