package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// View is a consistent read of the database at one applied index. It pins
// nothing a writer waits for: Pebble iterators read an immutable version.
// A View is used by one goroutine and must be closed promptly.
type View struct {
	s     *Store
	epoch uint64 // of s.gate
	it    *pebble.Iterator
	index uint64
	kbuf  []byte
	vbuf  []byte
}

// View opens a consistent view of the database. Its index is published:
// durable, and never above what a later read is served at.
func (s *Store) View() (*View, error) {
	v, err := s.openView()
	if err != nil {
		return nil, err
	}
	// Pebble shows a batch to readers before its fsync completes; the
	// committer publishes the index only after. Wait for that, so the
	// view holds nothing that could be lost, and a read served from the
	// published index next (the read cache's fast path) never goes back.
	if v.index > s.applied.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.WaitApplied(ctx, v.index)
		cancel()
		if v.index > s.applied.Load() {
			// The wait ran out (a slow fsync): until v.index is
			// published, reads skip the published-index fast path, which
			// would answer below this view.
			for old := s.viewAhead.Load(); old < v.index && !s.viewAhead.CompareAndSwap(old, v.index); old = s.viewAhead.Load() {
			}
		}
	}
	return v, nil
}

// AsOfView opens a view for reads as of an earlier index (View.GetAt)
// without waiting for a commit in flight to become durable. It returns the
// published applied index too, at most the view's: reads as of an index
// up to it see durable data only.
func (s *Store) AsOfView() (*View, uint64, error) {
	a := s.applied.Load()
	v, err := s.openView()
	if err != nil {
		return nil, 0, err
	}
	return v, min(a, v.index), nil
}

func (s *Store) openView() (*View, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	s.engine.RLock()
	e := s.gate.enter()
	it, err := s.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
	if err != nil {
		s.gate.leave(e)
		s.engine.RUnlock()
		return nil, err
	}
	v := &View{s: s, it: it, epoch: e}
	fail := func(err error) (*View, error) {
		it.Close()
		s.gate.leave(e)
		s.engine.RUnlock()
		return nil, engineErr(err)
	}
	if !it.SeekPrefixGE(metaApplied) || !bytes.Equal(it.Key(), metaApplied) {
		return fail(fmt.Errorf("%w: applied index missing", ErrCorrupt))
	}
	raw, err := it.ValueAndErr()
	if err != nil {
		return fail(err)
	}
	a, err := decodeApplied(raw)
	if err != nil {
		return fail(err)
	}
	v.index = a.index
	return v, nil
}

// Index is the applied index the view reads at.
func (v *View) Index() uint64 { return v.index }

// Close releases the view; it must be called exactly once.
func (v *View) Close() error {
	err := v.it.Close()
	v.s.gate.leave(v.epoch)
	v.s.engine.RUnlock()
	return err
}

// Item is a stored value and what was stored with it.
type Item struct {
	Value []byte
	// Index is the index of the entry that wrote the value.
	Index uint64
	// Flags are the client flags written with the value (wal.Op.Flags;
	// 0 unless a client set them).
	Flags uint32
	// Expires is the log time (Unix ns) from which the root deletes the
	// key (wal.Op.Expires); 0: never.
	Expires int64
}

// Get returns the value of key and the index of the entry that wrote it.
// The value is valid until the next call on the view. A value that fails
// its integrity check is never returned: the error wraps ErrCorrupt.
func (v *View) Get(key []byte) (value []byte, index uint64, found bool, err error) {
	it, found, err := v.GetItem(key)
	return it.Value, it.Index, found, err
}

// GetItem is Get returning the value's client flags too.
func (v *View) GetItem(key []byte) (it Item, found bool, err error) {
	defer func() { err = engineErr(err) }()
	v.kbuf = dataKey(v.kbuf, key)
	// SeekPrefixGE consults the bloom filters: absent keys cost no block read.
	if !v.it.SeekPrefixGE(v.kbuf) || !bytes.Equal(v.it.Key(), v.kbuf) {
		return Item{}, false, v.it.Error()
	}
	raw, err := v.it.ValueAndErr()
	if err != nil {
		return Item{}, false, err
	}
	it, err = v.decode(key, raw)
	if err != nil {
		return Item{}, false, err
	}
	return it, true, nil
}

func (v *View) decode(key, raw []byte) (Item, error) {
	rec, err := decodeRecord(raw)
	if err != nil {
		v.s.m.integrityErrors.WithLabelValues("value_crc").Inc()
		return Item{}, fmt.Errorf("key %q: %w", key, err)
	}
	return v.value(key, rec)
}

