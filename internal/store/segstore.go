package store

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// openSegments opens the log segments of the engine just opened and, for
// a writable store, applies again the durable blocks Pebble lost (see
// segment.go). A proxy appends no blocks to segments (its blocks stay in
// Pebble), but reads those it has from the time it was a full node.
func (s *Store) openSegments() error {
	fs := s.opts.FS
	if !s.opts.ReadOnly && s.opts.BallastBytes > 0 {
		fs = vfs.OnDiskFull(fs, s.releaseBallast)
	}
	size := segmentSize(s.opts.Retention.MaxBytes)
	if s.opts.segmentBytes > 0 {
		size = s.opts.segmentBytes
	}
	g := newSegments(fs, s.opts.Dir, size, s.m)
	g.recycleAnyway = s.opts.recycleAnyway
	if err := g.openAll(); err != nil {
		return fmt.Errorf("log segments: %w", err)
	}
	s.segs = g
	if s.opts.ReadOnly {
		return nil
	}
	fs.Remove(fs.PathJoin(s.opts.Dir, spareTemp)) // a crash cut it short
	g.dropLargeSpare()
	tail, err := s.replaySegments()
	if err == nil {
		err = g.resume(tail)
	}
	if err == nil {
		err = s.recountRetired()
	}
	if err != nil {
		g.close()
		s.segs = nil
		return fmt.Errorf("log segments: %w", err)
	}
	return nil
}

// tailStart is where the segment tail begins: after the block Pebble's
// segment tail record (meta, nil if none) names, or at the first
// segment's first block if no block was ever referenced. ok is false if
// there are no segments.
func (g *segments) tailStart(meta []byte) (pos segTail, ok bool, err error) {
	if meta != nil {
		if pos, err = decodeSegTail(meta); err != nil {
			return segTail{}, false, err
		}
		if (*g.files.Load())[pos.seq] == nil {
			return segTail{}, false, fmt.Errorf("%w: log segment %d, which holds the log's tail, is missing", ErrCorrupt, pos.seq)
		}
		return pos, true, nil
	}
	seqs, err := g.list()
	if err != nil || len(seqs) == 0 {
		return segTail{}, false, err
	}
	_, start, ok, err := g.header(seqs[0])
	if err == nil && !ok && len(seqs) > 1 {
		// A creation cut short has no segment after it (walkTail).
		err = fmt.Errorf("%w: log segment %d exists, but segment %d, the first, has no header", ErrCorrupt, seqs[1], seqs[0])
	}
	if err != nil || !ok {
		return segTail{}, false, err
	}
	return segTail{seq: seqs[0], off: start}, true, nil
}

// tailBlock is a block of the segment tail: one written to a segment
// after the last block Pebble's segment tail record covers.
type tailBlock struct {
	ref     blockRef
	entries []wal.Entry
	ids     map[string]batchOutcome // its batch ID outcomes, if their frame follows it
	end     int64                   // where the frame after it (and its ID frame) starts
	// synced: a later segment's header says the segment's blocks end
	// after this one, so it was made durable and must be usable.
	synced bool
}

