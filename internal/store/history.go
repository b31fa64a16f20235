package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// MVCC history (full nodes: roots and replicas). When a write overwrites
// or deletes a key, the committer keeps the version it replaces, in the
// same durable batch, so that "the value of K as of index P" can be
// answered for any P at or above the history horizon (docs/storage.md,
// "History"):
//
//	hv<uvarint len(key)><key><BE64 until> → the version: an inline value
//	    record (its index is the write that made it), an in-log record
//	    (the value is in a log block, retire.go) or a lost record
//	ht<BE64 until><key>                   → time(8 BE) size(uvarint)
//	    [block(uvarint) index(uvarint)]: the same entry in GC order; time
//	    is the log time of entry until, size what the version counts for
//	    (historySize); block and index, for a version recorded as an
//	    in-log record, say where it points, so that GC counts the block
//	    down without reading the version
//
// A version record under until U was current for the indexes
// [record index, U-1]. Versions of a key do not overlap, so the version
// current at P is the first one with U > P, if its record index is ≤ P;
// otherwise (a gap between two versions, or before the first) the key did
// not exist at P. Every version carries its start, so a deletion followed
// by a re-creation needs no tombstone: the gap is the tombstone.
//
// The horizon H (in mhist) is the lowest index for which the history is
// complete: versions that stopped being current before H may have been
// garbage collected, or were never recorded (history enabled at H, or a
// snapshot whose history starts at H). Queries for P < H fail with
// ErrHistoryTruncated. GC removes versions in until order, by log age
// (Options.History.Retention) and by size (MaxBytes), a bounded number per
// commit, and raises H to the highest until removed.

const (
	histVersionTag = 'v'
	histTimeTag    = 't'
	// maxHistoryGCPerRun bounds the versions one commit removes.
	maxHistoryGCPerRun = 2048
)

// historyRecord (mhist) describes the history keyspace.
type historyRecord struct {
	enabled bool
	horizon uint64
	bytes   int64 // stored bytes of the hv and ht pairs
	entries int64
}

func (h historyRecord) encode() []byte {
	b := make([]byte, 1, 25)
	if h.enabled {
		b[0] = 1
	}
	b = binary.BigEndian.AppendUint64(b, h.horizon)
	b = binary.BigEndian.AppendUint64(b, uint64(h.bytes))
	return binary.BigEndian.AppendUint64(b, uint64(h.entries))
}

func decodeHistoryRecord(b []byte) (historyRecord, error) {
	if len(b) != 25 || b[0] > 1 {
		return historyRecord{}, fmt.Errorf("%w: history record of %d bytes", ErrCorrupt, len(b))
	}
	return historyRecord{enabled: b[0] == 1, horizon: binary.BigEndian.Uint64(b[1:]),
		bytes: int64(binary.BigEndian.Uint64(b[9:])), entries: int64(binary.BigEndian.Uint64(b[17:]))}, nil
}

// histVersionPrefix is the part of the hv keys common to all versions of key.
func histVersionPrefix(dst, key []byte) []byte {
	dst = append(dst[:0], prefixHistory, histVersionTag)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	return append(dst, key...)
}

func histVersionKey(dst, key []byte, until uint64) []byte {
	dst = histVersionPrefix(dst, key)
	return binary.BigEndian.AppendUint64(dst, until)
}

func histTimeKey(dst []byte, until uint64, key []byte) []byte {
	dst = append(dst[:0], prefixHistory, histTimeTag)
	dst = binary.BigEndian.AppendUint64(dst, until)
	return append(dst, key...)
}

// parseHistTimeKey splits an ht key.
func parseHistTimeKey(k []byte) (until uint64, key []byte, ok bool) {
	if len(k) < 2+8+1 || k[0] != prefixHistory || k[1] != histTimeTag {
		return 0, nil, false
	}
	return binary.BigEndian.Uint64(k[2:]), k[10:], true
}

// History describes the MVCC history of a database at one point.
type History struct {
	Enabled bool
	// Horizon: "as of P" is answered for Horizon ≤ P ≤ the applied index.
	Horizon uint64
	Bytes   int64
	Entries int64
}

// History returns the current history counters.
func (s *Store) History() (History, error) {
	if s.closed.Load() {
		return History{}, ErrClosed
	}
	s.engine.RLock()
	defer s.engine.RUnlock()
	b, err := s.getMeta(metaHistory)
	if err != nil {
		return History{}, fmt.Errorf("read history record: %w", err)
	}
	h, err := decodeHistoryRecord(b)
	if err != nil {
		return History{}, err
	}
	return History{Enabled: h.enabled, Horizon: h.horizon, Bytes: h.bytes, Entries: h.entries}, nil
}

