package store

import (
	"encoding/binary"
	"errors"

	"github.com/cockroachdb/pebble/v2"
)

// history checks the MVCC history: every version key and record decodes,
// its version was written before it ended and ended at or before the
// applied index, it has its GC entry (and every GC entry its version),
// and the history record's counters match a recount.
func (v *verifier) history() error {
	raw, err := v.get(metaHistory)
	if err != nil {
		return err
	}
	var h historyRecord
	if raw != nil {
		if h, err = decodeHistoryRecord(raw); err != nil {
			v.problem(ProblemMeta, nil, 0, -1, "history record: %v", err)
			return nil
		}
	}
	if v.appliedOK && h.horizon > v.applied.index {
		v.problem(ProblemHistory, nil, h.horizon, -1, "history horizon %d beyond the applied index %d", h.horizon, v.applied.index)
	}
	vp := []byte{prefixHistory, histVersionTag}
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: vp, UpperBound: prefixEnd(vp)})
	if err != nil {
		return err
	}
	defer it.Close()
	lit, err := v.snap.NewIter(nil) // reads the log blocks versions point into
	if err != nil {
		return err
	}
	defer lit.Close()
	var count, size int64
	var tk []byte
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		l, n := binary.Uvarint(k[2:])
		if n <= 0 || l == 0 || uint64(len(k)) != 2+uint64(n)+l+8 {
			v.problem(ProblemHistory, nil, 0, -1, "malformed history key %x", k)
			continue
		}
		key := k[2+n : len(k)-8]
		until := binary.BigEndian.Uint64(k[len(k)-8:])
		val, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		count++
		if !h.enabled {
			v.problem(ProblemHistory, key, until, -1, "history entry while the history is disabled")
		}
		rec, err := decodeRecord(val)
		vsize := len(k) + len(val) // what it counts for (historySize)
		if err == nil {
			vsize -= rec.attrs.encodedLen()
		}
		switch {
		case err != nil:
			v.problem(ProblemHistory, key, until, -1, "version ending at %d: %v", until, err)
		case rec.kind == recChunked || rec.kind == recRemote:
			v.problem(ProblemHistory, key, until, -1, "version ending at %d is not an inline, in-log or lost record", until)
		case rec.kind != recLost && rec.index >= until:
			v.problem(ProblemHistory, key, until, -1, "version written at %d ends at %d", rec.index, until)
		case rec.kind == recInLog:
			vsize = historySize(len(k), rec.valueLen)
			v.historyRef(lit, key, until, rec)
		}
		size += int64(vsize)
		if v.appliedOK && until > v.applied.index {
			v.problem(ProblemHistory, key, until, -1, "version ends at %d, beyond the applied index %d", until, v.applied.index)
		}
		tk = histTimeKey(tk, until, key)
		tv, err := v.get(tk)
		if err != nil {
			return err
		}
		if tv == nil {
			v.problem(ProblemHistory, key, until, -1, "version ending at %d has no GC entry", until)
			continue
		}
		size += int64(len(tk) + len(tv))
		g, ok := parseHistGC(tv)
		switch {
		case !ok:
			v.problem(ProblemHistory, key, until, -1, "GC entry of %d bytes is malformed", len(tv))
		case g.size != uint64(vsize):
			v.problem(ProblemHistory, key, until, -1, "GC entry states %d bytes for a version of %d", g.size, vsize)
		case err == nil && rec.kind == recInLog && (!g.inLog || g.block != rec.block || g.index != rec.index):
			v.problem(ProblemHistory, key, until, -1, "GC entry of a version in log block %d at %d says block %d at %d (in-log %v)", rec.block, rec.index, g.block, g.index, g.inLog)
		case err == nil && rec.kind == recInline && g.inLog && g.index != rec.index:
			// A version copied out of its block keeps the GC entry it had.
			v.problem(ProblemHistory, key, until, -1, "GC entry names the version written at %d, the version was written at %d", g.index, rec.index)
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	// GC entries without their version.
	tp := []byte{prefixHistory, histTimeTag}
	tit, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: tp, UpperBound: prefixEnd(tp)})
	if err != nil {
		return err
	}
	defer tit.Close()
	var hk []byte
	for ok := tit.First(); ok; ok = tit.Next() {
		until, key, kok := parseHistTimeKey(tit.Key())
		if !kok {
			v.problem(ProblemHistory, nil, 0, -1, "malformed history GC key %x", tit.Key())
			continue
		}
		hk = histVersionKey(hk, key, until)
		if _, c, err := v.snap.Get(hk); errors.Is(err, pebble.ErrNotFound) {
			v.problem(ProblemHistory, key, until, -1, "GC entry without its version")
		} else if err != nil {
			return err
		} else {
			c.Close()
		}
	}
	if err := tit.Error(); err != nil {
		return err
	}
	if raw != nil && (count != h.entries || size != h.bytes) {
		v.problem(ProblemHistory, nil, 0, -1, "history record counts %d versions in %d bytes, found %d in %d", h.entries, h.bytes, count, size)
	}
	return nil
}

// historyRef checks a version kept in a log block: the value is there,
// with its CRC; a block before the log start counts it as live.
func (v *verifier) historyRef(lit *pebble.Iterator, key []byte, until uint64, rec record) {
	if v.logOK && rec.block < v.logRec.first {
		r := v.refs[rec.block]
		r.live++
		r.liveBytes += int64(rec.valueLen)
		v.refs[rec.block] = r
	}
	if _, err := v.s.readInLog(lit, rec, nil); err != nil {
		v.problem(ProblemHistory, key, until, -1, "version ending at %d, stored in log block %d: %v", until, rec.block, err)
	}
}

// proxy checks a proxy's cache counters against the stored values.
func (v *verifier) proxy() error {
	raw, err := v.get(metaProxy)
	if err != nil || raw == nil {
		return err
	}
	p, err := decodeProxyRecord(raw)
	if err != nil {
		v.problem(ProblemMeta, nil, 0, -1, "proxy record: %v", err)
		return nil
	}
	if v.unreadable == 0 && (p.values != v.storedValues || p.bytes != v.storedBytes) {
		v.problem(ProblemProxy, nil, 0, -1, "proxy record counts %d stored values of %d bytes, found %d of %d", p.values, p.bytes, v.storedValues, v.storedBytes)
	}
	return nil
}