// walkTail visits the blocks of the segment tail from pos on, in log
// order, while each is a whole block that starts at the index next
// returns; visit returns false to stop at a block. A block that is not
// whole, does not decode or does not start at next ends the walk if no
// later segment declares it synced (a write cut short, a frame a recycled
// segment held before, a block written after a failure) and is ErrCorrupt
// if one does. It returns the position of the block it stopped at, or
// after the last block.
func (g *segments) walkTail(pos segTail, next func() uint64, visit func(tailBlock) (bool, error)) (segTail, error) {
	for {
		format, err := g.format(pos.seq)
		if err != nil {
			return pos, err
		}
		// A next segment's header says where this one's blocks end.
		limit, nextStart, hasNext := int64(1<<62), int64(0), false
		if (*g.files.Load())[pos.seq+1] != nil {
			prev, st, ok, err := g.header(pos.seq + 1)
			if err != nil {
				return pos, err
			}
			if ok && prev.seq == pos.seq {
				limit, nextStart, hasNext = prev.off, st, true
			}
		}
		// A segment is created only once the one before it has its
		// header synced: without a header saying where this one's blocks
		// end, the next one is a creation cut short, and nothing follows
		// it. A later segment means the header was damaged, and the
		// segments from it on hold the rest of the log.
		if later := g.after(pos.seq + 1); !hasNext && later != 0 {
			return pos, fmt.Errorf("%w: log segment %d exists, but segment %d has no header saying where segment %d's blocks end", ErrCorrupt, later, pos.seq+1, pos.seq)
		}
		for pos.off < limit {
			at := pos.off // of the block's frame
			blk, ok, err := g.frameAt(pos.seq, at)
			if err != nil {
				return pos, err
			}
			// A group's batch ID outcomes come before its block, in the
			// same write: a block whose outcomes are not whole is not
			// whole either.
			var idsFrame []byte
			if ok && blk[0] == idsTag {
				idsFrame = blk
				at += frameHeader + int64(len(blk))
				if blk, ok, err = g.frameAt(pos.seq, at); err != nil {
					return pos, err
				}
			}
			if !ok {
				if hasNext {
					return pos, fmt.Errorf("%w: log segment %d: no whole block at offset %d, below its synced end %d", ErrCorrupt, pos.seq, at, limit)
				}
				return pos, g.laterBlock(segTail{seq: pos.seq, off: at}, next())
			}
			b := tailBlock{ref: blockRef{seq: pos.seq, off: at + frameHeader, n: len(blk)}, synced: hasNext}
			_, _, payload, err := wal.ParseBlockHeader(blk)
			if err == nil {
				b.entries, err = wal.DecodeBlock(blk)
			}
			if err != nil {
				if hasNext {
					return pos, fmt.Errorf("%w: log segment %d, block at %d: %v", ErrCorrupt, pos.seq, at, err)
				}
				// A whole frame that is not a block: what a recycled
				// segment held before, past the end of what was written.
				return pos, nil
			}
			b.ref.payloadAt = len(blk) - len(payload)
			if want := next(); firstIndex(b.entries) != want {
				if hasNext {
					return pos, fmt.Errorf("%w: log segment %d: block at %d starts at index %d, not %d, below the synced end %d", ErrCorrupt, pos.seq, at, firstIndex(b.entries), want, limit)
				}
				return pos, nil // not the next block: written after a failure, never referenced
			}
			b.end = b.ref.end()
			if idsFrame != nil {
				if b.ids = idsOf(idsFrame, blk, b.entries[0].Index); b.ids == nil {
					if hasNext {
						return pos, fmt.Errorf("%w: log segment %d: the batch ID frame at %d is not the next block's", ErrCorrupt, pos.seq, pos.off)
					}
					return pos, nil // what a recycled segment held before
				}
			} else if format == 1 {
				// Format 1 segments written before the outcomes went
				// first have them after the block (format 2 before it
				// only). Only the outcomes of this block: an ID frame
				// left by an abandoned group with another block is not.
				t, ok, err := g.frameAt(pos.seq, b.end)
				if err != nil {
					return pos, err
				}
				if ok && b.end < limit {
					if b.ids = idsOf(t, blk, b.entries[0].Index); b.ids != nil {
						b.end += frameHeader + int64(len(t))
					}
				}
			}
			if more, err := visit(b); err != nil || !more {
				return pos, err
			}
			pos.off = b.end
		}
		if !hasNext {
			return pos, nil
		}
		pos = segTail{seq: pos.seq + 1, off: nextStart}
	}
}

