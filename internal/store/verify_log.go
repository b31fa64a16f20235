package store

import (
	"errors"
	"math"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// log checks the retained log block by block.
func (v *verifier) log() error {
	if !v.logOK || !v.appliedOK {
		return nil
	}
	lr, a := v.logRec, v.applied
	v.r.LogFirst = lr.first
	switch {
	case lr.first == 0:
		v.problem(ProblemLogMeta, nil, 0, -1, "log record says the log starts at index 0")
	case lr.first > a.index+1:
		v.problem(ProblemLogMeta, nil, lr.first, -1, "log starts at %d, beyond applied index %d + 1", lr.first, a.index)
	case lr.first == 1 && lr.baseHash != (wal.Hash{}):
		v.problem(ProblemLogMeta, nil, 1, -1, "log starts at 1 but its base hash is %s, not zero", lr.baseHash)
	}
	it, err := v.snap.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixLog}, UpperBound: []byte{prefixLog + 1}})
	if err != nil {
		return err
	}
	defer it.Close()

	if v.summaries, err = v.snap.NewIter(&pebble.IterOptions{LowerBound: metaBlockSummary, UpperBound: prefixEnd(metaBlockSummary)}); err != nil {
		return err
	}
	defer v.summaries.Close()
	v.sumOK = v.summaries.First()
	chain := wal.Verifier{Index: lr.first - 1, Hash: lr.baseHash}
	synced := true // chain holds a trusted position
	expect := lr.first
	var last wal.Entry
	var stored int64
	segRefs := map[uint64]segUse{} // recounted from the block keys
	for ok := it.First(); ok; ok = it.Next() {
		first, valid := logKeyIndex(it.Key())
		if !valid {
			v.problem(ProblemKeyspace, nil, 0, -1, "malformed log key %x", it.Key())
			continue
		}
		raw, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if ref, isRef, err := decodeBlockRef(raw); err == nil && isRef {
			u := segRefs[ref.seq]
			u.blocks++
			u.bytes += int64(ref.n)
			segRefs[ref.seq] = u
		}
		if raw, err = v.s.blockBytes(raw, nil); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				return err
			}
			v.problem(ProblemLogBlock, nil, first, -1, "block at %d: %v", first, err)
			synced = false
			expect = 0
			continue
		}
		sum := v.summaryOf(first)
		if sum != nil && (first < lr.first || first > a.index) {
			v.problem(ProblemSummary, nil, first, -1, "summary of log block %d, which is not in the log", first)
		}
		switch {
		case first < lr.first:
			if _, ok := v.retired[first]; ok {
				v.seenRetired[first] = int64(len(raw))
				v.r.RetiredBlocks++
				v.r.RetiredBytes += int64(len(raw))
				continue
			}
			v.problem(ProblemLogGap, nil, first, -1, "block at %d is before the log start %d (not removed by retention)", first, lr.first)
			continue
		case first > a.index:
			v.problem(ProblemLogGap, nil, first, -1, "block at %d is beyond applied index %d", first, a.index)
			continue
		}
		v.r.LogBlocks++
		stored += int64(len(raw) + 9)
		if expect != 0 && first != expect {
			if first > expect {
				v.problem(ProblemLogGap, nil, expect, -1, "entries %d..%d missing", expect, first-1)
			} else {
				v.problem(ProblemLogGap, nil, first, -1, "block at %d overlaps entries up to %d", first, expect-1)
			}
			synced = false
		}
		entries, err := wal.DecodeBlock(raw)
		if err != nil {
			v.problem(ProblemLogBlock, nil, first, -1, "block at %d: %v", first, err)
			synced = false
			expect = 0 // unknown: do not report the gap the bad block leaves
			if h, _, _, herr := wal.ParseBlockHeader(raw); herr == nil {
				expect = first + uint64(h.Count)
			}
			continue
		}
		v.r.LogEntries += int64(len(entries))
		for i := range entries {
			e := &entries[i]
			if e.Index != first+uint64(i) {
				v.problem(ProblemLogBlock, nil, first+uint64(i), -1, "block at %d holds entry %d at position %d", first, e.Index, i)
				synced = false
				break
			}
			if last.Index != 0 && e.Time < last.Time {
				v.problem(ProblemLogBlock, nil, e.Index, -1, "entry time %d is before the previous entry's %d", e.Time, last.Time)
			}
			last = *e
			if !synced {
				// Resume checking from this entry's stored hash.
				chain = wal.Verifier{Index: e.Index, Hash: e.Hash}
				synced = true
				continue
			}
			if err := chain.Check(e); err != nil {
				v.problem(ProblemLogChain, nil, e.Index, -1, "%v", err)
				chain = wal.Verifier{Index: e.Index, Hash: e.Hash}
			}
		}
		if h, _, _, err := wal.ParseBlockHeader(raw); err == nil && h.LastTime != entries[len(entries)-1].Time {
			v.problem(ProblemLogBlock, nil, first, -1, "block header time %d, last entry's %d", h.LastTime, entries[len(entries)-1].Time)
		}
		v.checkSummary(first, sum, raw, entries)
		expect = first + uint64(len(entries))
	}
	if err := it.Error(); err != nil {
		return err
	}
	v.r.LogBytes = stored
	v.segmentUse(segRefs)
	v.summaryOf(math.MaxUint64) // reports the summaries of missing blocks
	if err := v.summaries.Error(); err != nil {
		return err
	}
	if stored != lr.bytes {
		v.problem(ProblemLogMeta, nil, 0, -1, "log record counts %d stored bytes, blocks hold %d", lr.bytes, stored)
	}
	if a.index < lr.first {
		// Nothing retained: the base hash is the applied hash.
		if a.index+1 == lr.first && a.hash != lr.baseHash {
			v.problem(ProblemApplied, nil, a.index, -1, "applied hash %s, but the empty log's base hash is %s", a.hash, lr.baseHash)
		}
		return nil
	}
	switch {
	case expect == 0:
		// The last block was unreadable; already reported.
	case expect <= a.index:
		v.problem(ProblemLogGap, nil, expect, -1, "entries %d..%d missing (applied index %d)", expect, a.index, a.index)
	case expect > a.index+1:
		v.problem(ProblemLogGap, nil, a.index+1, -1, "log holds entries %d..%d beyond the applied index", a.index+1, expect-1)
	}
	if last.Index == a.index {
		if last.Hash != a.hash {
			v.problem(ProblemApplied, nil, a.index, -1, "applied hash %s, last entry's hash %s", a.hash, last.Hash)
		}
		if last.Time != a.time {
			v.problem(ProblemApplied, nil, a.index, -1, "applied time %d, last entry's time %d", a.time, last.Time)
		}
	}
	return nil
}

