package store

import (
	"time"

	"github.com/quicksilver-kv/qs/internal/cache"
)

// The shard budget of a proxy store (ProxyOptions.ShardCacheBytes): the
// values of the keys of this node's own shard of its data centre's L2
// cache, held in memory (internal/cache, ShardCache). It is filled from
// this node's fetches and from the prefetch stream, read by this node as
// part of its own cache (L1), and answers the L2 requests of the other
// nodes of the data centre (ShardValue). Like the transient tier it
// changes where a value is kept, never which version a reader sees: a
// held value is served for exactly the version it is, after the check of
// a record of that version (this node's, or the asking node's).

// putShard holds version index of key in the shard budget if the key is
// of this node's shard. key and value must not change afterwards.
func (s *Store) putShard(key []byte, index uint64, value []byte) bool {
	p := s.px
	if !p.ownsShard(key) {
		return false
	}
	held, evicted := p.shard.Put(key, index, value)
	if held {
		s.m.pxShard.WithLabelValues("put").Inc()
	}
	if evicted > 0 {
		s.m.pxShard.WithLabelValues("evicted").Add(float64(evicted))
	}
	s.m.pxShardBytes.Set(float64(p.shard.Stats().Bytes))
	return held
}

// takeShard serves a remote record of this node's shard from the shard
// budget when it holds the record's version and the value matches the
// record's length, CRC and digest. A value that does not is dropped and
// counted, and the key is fetched instead.
func (s *Store) takeShard(key []byte, rec record) ([]byte, bool) {
	p := s.px
	if !p.ownsShard(key) {
		return nil, false
	}
	val, r := p.shard.Get(key, rec.index)
	if r != cache.ShardHit {
		return nil, false
	}
	if it := fetchItem(key, rec); !it.Check(val) {
		s.dropShard(key, rec.index)
		return nil, false
	}
	return val, true
}

func (s *Store) dropShard(key []byte, index uint64) {
	s.px.shard.Drop(key, index)
	s.m.pxShard.WithLabelValues("mismatch").Inc()
	s.m.integrityErrors.WithLabelValues("shard_value").Inc()
	s.m.pxShardBytes.Set(float64(s.px.shard.Stats().Bytes))
}

// ShardValue answers another node's L2 request: version index of key, if
// this node holds it in memory or on disk. It never fetches. When this
// node's record of the key names that version, the value is checked
// against it (a stored value by its chunks' CRCs, a held one by the
// record's length, CRC and digest); when this node is behind or ahead of
// the asking node, the shard budget answers the exact version it holds,
// and the asking node checks it against its own record. Any other
// version, or none, is a miss (false). The value must not be changed.
func (s *Store) ShardValue(key []byte, index uint64) ([]byte, bool) {
	p := s.px
	if p == nil || index == 0 {
		return nil, false
	}
	val, ok := s.shardValue(key, index)
	if ok {
		p.shardServed.Add(1)
		s.m.pxShard.WithLabelValues("served").Inc()
	} else {
		p.shardMissed.Add(1)
		s.m.pxShard.WithLabelValues("missed").Inc()
	}
	return val, ok
}

func (s *Store) shardValue(key []byte, index uint64) ([]byte, bool) {
	p := s.px
	v, _, err := s.AsOfView()
	if err != nil {
		return nil, false
	}
	defer v.Close()
	raw, found, err := v.record(key)
	if err != nil {
		return nil, false
	}
	if found {
		rec, err := decodeRecord(raw)
		if err != nil {
			s.m.integrityErrors.WithLabelValues("value_crc").Inc()
			return nil, false
		}
		if rec.index == index {
			if rec.kind != recRemote {
				it, err := v.value(key, rec) // never a fetch: the value is stored here
				if err != nil {
					return nil, false
				}
				return append([]byte(nil), it.Value...), true
			}
			val, r := p.shard.Get(key, index)
			if r != cache.ShardHit {
				return nil, false
			}
			if it := fetchItem(key, rec); !it.Check(val) {
				s.dropShard(key, index)
				return nil, false
			}
			return val, true
		}
	}
	val, r := p.shard.Get(key, index)
	return val, r == cache.ShardHit
}

// CountTier counts, for the tier named (l2, l3), the values a proxy read
// found there and those it did not, and the time the fetch took.
func (s *Store) CountTier(tier string, hits, misses int, d time.Duration) {
	if s.px == nil {
		return
	}
	if hits > 0 {
		s.m.pxTiers.WithLabelValues(TierResult{tier, "hit"}).Add(float64(hits))
	}
	if misses > 0 {
		s.m.pxTiers.WithLabelValues(TierResult{tier, "miss"}).Add(float64(misses))
	}
	s.m.pxTierSeconds.WithLabelValues(tier).Observe(d.Seconds())
}