// historyWriter is the committer's state of the MVCC history: the
// history record as the group changes it, when GC last ran, and the
// buffers of the versions it writes.
type historyWriter struct {
	rec       historyRecord
	dirty     bool // the group changed rec
	lastGC    time.Time
	entryTime int64 // of the entry being appended
	// the version being written: its key and record, its GC entry
	hkey, hbuf, tkey, tval []byte
}

// put writes into b the version of key that the op at index until
// replaces, its record in w.hbuf counting valueLen value bytes, and its
// GC entry; ref is the in-log record it refers to, if it does.
func (w *historyWriter) put(b *pebble.Batch, key []byte, until uint64, valueLen int, ref *record) {
	w.hkey = histVersionKey(w.hkey, key, until)
	b.Set(w.hkey, w.hbuf, nil)
	size := historySize(len(w.hkey), valueLen)
	w.tkey = histTimeKey(w.tkey, until, key)
	w.tval = binary.BigEndian.AppendUint64(w.tval[:0], uint64(w.entryTime))
	w.tval = binary.AppendUvarint(w.tval, uint64(size))
	if ref != nil {
		w.tval = binary.AppendUvarint(w.tval, ref.block)
		w.tval = binary.AppendUvarint(w.tval, ref.index)
	}
	b.Set(w.tkey, w.tval, nil)
	w.rec.bytes += int64(size + len(w.tkey) + len(w.tval))
	w.rec.entries++
	w.dirty = true
}

// gcDue reports whether history GC runs now: at most once a second
// unless the history is over its size cap (maxBytes).
func (w *historyWriter) gcDue(now time.Time, maxBytes int64) bool {
	if !w.rec.enabled {
		return false
	}
	if !w.over(maxBytes) && now.Sub(w.lastGC) < time.Second {
		return false
	}
	w.lastGC = now
	return true
}

// over reports whether the history exceeds its size cap (0: none).
func (w *historyWriter) over(maxBytes int64) bool { return maxBytes > 0 && w.rec.bytes > maxBytes }

// removed counts out a version that GC removes, ending at until, of n
// stored bytes with its GC entry, and raises the horizon past it.
func (w *historyWriter) removed(until uint64, n int64) {
	w.rec.bytes -= n
	w.rec.entries--
	w.rec.horizon = max(w.rec.horizon, until)
	w.dirty = true
}

// write puts the history record in b if the group changed it.
func (w *historyWriter) write(b *pebble.Batch) {
	if w.dirty {
		b.Set(metaHistory, w.rec.encode(), nil)
	}
}

// publish exports the committed history counters.
func (w *historyWriter) publish(m *storeMetrics) {
	if w.rec.enabled {
		m.historyBytes.Set(float64(w.rec.bytes))
		m.historyVersions.Set(float64(w.rec.entries))
		m.historyHorizon.Set(float64(w.rec.horizon))
	}
}

// recordHistory keeps the version of key that the op at index until
// replaces (ks, before the op). A value in a log block is not copied: the
// version is an in-log record pointing at the same bytes (see
// historyRefers), and the block is kept while a version points into it.
func (c *committer) recordHistory(key []byte, ks *keyState, until uint64) error {
	w := &c.hw
	var valueLen int
	var ref *record
	if historyRefers(ks) {
		ref = ks.logRec
		w.hbuf = encodeInLog(w.hbuf, ref.index, ks.attrs, ref.block, ref.offset, ref.valueLen, ref.valueCRC)
		valueLen = ref.valueLen
		c.g.noteHistRef(key, *ref, until)
		c.ret.m.historyRefs.Inc()
	} else {
		old, lost, err := c.oldValue(key, ks)
		if err != nil {
			return err
		}
		if lost {
			w.hbuf = encodeLost(w.hbuf, ks.index)
		} else {
			w.hbuf = encodeInline(w.hbuf, ks.index, ks.attrs, old)
			valueLen = len(old)
		}
	}
	w.put(c.g.batch, key, until, valueLen, ref)
	c.s.m.historyRecorded.Inc()
	return nil
}

