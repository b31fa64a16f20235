package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Retired log blocks.
//
// A value of 1 KiB or more is stored once, in its log block, and its
// record points there (an in-log record, see record.go). When retention
// drops a block from the log, the values records still point into must
// live on. Copying them out (inline records) writes every such value a
// second time, in the commit that drops the block: under a steady stream
// of large new values, once the log is full, every commit carried the
// values of the block it dropped as well as its own, doubling the bytes
// of every fsync. Instead, a block that is still mostly live is retired:
// it leaves the log (log readers, replication and the hash chain no longer
// see it) but stays where it is, as the home of its live values, with a
// record counting them. Each overwrite or delete of one of them counts it
// down, in the same commit. Once fewer than half of the block's bytes are
// live, the rest is copied out (inline records) and the block deleted; a
// block found with nothing live is deleted at once. So retired blocks hold
// at most as much garbage as live data, and a value is copied out at most
// once, when most of its block is gone.
//
// History versions (history.go) point into log blocks too: an overwritten
// or deleted value in a log block stays there, and its version is an
// in-log record. A block's live values are the value records and the
// history versions pointing into it; overwriting a value moves its
// reference from the one to the other (the count does not change), and
// history GC removing a version counts its block down. A block dropped
// with references left has its values copied out for both.
//
// Records: mrb<BE64 block> → retiredRecord; mretired → retiredTotals.
// A count is only ever trusted to keep a block: before a block is deleted,
// the records pointing into it are looked up again.

// retiredRecord counts the live values of one retired block.
type retiredRecord struct {
	live       int64 // values whose records point into the block
	liveBytes  int64 // their bytes
	blockBytes int64 // the block's stored size
}

func (r retiredRecord) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(r.live))
	b = binary.BigEndian.AppendUint64(b, uint64(r.liveBytes))
	return binary.BigEndian.AppendUint64(b, uint64(r.blockBytes))
}

func decodeRetired(b []byte) (retiredRecord, error) {
	var r retiredRecord
	if len(b) != 24 {
		return r, fmt.Errorf("%w: retired block record of %d bytes", ErrCorrupt, len(b))
	}
	r.live = int64(binary.BigEndian.Uint64(b))
	r.liveBytes = int64(binary.BigEndian.Uint64(b[8:]))
	r.blockBytes = int64(binary.BigEndian.Uint64(b[16:]))
	return r, nil
}

// sparse reports whether so little of the block is live that its live
// values are better copied out.
func (r retiredRecord) sparse() bool { return 2*r.liveBytes < r.blockBytes }

// retiredTotals counts the retired blocks and their stored bytes.
type retiredTotals struct {
	blocks int64
	bytes  int64
}

func (t retiredTotals) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(t.blocks))
	return binary.BigEndian.AppendUint64(b, uint64(t.bytes))
}

func decodeRetiredTotals(b []byte) (retiredTotals, error) {
	var t retiredTotals
	if len(b) != 16 {
		return t, fmt.Errorf("%w: retired totals record of %d bytes", ErrCorrupt, len(b))
	}
	t.blocks = int64(binary.BigEndian.Uint64(b))
	t.bytes = int64(binary.BigEndian.Uint64(b[8:]))
	return t, nil
}

// retiredKey is the key of block's retired record.
func retiredKey(block uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), metaRetiredBlock...), block)
}

// retiredKeyBlock returns the block of a retired record's key.
func retiredKeyBlock(k []byte) (uint64, bool) {
	if len(k) != len(metaRetiredBlock)+8 || string(k[:len(metaRetiredBlock)]) != string(metaRetiredBlock) {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[len(metaRetiredBlock):]), true
}

// loadRetiredTotals reads the totals; a database that never retired a
// block has none.
func (s *Store) loadRetiredTotals() (retiredTotals, error) {
	v, err := s.getMeta(metaRetired)
	if errors.Is(err, pebble.ErrNotFound) {
		return retiredTotals{}, nil
	}
	if err != nil {
		return retiredTotals{}, err
	}
	return decodeRetiredTotals(v)
}

