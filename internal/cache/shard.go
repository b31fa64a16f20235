package cache

import (
	"fmt"
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

// The shard map of a data centre's L2 cache. Every byte string (a key, a
// node's name) has a logical shard: the top LogicalBits bits of its
// XXH64 (seed 0). A data centre of N physical shards (a power of two, at
// most LogicalShards) groups them: physical = logical >> (LogicalBits −
// log2 N). A node owns the physical shard of its node name, and keeps the
// keys of that shard. Doubling N splits every physical shard in two and
// moves no key to another pair: the keys of new shard s are a subset of
// those of old shard s/2.

// LogicalBits is the width of a logical shard number.
const LogicalBits = 10

// LogicalShards is the number of logical shards, and the most physical
// shards a data centre can have.
const LogicalShards = 1 << LogicalBits

// LogicalShard returns the logical shard of b.
func LogicalShard(b []byte) int {
	return int(xxhash.Sum64(b) >> (64 - LogicalBits))
}

// ShardMap maps byte strings to the physical shards of a data centre.
// The zero value has one shard.
type ShardMap struct {
	shift uint // LogicalBits − log2 N
	count int  // N; 0 means 1
}

// NewShardMap returns the map of n physical shards: a power of two from
// 1 to LogicalShards.
func NewShardMap(n int) (ShardMap, error) {
	if n < 1 || n > LogicalShards || n&(n-1) != 0 {
		return ShardMap{}, fmt.Errorf("cache: %d shards: want a power of two from 1 to %d", n, LogicalShards)
	}
	return ShardMap{shift: uint(LogicalBits - bits.TrailingZeros(uint(n))), count: n}, nil
}

// Count returns the number of physical shards.
func (m ShardMap) Count() int { return max(m.count, 1) }

// Of returns the physical shard of b.
func (m ShardMap) Of(b []byte) int {
	if m.count <= 1 {
		return 0
	}
	return LogicalShard(b) >> m.shift
}

// OfNode returns the physical shard a node of that name owns.
func (m ShardMap) OfNode(name string) int { return m.Of([]byte(name)) }

// Owns reports whether the node named node keeps key.
func (m ShardMap) Owns(node string, key []byte) bool { return m.OfNode(node) == m.Of(key) }

// OwnShard is the shard of its data centre's L2 cache that a node keeps:
// the physical shard of its name. A node without a name keeps none.
type OwnShard struct {
	named bool
	shard int
	m     ShardMap
}

// Own returns the shard the node named node keeps.
func (m ShardMap) Own(node string) OwnShard {
	return OwnShard{named: node != "", shard: m.OfNode(node), m: m}
}

// Named reports whether the node has a name, and so a shard.
func (o OwnShard) Named() bool { return o.named }

// Keeps reports whether key is of the node's shard.
func (o OwnShard) Keeps(key []byte) bool { return o.named && o.m.Of(key) == o.shard }