// laterBlock is called where the walk of the last segment ends at a frame
// that is not whole: the end of what was written (a write cut short), or
// a damaged frame. A write cut short is the last in its segment: what
// follows it is older (a recycled segment's frames) or nothing. So if a
// frame after it (found by its length, past the group's batch ID frame
// and block) holds a block later in the log than want, the frame was
// damaged, and the blocks after it are acknowledged writes: that is
// corruption. A damaged length cannot be seen this way.
func (g *segments) laterBlock(pos segTail, want uint64) error {
	f := (*g.files.Load())[pos.seq]
	if f == nil {
		return nil
	}
	var h [frameHeader]byte
	if _, err := f.ReadAt(h[:], pos.off); err != nil {
		return nil // nothing there
	}
	n := int64(binary.LittleEndian.Uint32(h[:]))
	if n == 0 {
		return nil
	}
	at := pos.off + frameHeader + n
	for range 3 {
		blk, ok, err := g.frameAt(pos.seq, at)
		if err != nil || !ok {
			return err
		}
		next := at + frameHeader + int64(len(blk))
		if blk[0] == idsTag {
			at = next
			continue
		}
		entries, err := wal.DecodeBlock(blk)
		switch {
		case err != nil || firstIndex(entries) < want:
			return nil
		case firstIndex(entries) == want:
			at = next // the group whose batch ID frame was cut short
			continue
		}
		return fmt.Errorf("%w: log segment %d: the frame at offset %d fails its check, and a block of index %d follows it at %d", ErrCorrupt, pos.seq, pos.off, firstIndex(entries), at)
	}
	return nil
}

// after returns the first segment after seq, 0 if there is none.
func (g *segments) after(seq uint64) uint64 {
	var first uint64
	for s := range *g.files.Load() {
		if s > seq && (first == 0 || s < first) {
			first = s
		}
	}
	return first
}

// replayState is the block of a segment tail that a replay at open
// applies again (replaySegments), already durable in its segment.
type replayState struct {
	block *blockRef
	end   int64                   // after the block's frames
	ids   map[string]batchOutcome // the outcomes of the block's group
}

// active reports whether the group is a replayed block.
func (r *replayState) active() bool { return r.block != nil }

// restoreIDs gives the replayed group the outcomes stored with its block.
func (r *replayState) restoreIDs(g *groupPending) {
	if r.block == nil || len(r.ids) == 0 {
		return
	}
	if g.ids == nil {
		g.ids = map[string]batchOutcome{}
	}
	maps.Copy(g.ids, r.ids)
}

// setBlock puts in the group's batch, under key, the reference to the
// replayed block and the segment tail after it, and returns the block's
// stored size.
func (r *replayState) setBlock(g *groupPending, key []byte) int {
	g.buf = r.block.encode(g.buf[:0])
	g.batch.Set(key, g.buf, nil)
	g.batch.Set(metaSegments, segTail{seq: r.block.seq, off: r.end}.encode(), nil)
	g.useSegment(r.block.seq, int64(r.block.n), 1)
	return r.block.n
}

// replaySegments applies the blocks of the segment tail (walkTail) and
// returns where the next block goes. Blocks are applied with the replica
// path (prepareApply), which checks that each continues the hash chain;
// the first that does not ends the replay, unless it is declared synced.
func (s *Store) replaySegments() (segTail, error) {
	g := s.segs
	meta, err := s.getMeta(metaSegments)
	if errors.Is(err, pebble.ErrNotFound) {
		meta, err = nil, nil
	}
	if err != nil {
		return segTail{}, err
	}
	pos, ok, err := g.tailStart(meta)
	if err != nil || !ok {
		return segTail{}, err
	}
	c, err := newCommitter(s)
	if err != nil {
		return segTail{}, err
	}
	start := time.Now()
	applied := 0
	pos, err = g.walkTail(pos, func() uint64 { return c.last.index + 1 }, func(b tailBlock) (bool, error) {
		r := &request{kind: reqApply, entries: b.entries, done: make(chan struct{})}
		c.rp = replayState{block: &b.ref, end: b.end, ids: b.ids}
		c.commit([]*request{r})
		c.rp = replayState{}
		if r.err != nil {
			if errors.Is(r.err, ErrNotContiguous) && !b.synced {
				return false, nil
			}
			return false, fmt.Errorf("replaying log block %d: %w", b.entries[0].Index, r.err)
		}
		applied += len(b.entries)
		return true, nil
	})
	if err != nil {
		return segTail{}, err
	}
	if applied > 0 {
		if err := s.engineWrite(func() error { return s.db.LogData(nil, pebble.Sync) }); err != nil {
			return segTail{}, err
		}
		s.m.replayed.Add(float64(applied))
		s.opts.Logger.Info("replayed the log tail from the log segments", "db", s.opts.Name,
			"entries", applied, "applied_index", c.last.index, "took", time.Since(start))
	}
	return pos, nil
}