// retention is the committer's state of log retention (log.go,
// truncateLog) and of the retired log blocks: when retention last ran,
// the retired blocks' totals and the metrics of both.
type retention struct {
	// blocks dropped from the log, by what was read
	droppedBySummary, droppedByBlock *counter
	// when retention last ran (Options.Elapsed), if it has
	lastGC time.Duration
	gcRan  bool
	totals retiredTotals
	dirty  bool // the group changed totals
	m      *retiredMetrics
	lkey   []byte // a key buffer
}

// newRetention loads the retired blocks' totals and publishes them.
func newRetention(s *Store) (retention, error) {
	t, err := s.loadRetiredTotals()
	if err != nil {
		return retention{}, err
	}
	r := retention{totals: t, m: &s.m.retired, droppedBySummary: &s.m.droppedBySummary, droppedByBlock: &s.m.droppedByBlock}
	r.publish()
	return r, nil
}

// due reports whether retention runs now, elapsed (Options.Elapsed) into
// the process: at most once a second unless the log is over a limit.
func (r *retention) due(elapsed time.Duration, over bool) bool {
	if !over && r.gcRan && elapsed-r.lastGC < time.Second && elapsed >= r.lastGC {
		return false
	}
	r.gcRan, r.lastGC = true, elapsed
	return true
}

// dropped counts the blocks a retention run dropped from the log, by
// whether their summary or the block itself was read.
func (r *retention) dropped(bySummary, byBlock int) {
	r.droppedBySummary.Add(float64(bySummary))
	r.droppedByBlock.Add(float64(byBlock))
}

// retire keeps a block leaving the log (in batch b) as the home of its
// live values.
func (r *retention) retire(b *pebble.Batch, blockFirst uint64, rec retiredRecord) {
	b.Set(retiredKey(blockFirst), rec.encode(), nil)
	r.totals.blocks++
	r.totals.bytes += rec.blockBytes
	r.dirty = true
	r.m.retired.Inc()
}

// free deletes the record of retired block (in batch b), once the block
// is dropped.
func (r *retention) free(b *pebble.Batch, block uint64, rec retiredRecord) {
	b.Delete(retiredKey(block), nil)
	r.totals.blocks--
	r.totals.bytes -= rec.blockBytes
	r.dirty = true
	r.m.freed.Inc()
}

// writeTotals puts the totals in batch b if the group changed them.
func (r *retention) writeTotals(b *pebble.Batch) {
	if r.dirty {
		b.Set(metaRetired, r.totals.encode(), nil)
	}
}

// publish exports the committed totals.
func (r *retention) publish() {
	r.m.blocks.Set(float64(r.totals.blocks))
	r.m.bytes.Set(float64(r.totals.bytes))
}

// retiredState is a retired block's record as the group changes it.
type retiredState struct {
	rec retiredRecord
	ok  bool // the record exists
}

// liveRef is a reference into a log block: a value record, or a history
// version (hist, ending at until).
type liveRef struct {
	rec   record
	hist  bool
	until uint64
}