// segmentTail checks the segment tail as the next open would replay it
// (walkTail): it counts the blocks that continue the hash chain from the
// applied record, and reports as ProblemSegment a block a later segment
// declares synced that does not (the open refuses the database then).
func (v *verifier) segmentTail() error {
	g := v.s.segs
	if g == nil {
		return nil
	}
	var chain wal.Verifier
	if v.appliedOK {
		chain = wal.Verifier{Index: v.applied.index, Hash: v.applied.hash}
	} else if raw, err := v.get(metaApplied); err != nil || raw != nil {
		return err // undecodable: already reported
	}
	meta, err := v.get(metaSegments)
	if err != nil {
		return err
	}
	pos, ok, err := g.tailStart(meta)
	if err == nil && ok {
		_, err = g.walkTail(pos, func() uint64 { return chain.Index + 1 }, func(b tailBlock) (bool, error) {
			for i := range b.entries {
				if cerr := chain.Check(&b.entries[i]); cerr != nil {
					if b.synced {
						v.problem(ProblemSegment, nil, b.entries[i].Index, -1, "log segment %d, block at %d, below a synced end: %v (opening refuses it)", b.ref.seq, b.ref.off-frameHeader, cerr)
					}
					return false, nil
				}
			}
			v.r.TailBlocks++
			v.r.TailEntries += int64(len(b.entries))
			return true, nil
		})
	}
	if errors.Is(err, ErrCorrupt) {
		v.problem(ProblemSegment, nil, 0, -1, "%v (opening refuses it)", err)
		return nil
	}
	return err
}

// segmentUse compares the use records of the log segments with the block
// keys pointing into them: a segment counted as unused is removed.
func (v *verifier) segmentUse(counted map[uint64]segUse) {
	recorded, err := segUses(v.snap)
	if err != nil {
		v.problem(ProblemSegment, nil, 0, -1, "segment use records: %v", err)
		return
	}
	for seq, c := range counted {
		if r := recorded[seq]; r != c {
			v.problem(ProblemSegment, nil, 0, -1, "segment %d: %d blocks (%d bytes) point into it, its record says %d (%d)", seq, c.blocks, c.bytes, r.blocks, r.bytes)
		}
	}
	for seq, r := range recorded {
		if _, ok := counted[seq]; !ok {
			v.problem(ProblemSegment, nil, 0, -1, "segment %d: no block points into it, its record says %d (%d bytes)", seq, r.blocks, r.bytes)
		}
	}
}

// summaryOf returns the summary of log block first (nil if it has none),
// reporting the summaries passed on the way: their blocks are missing.
func (v *verifier) summaryOf(first uint64) []byte {
	for ; v.sumOK; v.sumOK = v.summaries.Next() {
		b, valid := summaryKeyBlock(v.summaries.Key())
		switch {
		case !valid:
			v.problem(ProblemSummary, nil, 0, -1, "malformed block summary key %x", v.summaries.Key())
		case b < first:
			v.problem(ProblemSummary, nil, b, -1, "summary of log block %d, which is missing", b)
		case b == first:
			sum := append([]byte(nil), v.summaries.Value()...)
			v.sumOK = v.summaries.Next()
			return sum
		default:
			return nil
		}
	}
	return nil
}

// checkSummary compares the summary b of the log block first (stored
// bytes raw, decoded entries), if it has one, with the block.
func (v *verifier) checkSummary(first uint64, b []byte, raw []byte, entries []wal.Entry) {
	if b == nil {
		return // written before summaries existed
	}
	sum, err := decodeSummary(first, b)
	if err != nil {
		v.problem(ProblemSummary, nil, first, -1, "%v", err)
		return
	}
	last := entries[len(entries)-1]
	if sum.count != uint64(len(entries)) || sum.lastTime != last.Time || sum.lastHash != last.Hash || sum.storedBytes != int64(len(raw)) {
		v.problem(ProblemSummary, nil, first, -1, "summary of log block %d says %d entries, last at time %d with hash %s, %d bytes; the block holds %d, %d, %s, %d",
			first, sum.count, sum.lastTime, sum.lastHash, sum.storedBytes, len(entries), last.Time, last.Hash, len(raw))
		return
	}
	for _, sv := range sum.values {
		found := false
		for _, op := range entries[sv.index-first].Ops {
			if op.Type == wal.OpSet && string(op.Key) == string(sv.key) && len(op.Value) == sv.valueLen {
				found = true
				break
			}
		}
		if !found {
			v.problem(ProblemSummary, sv.key, sv.index, -1, "summary of log block %d lists a value of %d bytes that entry %d does not set", first, sv.valueLen, sv.index)
		}
	}
}
