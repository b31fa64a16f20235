package store

import (
	"fmt"
	"slices"
	"testing"

	"github.com/quicksilver-kv/qs/internal/cache"
)

// TestProxyShardWarmItems: the records to warm are the remote ones of
// the node's own shard not held in its budget, gathered in pieces of at
// most n keys and scan keys looked at; a warmed value that does not match
// its record is not held and counted as an integrity error, and its key
// is offered again.
func TestProxyShardWarmItems(t *testing.T) {
	t.Parallel()
	m, err := cache.NewShardMap(4)
	if err != nil {
		t.Fatal(err)
	}
	own, other := shardKeys(t, m, "n0", 6)
	root := openTest(t, Options{Logger: quietLogger()})
	for _, k := range append(slices.Clone(own), other...) {
		mustWrite(t, root, set(k, "value of "+k))
	}
	for i := 0; i < 5; i++ {
		mustWrite(t, root, set(fmt.Sprint("pad", i), "x"))
	}
	px, _ := openProxy(t, root, ProxyOptions{Window: 1, CacheBytes: -1, ShardCacheBytes: 1 << 20, Shards: m, NodeName: "n0"})
	replicate(t, root, px, 100)

	// No more than scan keys looked at, however many are asked for.
	if got, _, next, err := px.ShardWarmItems(nil, 100, 3); err != nil || len(got) > 3 || next == nil {
		t.Fatalf("scan of 3: %d items, next %q, %v; want at most 3 and more to come", len(got), next, err)
	}
	// In pieces: at most 2 keys, at most 3 looked at.
	var items []FetchItem
	var from []byte
	for i := 0; ; i++ {
		if i > 100 {
			t.Fatal("no end to the keys")
		}
		got, at, next, err := px.ShardWarmItems(from, 2, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 2 || at != px.AppliedIndex() {
			t.Fatalf("%d items at %d (applied %d)", len(got), at, px.AppliedIndex())
		}
		items = append(items, got...)
		if next == nil {
			break
		}
		from = next
	}
	var keys []string
	for _, it := range items {
		keys = append(keys, string(it.Key))
	}
	if !slices.Equal(keys, own) {
		t.Fatalf("keys to warm %v, want the node's shard %v", keys, own)
	}

	for i := range items {
		items[i].Value = []byte("value of " + string(items[i].Key))
	}
	items[0].Value = []byte("value of k?????")[:len(items[0].Value)] // same length, wrong bytes
	before := integrityErrors(px, "remote_value")
	if held, bad := px.PutShardWarm(items); held != len(items)-1 || bad != 1 {
		t.Fatalf("held %d, bad %d: want %d and 1", held, bad, len(items)-1)
	}
	if got := integrityErrors(px, "remote_value"); got != before+1 {
		t.Fatalf("integrity errors %v, want %v", got, before+1)
	}
	if _, ok := px.ShardValue(items[0].Key, items[0].Index); ok {
		t.Fatalf("the bad value of %s is held", items[0].Key)
	}
	if v, ok := px.ShardValue(items[1].Key, items[1].Index); !ok || string(v) != "value of "+string(items[1].Key) {
		t.Fatalf("the value of %s: %q, %v", items[1].Key, v, ok)
	}
	left, _, next, err := px.ShardWarmItems(nil, 100, 1000)
	if err != nil || next != nil || len(left) != 1 || string(left[0].Key) != own[0] {
		t.Fatalf("keys to warm after the put: %v, next %q, %v; want only %s", left, next, err, own[0])
	}
}

// TestProxyShardWarmItemsSkipsDamagedRecord: a record of the shard that
// fails its check is counted and passed over; the warm-up goes on with
// the keys after it rather than stopping there at every pass.
func TestProxyShardWarmItemsSkipsDamagedRecord(t *testing.T) {
	t.Parallel()
	m, err := cache.NewShardMap(4)
	if err != nil {
		t.Fatal(err)
	}
	own, _ := shardKeys(t, m, "n0", 4)
	root := openTest(t, Options{Logger: quietLogger()})
	for _, k := range own {
		mustWrite(t, root, set(k, "value of "+k))
	}
	for i := 0; i < 5; i++ {
		mustWrite(t, root, set(fmt.Sprint("pad", i), "x"))
	}
	px, _ := openProxy(t, root, ProxyOptions{Window: 1, CacheBytes: -1, ShardCacheBytes: 1 << 20, Shards: m, NodeName: "n0"})
	replicate(t, root, px, 100)
	k := dataKey(nil, []byte(own[1]))
	rawSet(t, px, k, flip(rawGet(t, px, k), recHeader+1))
	before := integrityErrors(px, "value_crc")
	items, _, next, err := px.ShardWarmItems(nil, 100, 1000)
	if err != nil || next != nil {
		t.Fatalf("next %q, %v: want the keys done", next, err)
	}
	var keys []string
	for _, it := range items {
		keys = append(keys, string(it.Key))
	}
	if want := []string{own[0], own[2], own[3]}; !slices.Equal(keys, want) {
		t.Fatalf("keys to warm %v, want %v (the damaged %s passed over)", keys, want, own[1])
	}
	if got := integrityErrors(px, "value_crc"); got != before+1 {
		t.Fatalf("value_crc integrity errors %v, want %v", got, before+1)
	}
}
