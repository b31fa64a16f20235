package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quicksilver-kv/qs/internal/metrics"
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
// Records: mrb<BE64 block> → retiredRecord; mretired → retiredTotals.
// A count is only ever trusted to keep a block: before a block is deleted,
// the records pointing into it are looked up again.

var (
	mRetiredBlocks = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "retired_log_blocks",
		Help: "Log blocks dropped from the log but kept for the live values they hold."}, []string{"db"}))
	mRetiredBytes = metrics.MustRegister(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "retired_log_block_bytes",
		Help: "Stored bytes of the retired log blocks (live values and garbage)."}, []string{"db"}))
	mBlocksRetired = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "log_blocks_retired_total",
		Help: "Log blocks retired by retention instead of having their live values copied out."}, []string{"db"}))
	mRetiredFreed = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "retired_log_blocks_freed_total",
		Help: "Retired log blocks deleted once less than half of them was live (the rest copied out)."}, []string{"db"}))
	mRetiredRecounts = metrics.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Subsystem: subsystem, Name: "retired_log_block_recounts_total",
		Help: "Retired block live counts found wrong when checked against the records (and corrected); above 0 is a bug."}, []string{"db"}))
)

// retiredMetrics are the retired-block collectors of one database.
type retiredMetrics struct {
	blocks, bytes            prometheus.Gauge
	retired, freed, recounts prometheus.Counter
}

func newRetiredMetrics(db string) *retiredMetrics {
	l := prometheus.Labels{"db": db}
	return &retiredMetrics{
		blocks: mRetiredBlocks.With(l), bytes: mRetiredBytes.With(l),
		retired: mBlocksRetired.With(l), freed: mRetiredFreed.With(l), recounts: mRetiredRecounts.With(l),
	}
}

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

// retiredState is a retired block's record as the group changes it.
type retiredState struct {
	rec retiredRecord
	ok  bool // the record exists
}

// forEachLiveValue calls fn for every value of the log block blockFirst
// (its stored bytes blk) that a record will still point to once the group
// commits. Compressed blocks hold none.
func (c *committer) forEachLiveValue(blockFirst uint64, blk []byte, fn func(dataKey []byte, rec record, value []byte)) error {
	if len(blk) < 2 || wal.Compression(blk[1]) != wal.CompressNone {
		return nil // only uncompressed blocks hold values records point to
	}
	entries, err := wal.DecodeBlock(blk)
	if err != nil {
		return fmt.Errorf("%w: log block %d: %v", ErrCorrupt, blockFirst, err)
	}
	var k []byte
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
			var rec record
			var live bool
			k, rec, live, err = c.liveAt(k, op.Key, blockFirst, e.Index)
			if err != nil {
				return err
			}
			if live {
				fn(k, rec, op.Value)
			}
		}
	}
	return nil
}

// liveAt reports whether key's record will still point, once the group
// commits, at the value written at index into the log block blockFirst,
// and returns that record. k is a buffer for the key's data key, returned
// (grown) with it.
func (c *committer) liveAt(k, key []byte, blockFirst, index uint64) ([]byte, record, bool, error) {
	if !c.pointsInto(key, blockFirst) {
		return k, record{}, false, nil
	}
	k = dataKey(k, key)
	v, found, err := c.lookup(k)
	if err != nil || !found {
		return k, record{}, false, err
	}
	rec, err := decodeRecord(v)
	if err != nil || rec.kind != recInLog || rec.block != blockFirst || rec.index != index {
		return k, record{}, false, nil
	}
	return k, rec, true, nil
}

// liveRecord counts the live values of a block.
func (c *committer) liveRecord(blockFirst uint64, blk []byte) (retiredRecord, error) {
	r := retiredRecord{blockBytes: int64(len(blk))}
	err := c.forEachLiveValue(blockFirst, blk, func(_ []byte, rec record, _ []byte) {
		r.live++
		r.liveBytes += int64(rec.valueLen)
	})
	return r, err
}

// materialize rewrites, as inline records, the value records that still
// point into a log block about to be deleted. Keys the group itself
// rewrites are left alone: their new record is already in the batch.
func (c *committer) materialize(blockFirst uint64, blk []byte) error {
	return c.forEachLiveValue(blockFirst, blk, func(k []byte, rec record, value []byte) {
		c.buf = encodeInline(c.buf, rec.index, rec.attrs, value)
		c.batch.Set(k, c.buf, nil)
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
		c.retire(blockFirst, r)
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

// retire keeps a block leaving the log as the home of its live values.
func (c *committer) retire(blockFirst uint64, r retiredRecord) {
	c.batch.Set(retiredKey(blockFirst), r.encode(), nil)
	c.retired.blocks++
	c.retired.bytes += r.blockBytes
	c.retiredDirty = true
	c.rm.retired.Inc()
}

// release counts down the retired block holding the value a group op
// replaces (ks is the key's stored state). Keys whose value is not in a
// retired block are ignored.
func (c *committer) release(ks *keyState) error {
	if ks.logRec == nil || ks.logRec.block >= c.log.first {
		return nil
	}
	b := ks.logRec.block
	st := c.touched[b]
	if st == nil {
		st = &retiredState{}
		v, err := c.s.getMeta(retiredKey(b))
		switch {
		case errors.Is(err, pebble.ErrNotFound):
			// No record (written by a version that copied values out
			// instead): nothing to count.
		case err != nil:
			return fmt.Errorf("%w: read retired block record %d: %v", ErrWriteFailed, b, err)
		default:
			if st.rec, err = decodeRetired(v); err != nil {
				return err
			}
			st.ok = true
		}
		if c.touched == nil {
			c.touched = map[uint64]*retiredState{}
		}
		c.touched[b] = st
	}
	if st.ok {
		st.rec.live--
		st.rec.liveBytes -= int64(ks.valueLen)
	}
	return nil
}

// settleRetired writes the counts of the retired blocks the group's ops
// counted down, and deletes those left sparse or empty (copying out what
// is still live: the count is checked against the records first). A block
// that cannot be settled keeps its lowered count and the others are still
// settled; the errors are returned together.
func (c *committer) settleRetired() error {
	var errs []error
	for b, st := range c.touched {
		if !st.ok {
			continue
		}
		if st.rec.live > 0 && !st.rec.sparse() {
			c.batch.Set(retiredKey(b), st.rec.encode(), nil)
			continue
		}
		if err := c.freeRetired(b, st); err != nil {
			c.batch.Set(retiredKey(b), st.rec.encode(), nil)
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
		c.rm.recounts.Inc()
		c.s.opts.Logger.Warn("retired log block count corrected", "db", c.s.opts.Name, "block", b,
			"counted", st.rec.live, "found", actual.live)
		st.rec = actual
		if actual.live > 0 && !actual.sparse() {
			c.batch.Set(retiredKey(b), actual.encode(), nil)
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
	c.batch.Delete(retiredKey(b), nil)
	c.retired.blocks--
	c.retired.bytes -= rec.blockBytes
	c.retiredDirty = true
	c.rm.freed.Inc()
	return nil
}