// historySize is what a version counts for in the history's size: its
// key and the inline record of its value, wherever the value is stored
// (client flags and expiry not counted).
// So the size cap keeps the same versions whether they are inline or in
// a log block, and a version whose block is dropped (and whose value is
// then copied inline) keeps its size.
func historySize(keyLen, valueLen int) int { return keyLen + recHeader + valueLen }

// historyRefers reports whether the version ks describes is kept as a
// reference to its log block rather than as a copy: its record is an
// in-log record, readable as far as the committer knows.
func historyRefers(ks *keyState) bool {
	return ks.logRec != nil && !ks.corrupt && !ks.remote
}

// oldValue returns the value of the version ks describes, reading it from
// its chunks or log block when the committer did not load it. lost is set
// when the value cannot be read back (the record or its data is corrupt):
// the history then says so rather than guess.
func (c *committer) oldValue(key []byte, ks *keyState) (value []byte, lost bool, err error) {
	switch {
	case ks.corrupt || ks.remote:
		return nil, true, nil
	case ks.value != nil:
		return ks.value, false, nil
	case ks.logRec != nil:
		it, err := c.iter()
		if err != nil {
			return nil, false, err
		}
		v, err := c.s.readInLog(it, *ks.logRec, nil)
		if errors.Is(err, ErrCorrupt) {
			c.s.m.integrityErrors.WithLabelValues("log_value_crc").Inc()
			return nil, true, nil
		}
		return v, false, err
	case ks.chunks > 0:
		it, err := c.iter()
		if err != nil {
			return nil, false, err
		}
		v, err := readChunks(it, key, ks.chunks, ks.valueLen, ks.valueCRC, nil)
		if errors.Is(err, ErrCorrupt) {
			c.s.m.integrityErrors.WithLabelValues("chunk_crc").Inc()
			return nil, true, nil
		}
		return v, false, err
	}
	return nil, false, nil // an empty inline value
}

// gcHistory removes, inside the group's batch, the oldest versions while
// they are older than the retention (by the log's clock) or the history
// exceeds its size cap, and raises the horizon past them. It runs at most
// once a second unless over the cap, and removes a bounded number per
// run so a commit never stalls on it. A version removed from a retired
// log block counts the block down; it runs before the group settles its
// retired blocks and drops log blocks, so both see what it removed.
func (c *committer) gcHistory() error {
	o := c.s.opts.History
	if !c.hw.gcDue(time.Now(), o.MaxBytes) {
		return nil
	}
	cutoff := c.last.time - o.Retention.Nanoseconds()
	lo := []byte{prefixHistory, histTimeTag}
	it, err := c.s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return err
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok && n < maxHistoryGCPerRun; ok = it.Next() {
		k := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		until, key, kok := parseHistTimeKey(k)
		gc, vok := parseHistGC(v)
		if !kok || !vok {
			// Unusable GC entry: drop it; its version (if any) stays
			// until the key's next versions, which is harmless.
			c.s.m.integrityErrors.WithLabelValues("history_gc").Inc()
			c.g.batch.Delete(k, nil)
			continue
		}
		t, size := gc.time, gc.size
		if t >= cutoff && !c.hw.over(o.MaxBytes) {
			break
		}
		c.hw.hkey = histVersionKey(c.hw.hkey, key, until)
		if gc.inLog {
			// Its block loses a reference (if the block was dropped
			// since, the version was copied out and there is no count).
			c.g.noteHistGone(key, gc.index)
			if err := c.countDown(gc.block, int64(size)-int64(len(c.hw.hkey)+recHeader)); err != nil {
				return err
			}
		}
		c.g.batch.Delete(c.hw.hkey, nil)
		c.g.batch.Delete(k, nil)
		c.hw.removed(until, int64(size)+int64(len(k)+len(v)))
		n++
	}
	c.s.m.historyCollected.Add(float64(n))
	return it.Error()
}

// histGC is a decoded GC entry (ht value).
type histGC struct {
	time  int64
	size  uint64
	inLog bool // recorded as an in-log record into block, written at index
	block uint64
	index uint64
}

// parseHistGC decodes a GC entry.
func parseHistGC(v []byte) (histGC, bool) {
	var g histGC
	if len(v) <= 8 {
		return g, false
	}
	g.time = int64(binary.BigEndian.Uint64(v))
	rest := v[8:]
	var m int
	if g.size, m = binary.Uvarint(rest); m <= 0 {
		return g, false
	}
	rest = rest[m:]
	if len(rest) == 0 {
		return g, true
	}
	if g.block, m = binary.Uvarint(rest); m <= 0 {
		return g, false
	}
	rest = rest[m:]
	if g.index, m = binary.Uvarint(rest); m <= 0 || m != len(rest) {
		return g, false
	}
	g.inLog = true
	return g, true
}

