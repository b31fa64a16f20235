package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
)

// Reads on a proxy store. They keep every guarantee of a replica's reads:
// one view index per answer, no answer below an index already returned,
// values exactly as the log wrote them. A value the proxy does not hold is
// fetched as the version its record names, at the view's index, and
// checked against the record's length and CRC (see proxy.go).

// fetch gets the values of items, all versions current at index at, and
// checks each against its record. It queues them for admission.
func (s *Store) fetch(at uint64, items []FetchItem) error {
	p := s.px
	f := p.fetcher.Load()
	if f == nil {
		s.m.pxReadErrors.Inc()
		return fmt.Errorf("%w: the proxy has no replicas to fetch from", ErrUnavailable)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.FetchTimeout)
	defer cancel()
	if err := (*f).Fetch(ctx, at, items); err != nil {
		s.m.pxReadErrors.Inc()
		if errors.Is(err, ErrTooLarge) {
			// Final (a value no replica can send): not a 503 to retry.
			return fmt.Errorf("%d values at index %d: %w", len(items), at, err)
		}
		return fmt.Errorf("%w: %d values at index %d: %v", ErrUnavailable, len(items), at, err)
	}
	for i := range items {
		it := &items[i]
		if !it.Check(it.Value) {
			// The fetcher checks too; this is the last line.
			s.m.integrityErrors.WithLabelValues("remote_value").Inc()
			return fmt.Errorf("%w: key %q: fetched value does not match its record (length %d, want %d; or another CRC or digest)", ErrCorrupt, it.Key, len(it.Value), it.Len)
		}
		// The admission outlives the request: its own copy of the key (the
		// caller's may be a reused request buffer) and of the value (a slice
		// of the fetch answer's frame, up to 64 MiB).
		kv := make([]byte, len(it.Key)+len(it.Value))
		copy(kv, it.Key)
		copy(kv[len(it.Key):], it.Value)
		s.offerFetched(admission{key: kv[:len(it.Key):len(it.Key)], index: it.Index, value: kv[len(it.Key):]})
		s.putShard(kv[:len(it.Key):len(it.Key)], it.Index, kv[len(it.Key):])
	}
	s.m.pxMisses.Add(float64(len(items)))
	p.l1Miss.Add(float64(len(items)))
	p.fetched.Add(int64(len(items)))
	return nil
}

// fetchOne gets one remote value for a view (View.Get, View.Scan of a
// single key); the view stays open meanwhile.
func (v *View) fetchOne(key []byte, rec record) (Item, error) {
	if val, ok := v.s.takeTransient(key, rec); ok {
		v.vbuf = append(v.vbuf[:0], val...)
		return Item{Value: v.vbuf, Index: rec.index, Flags: rec.attrs.flags, Expires: rec.attrs.expires}, nil
	}
	items := []FetchItem{fetchItem(key, rec)}
	if err := v.s.fetch(v.index, items); err != nil {
		return Item{}, err
	}
	v.vbuf = append(v.vbuf[:0], items[0].Value...)
	return Item{Value: v.vbuf, Index: rec.index, Flags: rec.attrs.flags, Expires: rec.attrs.expires}, nil
}

// proxyAnswer is one key of a proxy lookup. The client flags of a fetched
// value come from the proxy's own record: only the value is fetched.
type proxyAnswer struct {
	item  Item
	found bool
	fetch int // index into the fetch items, or -1
}

// lookupProxy is Lookup on a proxy store: the read cache first, then a
// view; values the view only knows the version of are fetched after the
// view is closed (local values are copied), so a slow replica never keeps
// a view open.
func (s *Store) lookupProxy(keys [][]byte, fn func(at uint64, i int, it Item, found bool) error) (uint64, error) {
	a := s.applied.Load()
	var hits [8]cacheHit
	_, done, err := s.lookupCached(keys, a, hits[:0], func(at uint64, i int, it Item, found bool) error {
		s.countProxy(keys[i], it.Index, found, false)
		return fn(at, i, it, found)
	})
	if done || err != nil {
		return a, err
	}
	var small [8]proxyAnswer
	ans := small[:0]
	v, err := s.View()
	if err != nil {
		return 0, err
	}
	at := v.Index()
	// View waited for at to be published; only then has every write up to
	// it left the cache (see Lookup).
	useCache := at <= s.applied.Load()
	var items []FetchItem
	var arena []byte
	nhits := 0
	for _, k := range keys {
		if useCache {
			if it, found, ok := s.cache.get(k, at); ok {
				ans = append(ans, proxyAnswer{item: it, found: found, fetch: -1})
				nhits++
				continue
			}
		}
		raw, found, err := v.record(k)
		if err != nil {
			v.Close()
			return at, err
		}
		if !found {
			s.cache.put(k, Item{}, false, at)
			ans = append(ans, proxyAnswer{fetch: -1})
			continue
		}
		rec, err := decodeRecord(raw)
		if err != nil {
			v.Close()
			s.m.integrityErrors.WithLabelValues("value_crc").Inc()
			return at, fmt.Errorf("key %q: %w", k, err)
		}
		if rec.kind == recRemote {
			if val, ok := s.takeTransient(k, rec); ok {
				it := Item{Value: val, Index: rec.index, Flags: rec.attrs.flags, Expires: rec.attrs.expires}
				s.cache.put(k, it, true, at)
				ans = append(ans, proxyAnswer{item: it, found: true, fetch: -1})
				continue
			}
			items = append(items, fetchItem(k, rec))
			ans = append(ans, proxyAnswer{item: Item{Index: rec.index, Flags: rec.attrs.flags, Expires: rec.attrs.expires}, found: true, fetch: len(items) - 1})
			continue
		}
		it, err := v.value(k, rec)
		if err != nil {
			v.Close()
			return at, err
		}
		s.cache.put(k, it, true, at)
		start := len(arena)
		arena = append(arena, it.Value...)
		it.Value = arena[start:len(arena):len(arena)]
		ans = append(ans, proxyAnswer{item: it, found: true, fetch: -1})
	}
	v.Close()
	s.m.cacheHits.Add(float64(nhits))
	s.m.cacheMisses.Add(float64(len(keys) - nhits))
	if len(items) > 0 {
		if err := s.fetch(at, items); err != nil {
			return at, err
		}
		for i := range ans {
			if h := &ans[i]; h.fetch >= 0 {
				h.item.Value = items[h.fetch].Value
				s.cache.put(keys[i], h.item, true, at)
			}
		}
	}
	for i := range ans {
		h := &ans[i]
		s.countProxy(keys[i], h.item.Index, h.found, h.fetch >= 0)
		if err := fn(at, i, h.item, h.found); err != nil {
			return at, err
		}
	}
	return at, nil
}

