package store

// Warming a proxy's shard budget: a proxy that starts, or whose shard
// budget is not full, fetches the values of its own shard that it holds
// neither on disk nor in the budget, so that the other nodes of its data
// centre find in L2 even keys no node has read yet. The pacing and the
// fetching are the caller's (internal/proxy, ShardWarmer); here are the
// records to warm and the checked put.

// ShardWarmItems returns up to n records of this node's own shard, from
// key from on (nil: the first key), whose values are remote here and
// not held in the shard budget, with the view index they are current
// at. It looks at no more than scan keys; next is the key to go on from,
// nil when the keys are done. A record that fails its check is counted
// (integrity error value_crc) and passed over. Without a shard budget it
// returns nothing.
func (s *Store) ShardWarmItems(from []byte, n, scan int) (items []FetchItem, at uint64, next []byte, err error) {
	p := s.px
	if p == nil || !p.shard.Enabled() || !p.own.Named() || n <= 0 || scan <= 0 {
		return nil, 0, nil, nil
	}
	v, err := s.View()
	if err != nil {
		return nil, 0, nil, err
	}
	defer v.Close()
	at = v.Index()
	ok := v.it.SeekGE(dataKey(nil, from))
	for seen := 0; ok && v.it.Key()[0] == prefixData; ok = v.it.Next() {
		if seen == scan || len(items) == n {
			return items, at, append([]byte(nil), v.it.Key()[1:]...), nil
		}
		seen++
		key := v.it.Key()[1:]
		if !p.ownsShard(key) {
			continue
		}
		raw, err := v.it.ValueAndErr()
		if err != nil {
			return nil, 0, nil, err
		}
		rec, err := decodeRecord(raw)
		if err != nil {
			// Counted and passed over, as the eviction scan does: the
			// key's reads report it; the keys after it are still warmed.
			s.m.integrityErrors.WithLabelValues("value_crc").Inc()
			continue
		}
		if rec.kind != recRemote || p.shard.Holds(key, rec.index) {
			continue
		}
		items = append(items, fetchItem(append([]byte(nil), key...), rec))
	}
	return items, at, nil, v.it.Error()
}

// PutShardWarm holds the fetched values of items (from ShardWarmItems)
// in the shard budget. A value that does not match its record is not
// held and counted (bad). The store keeps the items' keys and values.
func (s *Store) PutShardWarm(items []FetchItem) (held, bad int) {
	for i := range items {
		it := &items[i]
		if !it.Check(it.Value) {
			s.m.integrityErrors.WithLabelValues("remote_value").Inc()
			bad++
			continue
		}
		if s.putShard(it.Key, it.Index, it.Value) {
			held++
		}
	}
	return held, bad
}

// ShardRoom is the bytes the shard budget holds and may hold, and the
// values it holds.
func (s *Store) ShardRoom() (bytes, budget, values int64) {
	if s.px == nil {
		return 0, 0, 0
	}
	st := s.px.shard.Stats()
	return st.Bytes, st.Budget, st.Values
}