// idsTag starts the frame of batch ID outcomes that precedes a block (in
// format 1 segments, it may follow it instead), and
// names the block (its first index, and its frame's CRC, which append
// fills in), so that a replay takes only the outcomes of the block it
// applies:
//
//	ids := idsTag · first index (8 BE) · block crc32c (4 LE) · uvarint(count) ·
//	       (uvarint(len id) · id · outcome(17))*
const (
	idsTag   = 'I'
	idsCRCAt = 9
)

func encodeIDs(dst []byte, first uint64, ids map[string]batchOutcome) []byte {
	if len(ids) == 0 {
		return dst
	}
	dst = append(dst, idsTag)
	dst = binary.BigEndian.AppendUint64(dst, first)
	dst = append(dst, 0, 0, 0, 0) // the block's CRC
	dst = binary.AppendUvarint(dst, uint64(len(ids)))
	for id, o := range ids {
		dst = binary.AppendUvarint(dst, uint64(len(id)))
		dst = append(append(dst, id...), o.encode()...)
	}
	return dst
}

// idsOf returns the outcomes of frame if it is a batch ID frame naming
// blk, the block whose first entry is first; nil otherwise.
func idsOf(frame, blk []byte, first uint64) map[string]batchOutcome {
	if len(frame) == 0 || frame[0] != idsTag {
		return nil
	}
	ids, f, crc, err := decodeIDs(frame)
	if err != nil || f != first || crc != crc32.Checksum(blk, castagnoli) {
		return nil
	}
	return ids
}

// decodeIDs decodes a batch ID frame; first and crc name its block.
func decodeIDs(b []byte) (ids map[string]batchOutcome, first uint64, crc uint32, err error) {
	bad := fmt.Errorf("%w: bad batch ID frame", ErrCorrupt)
	if len(b) < idsCRCAt+4 || b[0] != idsTag {
		return nil, 0, 0, bad
	}
	first = binary.BigEndian.Uint64(b[1:])
	crc = binary.LittleEndian.Uint32(b[idsCRCAt:])
	b = b[idsCRCAt+4:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, 0, 0, bad
	}
	b = b[k:]
	ids = make(map[string]batchOutcome, n)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > MaxBatchIDBytes || uint64(len(b)-k) < l+17 {
			return nil, 0, 0, bad
		}
		b = b[k:]
		o, err := decodeBatchOutcome(b[l : l+17])
		if err != nil {
			return nil, 0, 0, err
		}
		ids[string(b[:l])] = o
		b = b[l+17:]
	}
	if len(b) != 0 {
		return nil, 0, 0, bad
	}
	return ids, first, crc, nil
}

func firstIndex(es []wal.Entry) uint64 {
	if len(es) == 0 {
		return 0
	}
	return es[0].Index
}

// blockBytes returns the log block stored under a block key whose value is
// v: v itself, or the block read from its segment (appended to dst).
func (s *Store) blockBytes(v, dst []byte) ([]byte, error) {
	ref, ok, err := decodeBlockRef(v)
	if err != nil || !ok {
		return v, err
	}
	if s.segs == nil {
		return nil, fmt.Errorf("%w: log block in a segment, but the store has no segments", ErrCorrupt)
	}
	return s.segs.read(ref, dst)
}