// countProxy counts one key of a proxy read and marks it used. A hit on
// a value the transient tier holds (served from the read cache) is that
// value's second read: it is stored.
func (s *Store) countProxy(key []byte, index uint64, found, fetched bool) {
	switch {
	case !found:
		s.m.pxNegative.Inc()
	case fetched: // counted by fetch
		s.px.clock.Touch(key)
	default:
		s.m.pxHits.Inc()
		s.px.l1Hit.Inc()
		s.px.hits.Add(1)
		s.px.clock.Touch(key)
		s.promoteTransient(key, index)
	}
}

// record returns the raw value record of key (valid until the next call
// on the view).
func (v *View) record(key []byte) ([]byte, bool, error) {
	v.kbuf = dataKey(v.kbuf, key)
	if !v.it.SeekPrefixGE(v.kbuf) || !bytes.Equal(v.it.Key(), v.kbuf) {
		return nil, false, v.it.Error()
	}
	raw, err := v.it.ValueAndErr()
	return raw, err == nil, err
}

// Scan pages on a proxy: at most scanPageItems keys or scanPageBytes of
// values are gathered (local values copied), their remote values fetched
// together, then passed to fn.
const (
	scanPageItems = 256
	scanPageBytes = 4 << 20
)

type scanItem struct {
	key   []byte
	item  Item
	fetch int
}

func (v *View) scanProxy(prefix, start []byte, limit int, fn func(key []byte, it Item) error) ([]byte, error) {
	lower := dataKey(nil, prefix)
	if bytes.Compare(start, prefix) > 0 {
		lower = dataKey(nil, start)
	}
	upper := prefixEnd(dataKey(nil, prefix))
	inRange := func() bool {
		k := v.it.Key()
		return (upper == nil || bytes.Compare(k, upper) < 0) && k[0] == prefixData
	}
	n := 0
	ok := v.it.SeekGE(lower)
	for ok && inRange() {
		var page []scanItem
		var items []FetchItem
		bytesIn := 0
		for ; ok && inRange() && len(page) < scanPageItems && bytesIn < scanPageBytes; ok = v.it.Next() {
			if limit > 0 && n+len(page) == limit {
				break
			}
			key := append([]byte(nil), v.it.Key()[1:]...)
			raw, err := v.it.ValueAndErr()
			if err != nil {
				return nil, err
			}
			rec, err := decodeRecord(raw)
			if err != nil {
				v.s.m.integrityErrors.WithLabelValues("value_crc").Inc()
				return nil, fmt.Errorf("key %q: %w", key, err)
			}
			bytesIn += rec.valueLen
			if rec.kind == recRemote {
				if val, ok := v.s.takeTransient(key, rec); ok {
					page = append(page, scanItem{key: key, item: Item{Value: val, Index: rec.index, Flags: rec.attrs.flags, Expires: rec.attrs.expires}, fetch: -1})
					continue
				}
				items = append(items, fetchItem(key, rec))
				page = append(page, scanItem{key: key, item: Item{Index: rec.index, Flags: rec.attrs.flags, Expires: rec.attrs.expires}, fetch: len(items) - 1})
				continue
			}
			// value may move a clone, never v.it.
			it, err := v.value(key, rec)
			if err != nil {
				return nil, err
			}
			it.Value = append([]byte(nil), it.Value...)
			page = append(page, scanItem{key: key, item: it, fetch: -1})
		}
		if err := v.it.Error(); err != nil {
			return nil, err
		}
		if len(items) > 0 {
			if err := v.s.fetch(v.index, items); err != nil {
				return nil, err
			}
		}
		for i := range page {
			it := &page[i]
			if it.fetch >= 0 {
				it.item.Value = items[it.fetch].Value
				v.s.px.clock.Touch(it.key)
			} else {
				v.s.m.pxHits.Inc()
				v.s.px.l1Hit.Inc()
				v.s.px.hits.Add(1)
				v.s.px.clock.Touch(it.key)
			}
			if err := fn(it.key, it.item); err != nil {
				return nil, err
			}
			n++
		}
		if limit > 0 && n == limit {
			if ok && inRange() {
				return append([]byte(nil), v.it.Key()[1:]...), nil
			}
			return nil, v.it.Error()
		}
	}
	return nil, v.it.Error()
}