// forEachLiveValue calls fn for every value of the log block blockFirst
// (its stored bytes blk) that a value record or a history version will
// still point to once the group commits. Compressed blocks hold none.
func (c *committer) forEachLiveValue(blockFirst uint64, blk []byte, fn func(key []byte, ref liveRef, value []byte)) error {
	if len(blk) < 2 || wal.Compression(blk[1]) != wal.CompressNone {
		return nil // only uncompressed blocks hold values records point to
	}
	entries, err := wal.DecodeBlock(blk)
	if err != nil {
		return fmt.Errorf("%w: log block %d: %v", ErrCorrupt, blockFirst, err)
	}
	var later map[string]bool
	for _, e := range entries {
		// Of several ops of an entry on one key, only the last can have
		// left a record pointing into the block: walk them backwards.
		clear(later)
		for i := len(e.Ops) - 1; i >= 0; i-- {
			op := e.Ops[i]
			if len(e.Ops) > 1 {
				if later == nil {
					later = map[string]bool{}
				}
				if later[string(op.Key)] {
					continue
				}
				later[string(op.Key)] = true
			}
			if op.Type != wal.OpSet || len(op.Value) < minInLogBytes {
				continue
			}
			ref, live, err := c.liveAt(op.Key, blockFirst, e.Index)
			if err != nil {
				return err
			}
			if live {
				fn(op.Key, ref, op.Value)
			}
		}
	}
	return nil
}

// liveAt reports whether key's record or one of its history versions will
// still point, once the group commits, at the value written at index into
// the log block blockFirst, and returns that reference.
func (c *committer) liveAt(key []byte, blockFirst, index uint64) (liveRef, bool, error) {
	if c.pointsInto(key, blockFirst) {
		c.ret.lkey = dataKey(c.ret.lkey, key)
		v, found, err := c.lookup(c.ret.lkey)
		if err != nil {
			return liveRef{}, false, err
		}
		if found {
			rec, err := decodeRecord(v)
			if err == nil && rec.kind == recInLog && rec.block == blockFirst && rec.index == index {
				return liveRef{rec: rec}, true, nil
			}
		}
	}
	return c.historyAt(key, blockFirst, index)
}

// historyAt reports whether the history version of key written at index
// will still point into the log block blockFirst once the group commits.
func (c *committer) historyAt(key []byte, blockFirst, index uint64) (liveRef, bool, error) {
	if !c.hw.rec.enabled {
		return liveRef{}, false, nil
	}
	if st, ok := c.g.hrefs[histRefKey{string(key), index}]; ok {
		live := !st.gone && st.rec.block == blockFirst
		return liveRef{rec: st.rec, hist: true, until: st.until}, live, nil
	}
	// The first version ending after index is the one written at index,
	// if any is.
	c.ret.lkey = histVersionKey(c.ret.lkey, key, index+1)
	it, err := c.iter()
	if err != nil {
		return liveRef{}, false, err
	}
	if !it.SeekGE(c.ret.lkey) {
		return liveRef{}, false, it.Error()
	}
	k := it.Key()
	if len(k) != len(c.ret.lkey) || !bytes.Equal(k[:len(k)-8], c.ret.lkey[:len(c.ret.lkey)-8]) {
		return liveRef{}, false, nil
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return liveRef{}, false, err
	}
	rec, err := decodeRecord(v)
	if err != nil || rec.kind != recInLog || rec.block != blockFirst || rec.index != index {
		return liveRef{}, false, nil
	}
	return liveRef{rec: rec, hist: true, until: binary.BigEndian.Uint64(k[len(k)-8:])}, true, nil
}

// histRefKey names the version of a key written at an index.
type histRefKey struct {
	key   string
	index uint64
}

// histRefState is what the group did to a version pointing into a log
// block: recorded it (rec, ending at until) or removed it (gone).
type histRefState struct {
	rec   record
	until uint64
	gone  bool
}

// liveRecord counts the live values of a block.
func (c *committer) liveRecord(blockFirst uint64, blk []byte) (retiredRecord, error) {
	r := retiredRecord{blockBytes: int64(len(blk))}
	err := c.forEachLiveValue(blockFirst, blk, func(_ []byte, ref liveRef, _ []byte) {
		r.live++
		r.liveBytes += int64(ref.rec.valueLen)
	})
	return r, err
}