// value returns the value a decoded record describes: inline, from its
// chunks or its log block, or, on a proxy, fetched from a replica.
func (v *View) value(key []byte, rec record) (Item, error) {
	switch {
	case rec.kind == recRemote:
		return v.fetchOne(key, rec)
	case rec.kind == recLost:
		v.s.m.integrityErrors.WithLabelValues("value_crc").Inc()
		return Item{}, fmt.Errorf("%w: key %q: value record of the history kind", ErrCorrupt, key)
	case rec.kind != recChunked && rec.kind != recInLog:
		return Item{Value: rec.inline, Index: rec.index, Flags: rec.attrs.flags, Expires: rec.attrs.expires}, nil
	}
	// A clone reads the same state as the view (a new iterator would read
	// the latest one, whose chunks may belong to a newer value); the main
	// iterator stays where it is.
	it, err := v.it.Clone(pebble.CloneOptions{})
	if err != nil {
		return Item{}, err
	}
	defer it.Close()
	if rec.kind == recInLog {
		v.vbuf, err = v.s.readInLog(it, rec, v.vbuf[:0])
		if err != nil {
			v.s.m.integrityErrors.WithLabelValues("log_value_crc").Inc()
			return Item{}, fmt.Errorf("key %q: %w", key, err)
		}
		return Item{Value: v.vbuf, Index: rec.index, Flags: rec.attrs.flags, Expires: rec.attrs.expires}, nil
	}
	v.vbuf, err = readChunks(it, key, rec.chunks, rec.valueLen, rec.valueCRC, v.vbuf[:0])
	if err != nil {
		v.s.m.integrityErrors.WithLabelValues("chunk_crc").Inc()
		return Item{}, fmt.Errorf("key %q: %w", key, err)
	}
	return Item{Value: v.vbuf, Index: rec.index, Flags: rec.attrs.flags, Expires: rec.attrs.expires}, nil
}