// segmentLoop syncs Pebble's write-ahead log every second while there are
// commits (which bounds what a replay at open applies again), then removes
// the segments no block key points into any more.
func (s *Store) segmentLoop() {
	defer s.bg.Done()
	every := s.opts.collectEvery
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var synced uint64
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		sparse, err := s.collectSegments(&synced)
		if err != nil && !s.closed.Load() {
			s.opts.Logger.Warn("log segments not collected", "db", s.opts.Name, "err", err)
		}
		if err := s.compactSegments(sparse); err != nil && !s.closed.Load() {
			s.opts.Logger.Warn("sparse log segments not compacted", "db", s.opts.Name, "err", err)
		}
		if err := s.prepareSpare(); err != nil && !s.closed.Load() {
			s.opts.Logger.Warn("no spare log segment prepared", "db", s.opts.Name, "err", err)
		}
	}
}

// collectSegments removes the segments nothing points into any more, and
// returns the sparse segments to compact (sparseSegments).
func (s *Store) collectSegments(synced *uint64) ([]uint64, error) {
	s.engine.RLock()
	defer s.engine.RUnlock()
	if s.closed.Load() || s.segs == nil {
		return nil, nil
	}
	s.collect.Lock()
	defer s.collect.Unlock()
	a := s.applied.Load()
	if a == *synced {
		return nil, nil
	}
	snap := s.db.NewSnapshot()
	used, err := segUses(snap)
	var tail []byte
	if err == nil {
		tail, err = snapGet(snap, metaSegments)
	}
	var firstLogSeg uint64
	if err == nil {
		firstLogSeg, err = firstLogSegment(snap)
	}
	snap.Close()
	if err != nil || tail == nil {
		return nil, err
	}
	t, err := decodeSegTail(tail)
	if err != nil {
		return nil, err
	}
	// The state the snapshot saw, with nothing pointing into the segments
	// to remove and a replay starting at or after t, must be durable
	// before they go.
	if err := s.engineWrite(func() error { return s.db.LogData(nil, pebble.Sync) }); err != nil {
		return nil, err
	}
	s.m.engineSyncs.Inc()
	complete, err := s.segs.remove(func(seq uint64) bool {
		_, inUse := used[seq]
		return seq < t.seq && !inUse
	}, &s.gate, s.quit)
	if err != nil {
		return nil, err
	}
	if complete {
		*synced = a // else the next round tries again, writes or not
	}
	return sparseSegments(used, t.seq, firstLogSeg, s.segs.fileSize), nil
}

// sparseSegments picks the segments to compact, sparsest first: sealed,
// holding only blocks that left the log (retired, home of live values),
// and whose blocks fill less than a quarter of the file. Such a segment
// would otherwise stay whole for as long as one of its values lives.
func sparseSegments(used map[uint64]segUse, tail, firstLog uint64, fileSize func(seq uint64) int64) []uint64 {
	var picks []uint64
	for seq, u := range used {
		if seq < tail && seq < firstLog && u.bytes < fileSize(seq)/4 {
			picks = append(picks, seq)
		}
	}
	slices.SortFunc(picks, func(a, b uint64) int { return cmp.Or(cmp.Compare(used[a].bytes, used[b].bytes), cmp.Compare(a, b)) })
	return picks
}

// compactSegments has the committer free the retired blocks of the
// segments seqs (nothing if there are none). Close ends the wait (submit).
func (s *Store) compactSegments(seqs []uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	return s.submit(context.Background(), &request{kind: reqCompact, segments: seqs, done: make(chan struct{})})
}