// GetAt returns the version of key that was current at index at, which
// must lie between the history horizon and the view's index: its value
// (valid until the next call on the view), the index of the write that
// made it, or found false if the key did not exist at at. It fails with
// ErrHistoryTruncated below the horizon (or on a node that keeps no
// history, for any at below the view's index) and ErrNotYetApplied above
// the view's index. A version lost to corruption is an ErrCorrupt error.
func (v *View) GetAt(key []byte, at uint64) (value []byte, index uint64, found bool, err error) {
	defer func() { err = engineErr(err) }()
	if at > v.index {
		return nil, 0, false, fmt.Errorf("%w: asked as of %d, applied index is %d", ErrNotYetApplied, at, v.index)
	}
	if v.s.opts.Proxy != nil && at < v.index {
		return nil, 0, false, fmt.Errorf("%w: a proxy keeps no history", ErrHistoryTruncated)
	}
	value, index, found, err = v.Get(key)
	if err != nil || (found && index <= at) || at == v.index {
		return value, index, found, err
	}
	h, err := v.history()
	if err != nil {
		return nil, 0, false, err
	}
	if !h.enabled || at < h.horizon {
		horizon := v.index
		if h.enabled {
			horizon = h.horizon
		}
		return nil, 0, false, fmt.Errorf("%w: asked as of %d, history starts at %d", ErrHistoryTruncated, at, horizon)
	}
	v.s.m.historyReads.Inc()
	v.kbuf = histVersionKey(v.kbuf, key, at+1)
	if !v.it.SeekGE(v.kbuf) {
		return nil, 0, false, v.it.Error()
	}
	if k := v.it.Key(); len(k) != len(v.kbuf) || !bytes.HasPrefix(k, v.kbuf[:len(v.kbuf)-8]) {
		return nil, 0, false, nil // no later version: absent since the current one ended
	}
	raw, err := v.it.ValueAndErr()
	if err != nil {
		return nil, 0, false, err
	}
	rec, err := decodeRecord(raw)
	if err == nil && (rec.kind == recChunked || rec.kind == recRemote) {
		err = fmt.Errorf("%w: history record of an unexpected kind", ErrCorrupt)
	}
	if err != nil {
		v.s.m.integrityErrors.WithLabelValues("history_crc").Inc()
		return nil, 0, false, fmt.Errorf("key %q as of %d: %w", key, at, err)
	}
	if rec.kind == recLost {
		return nil, 0, false, fmt.Errorf("%w: key %q as of %d: the version written at %d was corrupt when it was overwritten", ErrCorrupt, key, at, rec.index)
	}
	if rec.index > at {
		return nil, 0, false, nil // a gap: the key did not exist at at
	}
	if rec.kind == recInLog {
		if v.vbuf, err = v.s.readInLog(v.it, rec, v.vbuf[:0]); err != nil {
			if errors.Is(err, ErrCorrupt) {
				v.s.m.integrityErrors.WithLabelValues("log_value_crc").Inc()
			}
			return nil, 0, false, fmt.Errorf("key %q as of %d: %w", key, at, err)
		}
		return v.vbuf, rec.index, true, nil
	}
	v.vbuf = append(v.vbuf[:0], rec.inline...)
	return v.vbuf, rec.index, true, nil
}

// HistoryHorizon is the lowest index GetAt answers at on this view: the
// history horizon, or the view's index when the node keeps no history.
func (v *View) HistoryHorizon() (uint64, error) {
	h, err := v.history()
	if err != nil {
		return 0, err
	}
	if !h.enabled || v.s.px != nil {
		return v.index, nil
	}
	return h.horizon, nil
}

// history reads the history record at the view's index.
func (v *View) history() (historyRecord, error) {
	if !v.it.SeekPrefixGE(metaHistory) || !bytes.Equal(v.it.Key(), metaHistory) {
		if err := v.it.Error(); err != nil {
			return historyRecord{}, err
		}
		return historyRecord{}, fmt.Errorf("%w: history record missing", ErrCorrupt)
	}
	raw, err := v.it.ValueAndErr()
	if err != nil {
		return historyRecord{}, err
	}
	return decodeHistoryRecord(raw)
}