// readInLog reads the value of an in-log record from its log block and
// checks its CRC. A block in a log segment is not read whole: the value
// alone is.
func (s *Store) readInLog(it *pebble.Iterator, rec record, dst []byte) ([]byte, error) {
	k := logKey(rec.block)
	if !it.SeekPrefixGE(k) || !bytes.Equal(it.Key(), k) {
		if err := it.Error(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: log block %d holding the value is missing", ErrCorrupt, rec.block)
	}
	raw, err := it.ValueAndErr()
	if err != nil {
		return nil, err
	}
	ref, isRef, err := decodeBlockRef(raw)
	if err != nil {
		return nil, err
	}
	if isRef {
		if s.segs == nil {
			return nil, fmt.Errorf("%w: log block %d is in a segment, but the store has no segments", ErrCorrupt, rec.block)
		}
		if rec.offset < 0 || rec.valueLen < 0 || rec.offset+rec.valueLen > ref.n-ref.payloadAt {
			return nil, fmt.Errorf("%w: log block %d cannot hold a value at %d+%d", ErrCorrupt, rec.block, rec.offset, rec.valueLen)
		}
		start := len(dst)
		dst, err = s.segs.readAt(ref.seq, ref.off+int64(ref.payloadAt+rec.offset), rec.valueLen, dst)
		if err != nil {
			return nil, err
		}
		if crc(dst[start:]) != rec.valueCRC {
			return nil, fmt.Errorf("%w: value in log block %d: crc mismatch", ErrCorrupt, rec.block)
		}
		return dst, nil
	}
	_, c, payload, err := wal.ParseBlockHeader(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: log block %d: %v", ErrCorrupt, rec.block, err)
	}
	if c != wal.CompressNone || rec.offset+rec.valueLen > len(payload) {
		return nil, fmt.Errorf("%w: log block %d cannot hold a value at %d+%d", ErrCorrupt, rec.block, rec.offset, rec.valueLen)
	}
	val := payload[rec.offset : rec.offset+rec.valueLen]
	if crc(val) != rec.valueCRC {
		return nil, fmt.Errorf("%w: value in log block %d: crc mismatch", ErrCorrupt, rec.block)
	}
	return append(dst, val...), nil
}

// readChunks reassembles a chunked value and checks every chunk CRC and the
// CRC of the whole value.
func readChunks(it *pebble.Iterator, key []byte, chunks, valueLen int, valueCRC uint32, dst []byte) ([]byte, error) {
	for i := 0; i < chunks; i++ {
		ck := chunkKey(nil, key, uint32(i))
		if !it.SeekGE(ck) || !bytes.Equal(it.Key(), ck) {
			if err := it.Error(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w: chunk %d of %d missing", ErrCorrupt, i, chunks)
		}
		raw, err := it.ValueAndErr()
		if err != nil {
			return nil, err
		}
		part, err := decodeChunk(raw)
		if err != nil {
			return nil, fmt.Errorf("chunk %d: %w", i, err)
		}
		dst = append(dst, part...)
	}
	if len(dst) != valueLen {
		return nil, fmt.Errorf("%w: chunks hold %d bytes, record says %d", ErrCorrupt, len(dst), valueLen)
	}
	if crc(dst) != valueCRC {
		return nil, fmt.Errorf("%w: reassembled value crc mismatch", ErrCorrupt)
	}
	return dst, nil
}

// Scan calls fn for keys with prefix, in key order, starting at the first
// key ≥ start, for at most limit keys (limit ≤ 0: no limit). It returns the
// key to continue from when it stopped at the limit, or nil at the end.
// Values passed to fn are valid only during the call.
func (v *View) Scan(prefix, start []byte, limit int, fn func(key, value []byte, index uint64) error) (next []byte, err error) {
	return v.ScanItems(prefix, start, limit, func(key []byte, it Item) error { return fn(key, it.Value, it.Index) })
}

// ScanItems is Scan passing each key's Item.
func (v *View) ScanItems(prefix, start []byte, limit int, fn func(key []byte, it Item) error) (next []byte, err error) {
	defer func() { err = engineErr(err) }()
	if v.s.px != nil {
		return v.scanProxy(prefix, start, limit, fn)
	}
	lower := dataKey(nil, prefix)
	if bytes.Compare(start, prefix) > 0 {
		lower = dataKey(nil, start)
	}
	upper := prefixEnd(dataKey(nil, prefix))
	n := 0
	for ok := v.it.SeekGE(lower); ok; ok = v.it.Next() {
		k := v.it.Key()
		if upper != nil && bytes.Compare(k, upper) >= 0 {
			break
		}
		if k[0] != prefixData {
			break
		}
		key := k[1:]
		if limit > 0 && n == limit {
			return append([]byte(nil), key...), nil
		}
		raw, err := v.it.ValueAndErr()
		if err != nil {
			return nil, err
		}
		key = append(v.kbuf[:0], key...)
		v.kbuf = key
		it, err := v.decode(key, raw)
		if err != nil {
			return nil, err
		}
		if err := fn(key, it); err != nil {
			return nil, err
		}
		n++
		// decode may have moved nothing on v.it, but fn may take time:
		// the iterator stays valid regardless.
	}
	return nil, v.it.Error()
}

// WaitApplied blocks until the applied index reaches index or ctx ends,
// and returns the applied index.
func (s *Store) WaitApplied(ctx context.Context, index uint64) (uint64, error) {
	for {
		ch := s.Changed()
		if a := s.applied.Load(); a >= index {
			return a, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return s.applied.Load(), ctx.Err()
		case <-s.quit:
			return s.applied.Load(), ErrClosed
		}
	}
}

// Digest summarises the whole data of a database at one applied index:
// SHA-256 over every key, value and index in key order, and the client
// flags and expiry of the values that have them (so data without them
// digests as it did before they existed). Two nodes with the
// same Digest at the same Index serve the same data; comparing digests (not
// just indexes) is how replicas are checked against their root.
type Digest struct {
	Index uint64
	Keys  int
	Hash  [sha256.Size]byte
}

// Digest reads every value once, through the normal read path (so every
// CRC is checked too). It costs a full scan: a tool, not a request path.
func (s *Store) Digest() (Digest, error) {
	v, err := s.View()
	if err != nil {
		return Digest{}, err
	}
	defer v.Close()
	h := sha256.New()
	d := Digest{Index: v.Index()}
	var buf []byte
	if _, err := v.ScanItems(nil, nil, 0, func(k []byte, it Item) error {
		buf = binary.AppendUvarint(buf[:0], uint64(len(k)))
		buf = append(buf, k...)
		buf = binary.AppendUvarint(buf, uint64(len(it.Value)))
		buf = append(buf, it.Value...)
		buf = binary.BigEndian.AppendUint64(buf, it.Index)
		if it.Flags != 0 || it.Expires != 0 {
			buf = append(buf, 'a')
			buf = binary.BigEndian.AppendUint32(buf, it.Flags)
			buf = binary.BigEndian.AppendUint64(buf, uint64(it.Expires))
		}
		h.Write(buf)
		d.Keys++
		return nil
	}); err != nil {
		return Digest{}, err
	}
	h.Sum(d.Hash[:0])
	return d, nil
}

// Lookup reads keys at one applied index, which it returns and passes to
// fn as at: from the read cache when it can vouch for every key at the
// current applied index, else from a View (whose reads then fill the
// cache). fn is called for each key in order; value is nil when the key
// is absent and is valid only during the call. An error from fn stops the
// lookup and is returned.
func (s *Store) Lookup(keys [][]byte, fn func(at uint64, i int, value []byte, index uint64, found bool) error) (uint64, error) {
	return s.LookupItems(keys, func(at uint64, i int, it Item, found bool) error {
		return fn(at, i, it.Value, it.Index, found)
	})
}

// LookupItems is Lookup passing each key's Item (the zero Item when the
// key is absent); its value is valid only during the call.
func (s *Store) LookupItems(keys [][]byte, fn func(at uint64, i int, it Item, found bool) error) (uint64, error) {
	at, err := s.lookup(keys, fn)
	return at, engineErr(err)
}

func (s *Store) lookup(keys [][]byte, fn func(at uint64, i int, it Item, found bool) error) (uint64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if s.px != nil {
		return s.lookupProxy(keys, fn)
	}
	a := s.applied.Load()
	var done bool
	var err error
	if len(keys) <= 8 {
		var small [8]cacheHit // stays on the stack
		_, done, err = s.lookupCached(keys, a, small[:0], fn)
	} else {
		hp := hitsPool.Get().(*[]cacheHit)
		var hits []cacheHit
		hits, done, err = s.lookupCached(keys, a, (*hp)[:0], fn)
		if cap(hits) <= maxPooledHits {
			clear(hits) // drop the references to cached values
			*hp = hits[:0]
			hitsPool.Put(hp)
		}
	}
	if done || err != nil {
		return a, err
	}
	v, err := s.View()
	if err != nil {
		return 0, err
	}
	defer v.Close()
	at := v.Index()
	// View waited for at to be published (a view can see a commit a moment
	// before the committer publishes its index and invalidates the cache
	// for it). Only once at is published has every write up to it left the
	// cache; after View's bounded wait ran out, the cache is not used.
	useCache := at <= s.applied.Load()
	var nhits int
	for i, k := range keys {
		var it Item
		var found, ok bool
		if useCache {
			it, found, ok = s.cache.get(k, at)
		}
		if ok {
			nhits++
		} else {
			if it, found, err = v.GetItem(k); err != nil {
				return at, err
			}
			s.cache.put(k, it, found, at)
		}
		if err := fn(at, i, it, found); err != nil {
			return at, err
		}
	}
	s.m.cacheHits.Add(float64(nhits))
	s.m.cacheMisses.Add(float64(len(keys) - nhits))
	return at, nil
}

// cacheHit is a key Lookup found in the read cache, held until it knows
// whether the cache has every key of the request.
type cacheHit struct {
	item  Item
	found bool
}

// hitsPool recycles Lookup's hit lists (a 100-key request needs 4 KB).
var hitsPool = sync.Pool{New: func() any { return new([]cacheHit) }}

// maxPooledHits bounds the lists kept in hitsPool.
const maxPooledHits = 1024

// lookupCached answers keys from the read cache at applied index a if it
// can vouch for all of them: it collects them in hits first, then calls
// fn for each, and reports done. Otherwise it calls fn for none. It
// returns hits, grown, for reuse.
func (s *Store) lookupCached(keys [][]byte, a uint64, hits []cacheHit, fn func(at uint64, i int, it Item, found bool) error) ([]cacheHit, bool, error) {
	if a < s.viewAhead.Load() {
		return hits, false, nil // a view answered above a: read from a view too
	}
	for _, k := range keys {
		it, found, ok := s.cache.get(k, a)
		if !ok {
			return hits, false, nil
		}
		hits = append(hits, cacheHit{it, found})
	}
	s.m.cacheHits.Add(float64(len(keys)))
	for i, h := range hits {
		if err := fn(a, i, h.item, h.found); err != nil {
			return hits, true, err
		}
	}
	return hits, true, nil
}
