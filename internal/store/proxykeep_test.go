package store

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/cache"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// TestProxySweepPassesOverDamagedRecord: the CLOCK hand gives up the
// stored values outside the window that were not read since it last
// passed, passes over a value record that fails its check (leaving it
// as it is), and completes its turn.
func TestProxySweepPassesOverDamagedRecord(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Logger: quietLogger()})
	keys := []string{"k0", "k1", "k2", "k3", "k4"}
	for _, k := range keys {
		mustWrite(t, root, set(k, "value of "+k))
	}
	for i := 0; i < 3; i++ {
		mustWrite(t, root, set(fmt.Sprint("pad", i), "x"))
	}
	// A budget and free-space limits the keeper never sweeps for: the
	// rounds are the test's.
	px, _ := openProxy(t, root, ProxyOptions{Window: 1, CacheBytes: 1 << 30, SoftFreeBytes: 1, HardFreeBytes: 1})
	replicate(t, root, px, 100)
	lookupAll(t, px, keys...) // fetched, then admitted: stored outside the window
	waitFor(t, "admissions", func() bool { return px.Metrics().ProxyAdmissions["admitted"] == float64(len(keys)) })
	k := dataKey(nil, []byte("k2"))
	damaged := flip(rawGet(t, px, k), recHeader+1)
	rawSet(t, px, k, damaged)

	bad := func() float64 { return px.Metrics().IntegrityErrors["value_crc"] }
	before := bad()
	victims, next, cycled := px.sweep(cache.Hand{}, 1<<40)
	if len(victims) != 0 || next.At != nil || !cycled {
		t.Fatalf("first turn: %d victims, next %q, cycled %v; want none (every value was just read), a whole turn", len(victims), next.At, cycled)
	}
	victims, next, cycled = px.sweep(cache.Hand{}, 1<<40)
	var got []string
	for _, v := range victims {
		got = append(got, fmt.Sprintf("%s@%d", v.key, v.index))
	}
	var want []string
	for _, k := range []string{"k0", "k1", "k3", "k4"} {
		want = append(want, fmt.Sprintf("%s@%d", k, keyIndex(t, root, k)))
	}
	if !slices.Equal(got, want) || next.At != nil || !cycled {
		t.Fatalf("second turn gave up %v (next %q, cycled %v); want %v, a whole turn", got, next.At, cycled, want)
	}
	if !bytes.Equal(rawGet(t, px, k), damaged) {
		t.Fatal("the sweep changed the damaged record")
	}
	if got := bad() - before; got != 2 {
		t.Fatalf("two turns over the damaged record counted %v integrity errors, want 2", got)
	}
	// A round that frees what it needs stops there, and says where the
	// next one goes on from.
	victims, next, cycled = px.sweep(cache.Hand{}, 1)
	if len(victims) != 1 || string(victims[0].key) != "k0" || string(next.At) != "k1" || cycled {
		t.Fatalf("a round needing 1 byte: %d victims, next %q, cycled %v; want k0, then k1", len(victims), next.At, cycled)
	}
}

