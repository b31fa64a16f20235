package cache

import (
	"fmt"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestShardMapRejectsBadCounts(t *testing.T) {
	for _, n := range []int{0, -1, 3, 6, 1000, 2048, 1 << 20} {
		if _, err := NewShardMap(n); err == nil {
			t.Errorf("%d shards accepted", n)
		}
	}
	for n := 1; n <= LogicalShards; n *= 2 {
		m, err := NewShardMap(n)
		if err != nil || m.Count() != n {
			t.Fatalf("%d shards: %v, count %d", n, err, m.Count())
		}
	}
	if (ShardMap{}).Count() != 1 || (ShardMap{}).Of([]byte("k")) != 0 {
		t.Fatal("the zero map is not one shard")
	}
}

// TestShardOfIsTopBitsOfXXH64: the logical shard is the top 10 bits of
// XXH64 with seed 0, and the physical shard its top log2 N bits.
func TestShardOfIsTopBitsOfXXH64(t *testing.T) {
	// XXH64("", seed 0) = 0xef46db3751d8e999: logical shard 0x3bd.
	if got := LogicalShard(nil); got != 0x3bd {
		t.Fatalf("logical shard of the empty string %#x, want 0x3bd", got)
	}
	m4, _ := NewShardMap(4)
	m1024, _ := NewShardMap(1024)
	for i := range 1000 {
		k := []byte(fmt.Sprintf("key/%d", i))
		h := xxhash.Sum64(k)
		if m4.Of(k) != int(h>>62) || m1024.Of(k) != int(h>>54) || m1024.Of(k) != LogicalShard(k) {
			t.Fatalf("%s: shards %d/%d for hash %#x", k, m4.Of(k), m1024.Of(k), h)
		}
	}
	if !m4.Owns("node-a", []byte("node-a")) || m4.OfNode("node-a") != m4.Of([]byte("node-a")) {
		t.Fatal("a node does not own its own name's shard")
	}
}

// TestShardDoublingOnlySplits: after doubling N, the keys of every new
// shard are a subset of the keys of the shard its node owned before, so
// a node whose shard is split keeps what it cached. Every shard of every
// N gets keys (the hash spreads them).
func TestShardDoublingOnlySplits(t *testing.T) {
	keys := make([][]byte, 20000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("app/%d/config", i))
	}
	for n := 1; n < LogicalShards; n *= 2 {
		before, _ := NewShardMap(n)
		after, _ := NewShardMap(2 * n)
		for _, k := range keys {
			if s := after.Of(k); s>>1 != before.Of(k) {
				t.Fatalf("n %d→%d: %s moved from shard %d to %d", n, 2*n, k, before.Of(k), s)
			}
		}
		// Every node: its cached keys (shard before) ⊇ its new shard's.
		for i := range 64 {
			node := fmt.Sprintf("node-%d", i)
			for _, k := range keys {
				if after.Owns(node, k) && !before.Owns(node, k) {
					t.Fatalf("n %d→%d: %s owns %s after, not before", n, 2*n, node, k)
				}
			}
		}
	}
	m, _ := NewShardMap(16)
	var count [16]int
	for _, k := range keys {
		count[m.Of(k)]++
	}
	for s, c := range count {
		if c == 0 {
			t.Fatalf("shard %d of 16 has no key of %d", s, len(keys))
		}
	}
}

func TestOwnShardKeepsItsNodesKeys(t *testing.T) {
	m, _ := NewShardMap(8)
	own := m.Own("node-a")
	if !own.Named() {
		t.Fatal("a named node has no shard")
	}
	kept := 0
	for i := range 1000 {
		k := []byte(fmt.Sprintf("key/%d", i))
		if own.Keeps(k) != m.Owns("node-a", k) {
			t.Fatalf("%s: Keeps %v, Owns %v", k, own.Keeps(k), m.Owns("node-a", k))
		}
		if own.Keeps(k) {
			kept++
		}
	}
	if kept == 0 || kept == 1000 {
		t.Fatalf("the node keeps %d keys of 1000 in 8 shards", kept)
	}
	// A node without a name keeps no key, not even those of the empty
	// string's shard.
	anon := m.Own("")
	if anon.Named() || anon.Keeps(nil) || anon.Keeps([]byte("key/1")) {
		t.Fatal("a node without a name keeps keys")
	}
	// One shard: a named node keeps every key.
	if one := (ShardMap{}).Own("node-a"); !one.Keeps([]byte("anything")) {
		t.Fatal("the node of a one-shard map does not keep every key")
	}
}
