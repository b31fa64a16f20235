package store

import "github.com/quicksilver-kv/qs/internal/cache"

// The transient tier of a proxy store (ProxyOptions.TransientBytes): a
// value fetched for a reader is held in memory (internal/cache,
// Transient) and queued for the disk cache only when it is read again
// while held, or when its key was read twice recently. A value read once
// costs no disk write. The tier changes where a value is kept, never
// which version a reader sees: a held value is served only for a record
// of its version, after the record's length and CRC check, and stored
// only through the committer's check against the key's current record
// (prepareCache).

// offerFetched gives the transient tier a value just fetched and checked;
// it queues the value for the disk cache if the tier says so.
func (s *Store) offerFetched(a admission) {
	p := s.px
	d, evicted := p.transient.Offer(a.key, a.index, a.value)
	s.m.pxTransient.WithLabelValues(transientResult[d]).Inc()
	if evicted > 0 {
		s.m.pxTransient.WithLabelValues("evicted").Add(float64(evicted))
	}
	if d == cache.Store {
		p.admit(s.m, a)
	}
	s.publishTransient()
}

// transientResult names an Offer decision in proxy_transient_total.
var transientResult = map[cache.Decision]string{cache.Hold: "held", cache.Store: "stored", cache.Skip: "too_large"}

// takeTransient serves a remote record from the transient tier when it
// holds the record's version: the value's second read, so it is queued
// for the disk cache. A held value that does not match the record's
// length and CRC is never served (counted, and fetched instead).
func (s *Store) takeTransient(key []byte, rec record) ([]byte, bool) {
	p := s.px
	val, ok := p.transient.Take(key, rec.index)
	if !ok {
		// A value of this node's own shard is held apart (the shard
		// budget); it stays in memory.
		return s.takeShard(key, rec)
	}
	if it := fetchItem(key, rec); !it.Check(val) {
		s.m.integrityErrors.WithLabelValues("transient_value").Inc()
		s.publishTransient()
		return nil, false
	}
	s.m.pxTransient.WithLabelValues("read_again").Inc()
	p.admit(s.m, admission{key: append([]byte(nil), key...), index: rec.index, value: val})
	s.publishTransient()
	return val, true
}

// promoteTransient queues version index of key for the disk cache if the
// transient tier holds it: the key was read again (from the read cache).
func (s *Store) promoteTransient(key []byte, index uint64) {
	p := s.px
	val, ok := p.transient.Take(key, index)
	if !ok {
		return
	}
	s.m.pxTransient.WithLabelValues("read_again").Inc()
	p.admit(s.m, admission{key: append([]byte(nil), key...), index: index, value: val})
	s.publishTransient()
}

// publishTransient exports what the transient tier holds.
func (s *Store) publishTransient() {
	st := s.px.transient.Stats()
	s.m.pxTransientValues.Set(float64(st.Values))
	s.m.pxTransientBytes.Set(float64(st.Bytes))
}

// OfferPrefetched gives the transient tier a value published by a relay
// of this proxy's data centre: version index of key, read by another
// proxy; a value of this node's own L2 shard goes to the shard budget
// instead. It reports whether either holds it. Nothing is checked here,
// and nothing needs to be: the value is served only for a record naming
// that version, after that record's length and CRC check (takeTransient),
// so a value of a version this proxy has not applied yet, or has already
// replaced, is never served. The store keeps its own copies of key and
// value.
func (s *Store) OfferPrefetched(key []byte, index uint64, value []byte) bool {
	p := s.px
	if p == nil || !p.transient.Enabled() && !p.ownsShard(key) || index == 0 {
		return false
	}
	kv := make([]byte, len(key)+len(value))
	copy(kv, key)
	copy(kv[len(key):], value)
	if s.putShard(kv[:len(key):len(key)], index, kv[len(key):]) {
		// Of this node's shard: held apart, for itself and the others.
		return true
	}
	held, evicted := p.transient.Prefetch(kv[:len(key):len(key)], index, kv[len(key):])
	if held {
		s.m.pxTransient.WithLabelValues("prefetched").Inc()
	}
	if evicted > 0 {
		s.m.pxTransient.WithLabelValues("evicted").Add(float64(evicted))
	}
	s.publishTransient()
	return held
}