// TestProxyFullCacheAdmitsNothing: once a whole turn of the hand leaves
// the cache over its budget (what is stored is the window's), fetched
// values are served but not admitted (each would cost a disk write and
// a turn to give it up again), and counted as refused_full. When the
// window moves on and a sweep brings the cache within its budget,
// admissions resume.
func TestProxyFullCacheAdmitsNothing(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Logger: quietLogger()})
	var keys []string
	for i := 0; i < 20; i++ {
		keys = append(keys, fmt.Sprintf("k%02d", i))
		mustWrite(t, root, setb(keys[i], pattern(i, 100)))
	}
	// The window's 3 values of 1000 bytes are over the 1500-byte budget.
	for i := 0; i < 3; i++ {
		mustWrite(t, root, setb(fmt.Sprint("big", i), pattern(i, 1000)))
	}
	px, f := openProxy(t, root, ProxyOptions{Window: 3, CacheBytes: 1500, EvictInterval: time.Millisecond})
	replicate(t, root, px, 23)
	check := func(keys []string) {
		t.Helper()
		_, got := lookupAll(t, px, keys...)
		for _, k := range keys {
			var i int
			fmt.Sscanf(k, "k%02d", &i)
			if got[k] != string(pattern(i, 100)) {
				t.Fatalf("%s read %q", k, got[k])
			}
		}
	}
	check(keys[:5])
	offered := func() float64 {
		a := px.Metrics().ProxyAdmissions
		return a["admitted"] + a["stale"] + a["refused_full"] + a["dropped"]
	}
	waitFor(t, "the keeper to find the cache full", func() bool { return px.px.full.Load() && offered() == 5 })
	admitted := px.Metrics().ProxyAdmissions["admitted"]
	refused := px.Metrics().ProxyAdmissions["refused_full"]
	fetched := f.keys.Load()
	check(keys[5:10])
	if got := f.keys.Load() - fetched; got != 5 {
		t.Fatalf("fetched %d keys while full, want 5", got)
	}
	if got := px.Metrics().ProxyAdmissions["refused_full"] - refused; got != 5 {
		t.Fatalf("refused_full went up by %v, want 5", got)
	}
	if got := px.Metrics().ProxyAdmissions["admitted"]; got != admitted {
		t.Fatalf("admitted %v values while full (before: %v)", got, admitted)
	}

	// Small values move the window on: the big ones leave it, a sweep
	// gives them up, the cache is within its budget again.
	for i := 0; i < 3; i++ {
		mustWrite(t, root, set(fmt.Sprint("small", i), "x"))
	}
	replicate(t, root, px, 26)
	waitFor(t, "the cache within its budget", func() bool { return px.ProxyStats().CachedBytes <= 1500 && !px.px.full.Load() })
	check(keys[10:12])
	waitFor(t, "admissions again", func() bool { return px.Metrics().ProxyAdmissions["admitted"] >= admitted+2 })
	mustVerify(t, px)
}

// TestProxyNoBudgetKeepsOnlyTheWindow: a negative budget keeps only the
// window: after the keeper's first turn no fetched value is written.
func TestProxyNoBudgetKeepsOnlyTheWindow(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Logger: quietLogger()})
	for i := 0; i < 10; i++ {
		mustWrite(t, root, set(fmt.Sprintf("k%d", i), fmt.Sprint("value ", i)))
	}
	px, _ := openProxy(t, root, ProxyOptions{Window: 1, CacheBytes: -1, EvictInterval: time.Millisecond})
	replicate(t, root, px, 10)
	lookupAll(t, px, "k0")
	waitFor(t, "the keeper to find the cache full", func() bool {
		a := px.Metrics().ProxyAdmissions
		return px.px.full.Load() && a["admitted"]+a["stale"]+a["refused_full"]+a["dropped"] == 1
	})
	admitted := px.Metrics().ProxyAdmissions["admitted"]
	refused := px.Metrics().ProxyAdmissions["refused_full"]
	for i := 1; i < 9; i++ {
		if _, got := lookupAll(t, px, fmt.Sprintf("k%d", i)); got[fmt.Sprintf("k%d", i)] != fmt.Sprint("value ", i) {
			t.Fatalf("k%d read %v", i, got)
		}
	}
	if got := px.Metrics().ProxyAdmissions["admitted"]; got != admitted {
		t.Fatalf("%v values admitted without a budget", got-admitted)
	}
	if got := px.Metrics().ProxyAdmissions["refused_full"] - refused; got != 8 {
		t.Fatalf("refused_full went up by %v, want 8", got)
	}
}

// TestProxySweepTurnsOverManyRecords: with more value records than one
// round of the hand looks at, and nothing it may evict (every stored
// value is the window's), the hand's turns still end (counted) and the
// cache is found full, so the keeper's pacer idles instead of sweeping
// on every tick.
func TestProxySweepTurnsOverManyRecords(t *testing.T) {
	t.Parallel()
	root := openTest(t, Options{Logger: quietLogger()})
	n := cache.MaxSweepKeys + 500
	for b := 0; b < n; b += 5000 {
		var ops []wal.Op
		for i := b; i < min(n, b+5000); i++ {
			ops = append(ops, wal.Op{Type: wal.OpSet, Key: fmt.Appendf(nil, "k%06d", i), Value: []byte("v")})
		}
		if _, err := root.Write(context.Background(), Batch{Ops: ops}); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, root, setb("big", pattern(1, 1000)))
	px, _ := openProxy(t, root, ProxyOptions{Window: 1, CacheBytes: 100, EvictInterval: time.Millisecond})
	replicate(t, root, px, int(root.AppliedIndex()))
	waitFor(t, "two whole turns", func() bool { return px.Metrics().ProxySweepTurns >= 2 })
	waitFor(t, "the cache found full", func() bool { return px.Metrics().ProxyFull == 1 })
}
