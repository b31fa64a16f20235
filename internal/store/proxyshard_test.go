package store

import (
	"fmt"
	"testing"

	"github.com/quicksilver-kv/qs/internal/cache"
)

// shardKeys returns n keys of node's shard and n of other shards.
func shardKeys(t *testing.T, m cache.ShardMap, node string, n int) (own, other []string) {
	t.Helper()
	for i := 0; len(own) < n || len(other) < n; i++ {
		if i > 100000 {
			t.Fatal("no keys found for the shard")
		}
		k := fmt.Sprintf("k%05d", i)
		if m.Owns(node, []byte(k)) {
			if len(own) < n {
				own = append(own, k)
			}
		} else if len(other) < n {
			other = append(other, k)
		}
	}
	return own, other
}

func keyIndex(t *testing.T, s *Store, key string) uint64 {
	t.Helper()
	rec, err := decodeRecord(rawGet(t, s, dataKey(nil, []byte(key))))
	if err != nil {
		t.Fatal(err)
	}
	return rec.index
}

// TestProxyShardBudgetKeepsOwnShard: values a proxy fetches of its own
// shard are held in the shard budget: read again from there (no fetch),
// and answered to L2 requests for exactly their version; values of other
// shards are not held, a value not here is not fetched for the asker,
// and another version is a miss.
func TestProxyShardBudgetKeepsOwnShard(t *testing.T) {
	t.Parallel()
	m, err := cache.NewShardMap(4)
	if err != nil {
		t.Fatal(err)
	}
	own, other := shardKeys(t, m, "n0", 5)
	root := openTest(t, Options{Logger: quietLogger()})
	mustWrite(t, root, set("first", "x")) // every version asked below is ≥ 1
	for _, k := range append(append([]string(nil), own...), other...) {
		mustWrite(t, root, set(k, "value of "+k))
	}
	for i := 0; i < 5; i++ {
		mustWrite(t, root, set(fmt.Sprint("pad", i), "x"))
	}
	px, f := openProxy(t, root, ProxyOptions{Window: 1, CacheBytes: -1, ShardCacheBytes: 1 << 20, Shards: m, NodeName: "n0"})
	replicate(t, root, px, 100)
	all := append(append([]string(nil), own...), other[:4]...) // other[4] is never read
	if _, got := lookupAll(t, px, all...); len(got) != len(all) {
		t.Fatalf("read %d of %d keys", len(got), len(all))
	}
	if st := px.ProxyStats(); st.ShardValues != int64(len(own)) {
		t.Fatalf("shard budget holds %d values, want the %d of its shard", st.ShardValues, len(own))
	}
	fetched := f.keys.Load()
	if _, got := lookupAll(t, px, own...); got[own[0]] != "value of "+own[0] {
		t.Fatalf("second read %q", got[own[0]])
	}
	if f.keys.Load() != fetched {
		t.Fatalf("values of the node's own shard were fetched again (%d → %d)", fetched, f.keys.Load())
	}
	idx := keyIndex(t, px, own[0])
	if v, ok := px.ShardValue([]byte(own[0]), idx); !ok || string(v) != "value of "+own[0] {
		t.Fatalf("L2 request of the version held: %q, %v", v, ok)
	}
	for _, i := range []uint64{idx - 1, idx + 1} {
		if v, ok := px.ShardValue([]byte(own[0]), i); ok {
			t.Fatalf("L2 request of version %d (held: %d) answered %q", i, idx, v)
		}
	}
	if v, ok := px.ShardValue([]byte(other[4]), keyIndex(t, px, other[4])); ok {
		t.Fatalf("a value never fetched here answered %q (the owner never fetches)", v)
	}
	if v, ok := px.ShardValue([]byte(own[0]), 0); ok {
		t.Fatalf("version 0 answered %q", v)
	}
	st := px.ProxyStats()
	if st.ShardServed != 1 || st.ShardMissed != 3 {
		t.Fatalf("served %d, missed %d; want 1, 3", st.ShardServed, st.ShardMissed)
	}

	// A newer version written: the node answers the new one from its
	// window, and still the old one (an asking node behind it checks it
	// against its own record); never one for the other.
	mustWrite(t, root, set(own[0], "new value"))
	replicate(t, root, px, 100)
	nidx := keyIndex(t, px, own[0])
	if v, ok := px.ShardValue([]byte(own[0]), nidx); !ok || string(v) != "new value" {
		t.Fatalf("L2 request of the new version: %q, %v", v, ok)
	}
	if v, ok := px.ShardValue([]byte(own[0]), idx); !ok || string(v) != "value of "+own[0] {
		t.Fatalf("L2 request of the old version: %q, %v", v, ok)
	}
}

// TestProxyShardBudgetNeverServesAMismatch: a value of the node's shard
// that does not match the key's record (here a prefetched one claiming
// the record's version) is neither read nor answered to an L2 request;
// it is dropped and counted, and the read fetches the right value.
func TestProxyShardBudgetNeverServesAMismatch(t *testing.T) {
	t.Parallel()
	m, _ := cache.NewShardMap(2)
	own, _ := shardKeys(t, m, "n0", 1)
	root := openTest(t, Options{Logger: quietLogger()})
	mustWrite(t, root, set(own[0], "the right value"))
	for i := 0; i < 5; i++ {
		mustWrite(t, root, set(fmt.Sprint("pad", i), "x"))
	}
	px, f := openProxy(t, root, ProxyOptions{Window: 1, CacheBytes: -1, ShardCacheBytes: 1 << 20, Shards: m, NodeName: "n0"})
	replicate(t, root, px, 100)
	idx := keyIndex(t, px, own[0])
	if !px.OfferPrefetched([]byte(own[0]), idx, []byte("the wrong value")) {
		t.Fatal("a prefetched value of the node's shard was not held")
	}
	if v, ok := px.ShardValue([]byte(own[0]), idx); ok {
		t.Fatalf("L2 request answered a value that does not match the record: %q", v)
	}
	if n := px.Metrics().ProxyShardCache["mismatch"]; n != 1 {
		t.Fatalf("proxy_shard_cache_total{mismatch} = %v, want 1", n)
	}
	px.OfferPrefetched([]byte(own[0]), idx, []byte("the wrong value"))
	if _, got := lookupAll(t, px, own[0]); got[own[0]] != "the right value" {
		t.Fatalf("read %q", got[own[0]])
	}
	if f.keys.Load() != 1 {
		t.Fatalf("%d fetches, want 1", f.keys.Load())
	}
	if n := px.Metrics().IntegrityErrors["shard_value"]; n != 2 {
		t.Fatalf("integrity errors of shard values %v, want 2", n)
	}
}

func TestProxyShardOptionValidated(t *testing.T) {
	t.Parallel()
	po := (&ProxyOptions{ShardCacheBytes: -1}).withDefaults()
	if err := po.validate(); err == nil {
		t.Fatal("a negative shard budget was accepted")
	}
}