// materialize rewrites, as inline records, the value records and history
// versions that still point into a log block about to be deleted. Keys
// the group itself rewrites are left alone: their new record is already
// in the batch. A version keeps its size in the history's count
// (historySize).
func (c *committer) materialize(blockFirst uint64, blk []byte) error {
	return c.forEachLiveValue(blockFirst, blk, func(key []byte, ref liveRef, value []byte) {
		c.g.buf = encodeInline(c.g.buf, ref.rec.index, ref.rec.attrs, value)
		if ref.hist {
			c.ret.lkey = histVersionKey(c.ret.lkey, key, ref.until)
			c.g.noteHistGone(key, ref.rec.index)
		} else {
			c.ret.lkey = dataKey(c.ret.lkey, key)
		}
		c.g.batch.Set(c.ret.lkey, c.g.buf, nil)
		c.s.m.materialized.Inc()
	})
}

// leaveLog handles a block that retention drops from the log, r counting
// its live values: deleted if nothing in it is live any more, its live
// values copied out first if they are few, else retired. blk is the
// block, or nil if the caller did not read it (a summary told it r): it
// is then read only to copy values out.
func (c *committer) leaveLog(blockFirst uint64, r retiredRecord, blk []byte) error {
	if r.live > 0 && !r.sparse() {
		c.ret.retire(c.g.batch, blockFirst, r)
		return nil
	}
	if r.live > 0 {
		if blk == nil {
			var err error
			if blk, err = c.readBlock(blockFirst); err != nil {
				return err
			}
		}
		if err := c.materialize(blockFirst, blk); err != nil {
			return err
		}
	}
	return c.dropBlock(blockFirst)
}

// readBlock returns a copy of log block b (the lookups that follow move
// the iterator it was read with).
func (c *committer) readBlock(b uint64) ([]byte, error) {
	blk, found, err := c.lookup(logKey(b))
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w: log block %d is missing", ErrCorrupt, b)
	}
	if _, isRef, err := decodeBlockRef(blk); isRef || err != nil {
		return c.s.blockBytes(blk, nil)
	}
	return append([]byte(nil), blk...), nil
}

// release counts down the retired block holding the value a group op
// replaces (ks is the key's stored state). Keys whose value is not in a
// retired block are ignored.
func (c *committer) release(ks *keyState) error {
	if ks.logRec == nil {
		return nil
	}
	return c.countDown(ks.logRec.block, int64(ks.valueLen))
}

// countDown counts one value of n bytes out of block b, if b is retired.
func (c *committer) countDown(b uint64, n int64) error {
	if b >= c.log.first {
		return nil
	}
	st, err := c.touch(b)
	if err != nil {
		return err
	}
	if st.ok {
		st.rec.live--
		st.rec.liveBytes -= n
	}
	return nil
}

// touch returns the group's state of retired block b, loading its record
// the first time; settleRetired writes or frees the blocks touched.
func (c *committer) touch(b uint64) (*retiredState, error) {
	st := c.g.touched[b]
	if st == nil {
		st = &retiredState{}
		v, err := c.s.getMeta(retiredKey(b))
		switch {
		case errors.Is(err, pebble.ErrNotFound):
			// No record (written by a version that copied values out
			// instead): nothing to count.
		case err != nil:
			return nil, fmt.Errorf("%w: read retired block record %d: %v", ErrWriteFailed, b, err)
		default:
			if st.rec, err = decodeRetired(v); err != nil {
				return nil, err
			}
			st.ok = true
		}
		if c.g.touched == nil {
			c.g.touched = map[uint64]*retiredState{}
		}
		c.g.touched[b] = st
	}
	return st, nil
}