// compactRetired frees the retired blocks in the segments seqs, sparsest
// first: their live values are copied out (inline records) and the blocks
// deleted, so that the segments are removed at the next collection. A run
// takes blocks while compactionTakes allows; the next run does the rest.
func (c *committer) compactRetired(seqs []uint64) error {
	type retired struct {
		b   uint64
		rec retiredRecord
	}
	in := make(map[uint64][]retired, len(seqs))
	for _, seq := range seqs {
		in[seq] = nil
	}
	it, err := c.s.db.NewIter(&pebble.IterOptions{LowerBound: metaRetiredBlock, UpperBound: prefixEnd(metaRetiredBlock)})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		b, valid := retiredKeyBlock(it.Key())
		if !valid {
			continue
		}
		v, found, err := c.lookup(logKey(b))
		if err != nil {
			return err
		}
		if !found {
			continue
		}
		ref, isRef, err := decodeBlockRef(v)
		if err != nil || !isRef {
			continue
		}
		if _, ok := in[ref.seq]; !ok {
			continue
		}
		rec, err := decodeRetired(it.Value())
		if err != nil {
			return err
		}
		in[ref.seq] = append(in[ref.seq], retired{b, rec})
	}
	if err := it.Error(); err != nil {
		return err
	}
	blocks, touched := 0, 0
	var live int64
	for _, seq := range seqs {
		took := false
		for _, r := range in[seq] {
			if !compactionTakes(blocks, live) {
				break
			}
			blk, err := c.readBlock(r.b)
			if err != nil {
				return err
			}
			if err := c.dropRetired(r.b, r.rec, blk); err != nil {
				return err
			}
			blocks, live, took = blocks+1, live+r.rec.liveBytes, true
		}
		if took {
			touched++
		}
	}
	c.s.m.segmentsCompacted.Add(float64(touched))
	return nil
}

const (
	maxBlocksPerCompaction = 4096
	// maxBytesPerCompaction bounds the live values a run copies out. They
	// all go into the group's one engine batch, which would otherwise
	// reach the live bytes of a quarter segment (16 MiB by default): a
	// batch that size is allocated by doubling, and one of half a
	// memtable or more is held as a memtable of its own until flushed,
	// which under churn kept tens of MB of heap for each compaction.
	maxBytesPerCompaction = 4 << 20
)

// compactionTakes reports whether a segment compaction that has taken
// blocks blocks, holding live bytes of live values, takes another: always
// a first one, then while both stay under their bounds.
func compactionTakes(blocks int, live int64) bool {
	return blocks == 0 || blocks < maxBlocksPerCompaction && live < maxBytesPerCompaction
}

// prepareSpare has the segments write a spare if they need one. It does
// not hold the engine lock while it writes (a Replace would make readers
// wait behind it): a spare written for a database replaced meanwhile
// fails its rename, or lands in the new one, where it is a spare too.
func (s *Store) prepareSpare() error {
	s.engine.RLock()
	g := s.segs
	s.engine.RUnlock()
	if s.closed.Load() || g == nil || s.px != nil || s.diskFull.Load() {
		return nil
	}
	// Never into the free-space reserve: leave it and another spare free.
	du, err := s.opts.FS.GetDiskUsage(s.opts.Dir)
	if !s.opts.recycleAnyway && (err != nil || du.AvailBytes < s.opts.MinFreeBytes+2*uint64(g.size)) {
		return nil
	}
	return g.prepareSpare(s.quit)
}

// firstLogSegment is the segment of the first block of the retained log
// held in a segment (blocks before it in the log are in Pebble); the
// segments before it hold only retired blocks. MaxUint64 if none is.
func firstLogSegment(snap *pebble.Snapshot) (uint64, error) {
	lr, err := logRangeAt(snap)
	if err != nil {
		return 0, err
	}
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: logKey(lr.First), UpperBound: []byte{prefixLog + 1}})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		ref, isRef, err := decodeBlockRef(it.Value())
		if err != nil {
			return 0, err
		}
		if isRef {
			return ref.seq, nil
		}
	}
	return math.MaxUint64, it.Error()
}

// snapGet returns a copy of key's value in snap, nil if absent.
func snapGet(snap *pebble.Snapshot, key []byte) ([]byte, error) {
	v, c, err := snap.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return append([]byte(nil), v...), nil
}