// settleRetired writes the counts of the retired blocks the group's ops
// counted down, and deletes those left sparse or empty (copying out what
// is still live: the count is checked against the records first). A block
// that cannot be settled keeps its lowered count and the others are still
// settled; the errors are returned together.
func (c *committer) settleRetired() error {
	for _, b := range c.s.sparseRetired {
		// Left sparse by a recount at open: freed like a block counted down.
		if _, err := c.touch(b); err != nil {
			return err
		}
	}
	c.s.sparseRetired = nil
	var errs []error
	for b, st := range c.g.touched {
		if !st.ok {
			continue
		}
		if st.rec.live > 0 && !st.rec.sparse() {
			c.g.batch.Set(retiredKey(b), st.rec.encode(), nil)
			continue
		}
		if err := c.freeRetired(b, st); err != nil {
			c.g.batch.Set(retiredKey(b), st.rec.encode(), nil)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// freeRetired deletes retired block b, sparse or empty by the group's
// count, once the count is checked; a wrong count is corrected and written
// instead when the block must stay.
func (c *committer) freeRetired(b uint64, st *retiredState) error {
	blk, err := c.readBlock(b)
	if err != nil {
		return fmt.Errorf("retired: %w", err)
	}
	actual, err := c.liveRecord(b, blk)
	if err != nil {
		return err
	}
	if actual.live != st.rec.live || actual.liveBytes != st.rec.liveBytes {
		c.ret.m.recounts.Inc()
		c.s.opts.Logger.Warn("retired log block count corrected", "db", c.s.opts.Name, "block", b,
			"counted", st.rec.live, "found", actual.live)
		st.rec = actual
		if actual.live > 0 && !actual.sparse() {
			c.g.batch.Set(retiredKey(b), actual.encode(), nil)
			return nil
		}
	}
	return c.dropRetired(b, st.rec, blk)
}

// dropRetired deletes retired block b (its stored bytes blk), after
// copying its live values out into records of their own.
func (c *committer) dropRetired(b uint64, rec retiredRecord, blk []byte) error {
	if err := c.materialize(b, blk); err != nil {
		return err
	}
	if err := c.dropBlock(b); err != nil {
		return err
	}
	c.ret.free(c.g.batch, b, rec)
	return nil
}

// metaRetiredRecount, present, asks the next open for writing to recount
// every retired block (recountRetired): it is written in the batch that
// drops the history, whose versions the counts include.
var metaRetiredRecount = []byte("mrecount")

// recountRetired sets, if asked (metaRetiredRecount), every retired
// block's count to the value records and history versions pointing into
// it now, in one batch that removes the request; blocks left sparse are
// freed by the next commit (settleRetired). It runs at open, once the
// segments are open, before the committer starts.
func (s *Store) recountRetired() error {
	if _, err := s.getMeta(metaRetiredRecount); errors.Is(err, pebble.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	c := &committer{s: s}
	hb, err := s.getMeta(metaHistory)
	if err == nil {
		c.hw.rec, err = decodeHistoryRecord(hb)
	}
	if err != nil && !errors.Is(err, pebble.ErrNotFound) {
		return err
	}
	defer func() {
		if c.g.it != nil {
			c.g.it.Close()
		}
	}()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: metaRetiredBlock, UpperBound: prefixEnd(metaRetiredBlock)})
	if err != nil {
		return err
	}
	defer it.Close()
	b := s.db.NewBatch()
	defer b.Close()
	var sparse []uint64
	for ok := it.First(); ok; ok = it.Next() {
		block, valid := retiredKeyBlock(it.Key())
		if !valid {
			continue
		}
		stored, err := decodeRetired(it.Value())
		if err != nil {
			return err
		}
		blk, err := c.readBlock(block)
		if err != nil {
			return err
		}
		actual, err := c.liveRecord(block, blk)
		if err != nil {
			return err
		}
		if actual != stored {
			b.Set(retiredKey(block), actual.encode(), nil)
		}
		if actual.live == 0 || actual.sparse() {
			sparse = append(sparse, block)
		}
	}
	if err := it.Error(); err != nil {
		return err
	}
	b.Delete(metaRetiredRecount, nil)
	if err := s.engineWrite(func() error { return b.Commit(pebble.Sync) }); err != nil {
		return err
	}
	s.sparseRetired = sparse
	return nil
}
