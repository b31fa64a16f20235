package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Cond is a compare-and-swap condition: the key's index (the index of the
// entry that last wrote it) must equal Index; Index 0 means the key must not
// exist.
type Cond struct {
	Key   []byte
	Index uint64
}

// Batch is one atomic write: all conditions hold and all ops apply, or
// nothing does.
type Batch struct {
	Ops   []wal.Op
	Conds []Cond
	// ID, when set, makes the batch idempotent: a batch with an ID seen in
	// the last IdempotencyWindow is not applied again; it gets the first
	// outcome, with Duplicate set (see idempotency.go).
	ID []byte
}

// WriteResult tells where a write landed. Changed is false when every op
// was a no-op (identical rewrite, delete of a missing key): no entry was
// written and Index is the applied index the write was evaluated against.
type WriteResult struct {
	Index   uint64
	Changed bool
	// Duplicate: the batch's ID was seen before; nothing was applied now
	// and Index and Changed are those of the first attempt.
	Duplicate bool
}

type requestKind uint8

const (
	reqWrite requestKind = iota
	reqApply
	reqHeartbeat
	reqReplace // install the ready snapshot (see snapshot.go)
	reqRaft    // apply committed Raft commands (see raftapply.go)
	reqRaftReset
	reqCache // proxy: admit or evict values (see proxy.go)
	// reqCompact frees the retired blocks of a sparse log segment
	// (segstore.go); it runs alone
	reqCompact
)

type request struct {
	kind    requestKind
	batch   Batch
	entries []wal.Entry
	cmds    []RaftCommand // reqRaft
	results []RaftResult  // reqRaft
	cache   *cacheChange  // reqCache
	segment uint64        // reqCompact
	size    int
	res     WriteResult
	err     error
	done    chan struct{}
}

// Write commits b durably as one log entry and returns its index. It is
// for the root only; replicas use Apply. The committer reads b's keys and
// values until the write is done: the caller must not change them before
// Write returns, nor ever if it returns a context error (the write may
// still commit).
func (s *Store) Write(ctx context.Context, b Batch) (WriteResult, error) {
	if s.opts.Proxy != nil {
		return WriteResult{}, fmt.Errorf("%w: database %s is a proxy", ErrNotRoot, s.opts.Name)
	}
	if s.raftApplied.Load() > 0 {
		return WriteResult{}, errRaftOnly
	}
	size, err := s.validate(b)
	if err != nil {
		s.m.writeErrors.WithLabelValues(errorKind(err)).Inc()
		return WriteResult{}, err
	}
	r := &request{kind: reqWrite, batch: b, size: size, done: make(chan struct{})}
	if err := s.submit(ctx, r); err != nil {
		return WriteResult{}, err // r may still be in the committer's hands
	}
	return r.res, nil
}

// Heartbeat writes an entry carrying only the clock, so replicas can
// measure their lag when no data changes.
func (s *Store) Heartbeat(ctx context.Context) (uint64, error) {
	if s.raftApplied.Load() > 0 {
		return 0, errRaftOnly
	}
	r := &request{kind: reqHeartbeat, done: make(chan struct{})}
	if err := s.submit(ctx, r); err != nil {
		return 0, err // r may still be in the committer's hands
	}
	return r.res.Index, nil
}

// Apply appends entries received from another node: they must continue
// the applied log (index and hash chain) and are committed durably as one
// batch. Nothing is applied if any entry does not follow.
func (s *Store) Apply(ctx context.Context, entries []wal.Entry) error {
	if s.raftApplied.Load() > 0 {
		return errRaftOnly
	}
	size := 0
	for i := range entries {
		size += entries[i].BodySize()
	}
	r := &request{kind: reqApply, entries: entries, size: size, done: make(chan struct{})}
	return s.submit(ctx, r)
}

func (s *Store) submit(ctx context.Context, r *request) error {
	if s.opts.ReadOnly {
		return fmt.Errorf("%w: opened read-only", ErrClosed)
	}
	select {
	case s.reqs <- r:
	case <-s.quit:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-r.done:
		return r.err
	case <-s.stopped:
		select {
		case <-r.done:
			return r.err
		default:
			return ErrClosed
		}
	case <-ctx.Done():
		return fmt.Errorf("%w (the write may still commit)", ctx.Err())
	}
}

// ValidateBatch checks b as Write does (shape and the store's configured
// limits), without writing it. An HA root's member checks a write with it
// before proposing it (see ApplyRaft).
func (s *Store) ValidateBatch(b Batch) error {
	_, err := s.validate(b)
	if err != nil {
		s.m.writeErrors.WithLabelValues(errorKind(err)).Inc()
	}
	return err
}

// batchLimits are the limits a batch is checked against.
type batchLimits struct{ keyBytes, valueBytes, ops, bytes int }

// formatLimits are the log format's own limits: what ApplyRaft checks a
// committed command against, the same on every member whatever its
// configured limits.
var formatLimits = batchLimits{keyBytes: wal.MaxKeyLen, valueBytes: wal.MaxValueLen, ops: wal.MaxOps, bytes: math.MaxInt}

func (s *Store) validate(b Batch) (int, error) {
	return validateBatch(b, batchLimits{keyBytes: s.opts.MaxKeyBytes, valueBytes: s.opts.MaxValueBytes, ops: s.opts.MaxBatchOps, bytes: s.opts.MaxBatchBytes})
}

func validateBatch(b Batch, l batchLimits) (int, error) {
	if len(b.Ops) == 0 {
		return 0, fmt.Errorf("%w: empty batch", ErrInvalid)
	}
	if len(b.Ops) > l.ops {
		return 0, fmt.Errorf("%w: %d ops in a batch, limit %d", ErrTooLarge, len(b.Ops), l.ops)
	}
	if len(b.ID) > MaxBatchIDBytes {
		return 0, fmt.Errorf("%w: batch id of %d bytes, limit %d", ErrTooLarge, len(b.ID), MaxBatchIDBytes)
	}
	if len(b.Conds) > l.ops {
		return 0, fmt.Errorf("%w: %d conditions in a batch, limit %d", ErrTooLarge, len(b.Conds), l.ops)
	}
	size := 0
	checkKey := func(k []byte) error {
		if len(k) == 0 {
			return fmt.Errorf("%w: empty key", ErrInvalid)
		}
		if len(k) > l.keyBytes {
			return fmt.Errorf("%w: key of %d bytes, limit %d", ErrTooLarge, len(k), l.keyBytes)
		}
		return nil
	}
	for _, c := range b.Conds {
		if err := checkKey(c.Key); err != nil {
			return 0, err
		}
	}
	for _, op := range b.Ops {
		if err := checkKey(op.Key); err != nil {
			return 0, err
		}
		switch op.Type {
		case wal.OpSet:
			if len(op.Value) > l.valueBytes {
				return 0, fmt.Errorf("%w: value of %d bytes, limit %d", ErrTooLarge, len(op.Value), l.valueBytes)
			}
		case wal.OpDelete:
			if len(op.Value) != 0 {
				return 0, fmt.Errorf("%w: delete with a value", ErrInvalid)
			}
		default:
			return 0, fmt.Errorf("%w: unknown op type %d", ErrInvalid, op.Type)
		}
		size += len(op.Key) + len(op.Value)
	}
	if size > l.bytes {
		return 0, fmt.Errorf("%w: batch of %d bytes, limit %d", ErrTooLarge, size, l.bytes)
	}
	return size, nil
}

// committer is the state owned by the commit loop: the log tail and the
// counters, and per-group scratch space.
type committer struct {
	s     *Store
	last  appliedRecord
	log   logRecord
	stats statsRecord

	// per group
	batch *pebble.Batch
	it    *pebble.Iterator // lookups of committed state, per group
	// inLog holds the value records to write once the group's block is
	// finished: in-log records if it is stored uncompressed, inline ones
	// otherwise. A later op on the same key in the group removes its entry.
	inLog      map[string]pendingValue
	offs       []int
	overlay    map[string]*keyState
	blk        wal.BlockBuilder
	blockFirst uint64
	entries    int
	buf, kbuf  []byte
	sumBuf     []byte // a block summary (summary.go)
	// blocks dropped from the log by retention, by what was read
	droppedBySummary, droppedByBlock prometheus.Counter
	lastGC                           time.Time
	// ids are the outcomes of the group's batches with an ID.
	ids          map[string]batchOutcome
	lastIDExpiry time.Time
	// Retired log blocks (retire.go): the totals, and the blocks the
	// group's ops counted down.
	retired      retiredTotals
	retiredDirty bool
	touched      map[uint64]*retiredState
	rm           *retiredMetrics

	// eval turns commands into entries (evaluate.go).
	eval evaluator

	// Raft apply (raftapply.go): the last applied Raft index; whether the
	// store applies a Raft log.
	raftIndex uint64
	raft      bool

	// MVCC history (history.go).
	hist                   historyRecord
	histDirty              bool
	lastHistGC             time.Time
	entryTime              int64 // of the entry being appended
	hbuf, hkey, tkey, tval []byte

	// Proxy stores only (proxy.go).
	px          *proxyState
	pstats      proxyRecord
	pxDirty     bool
	windowFloor uint64 // values written at or below it are stored remote

	// Log segments (segment.go): whether the group appended its block to
	// a segment; the block a replay at open applies again.
	appended  bool
	replay    *blockRef
	replayEnd int64                   // after the replayed block's frames
	replayIDs map[string]batchOutcome // the replayed group's outcomes
	idsBuf    []byte
	// The group's changes of what points into each segment.
	segDelta   map[uint64]segUse
	logDropped int64 // log bytes retention dropped in this group
}

// keyState is what the committer knows of a key: from the store, then
// updated by the ops of the group.
type keyState struct {
	exists   bool
	index    uint64
	value    []byte // nil for a chunked value not loaded
	valueLen int
	valueCRC uint32 // valid when chunks > 0
	chunks   int
	corrupt  bool    // the stored record failed its CRC: chunks unknown
	logRec   *record // the stored in-log record, when the value is in the log
	remote   bool    // proxy: the value is not stored here (valueCRC is set unless corrupt)
}

func newCommitter(s *Store) (*committer, error) {
	c := &committer{s: s, overlay: map[string]*keyState{}, inLog: map[string]pendingValue{}}
	c.eval = evaluator{idempotencyWindow: s.opts.IdempotencyWindow.Nanoseconds()}
	var err error
	if c.last, err = s.readApplied(); err != nil {
		return nil, err
	}
	v, err := s.getMeta(metaLog)
	if err != nil {
		return nil, err
	}
	if c.log, err = decodeLogRecord(v); err != nil {
		return nil, err
	}
	if v, err = s.getMeta(metaStats); err != nil {
		return nil, err
	}
	if c.stats, err = decodeStats(v); err != nil {
		return nil, err
	}
	if c.retired, err = s.loadRetiredTotals(); err != nil {
		return nil, err
	}
	c.rm = newRetiredMetrics(s.opts.Name)
	c.droppedBySummary = mBlocksDropped.WithLabelValues(s.opts.Name, "summary")
	c.droppedByBlock = mBlocksDropped.WithLabelValues(s.opts.Name, "block")
	c.rm.blocks.Set(float64(c.retired.blocks))
	c.rm.bytes.Set(float64(c.retired.bytes))
	if c.raftIndex, err = s.readRaftApplied(); err != nil {
		return nil, err
	}
	if v, err = s.getMeta(metaHistory); err != nil {
		return nil, err
	}
	if c.hist, err = decodeHistoryRecord(v); err != nil {
		return nil, err
	}
	if err := c.loadProxy(); err != nil {
		return nil, err
	}
	c.segDelta = map[uint64]segUse{}
	return c, nil
}

func (c *committer) commit(group []*request) {
	s := c.s
	start := time.Now()
	base, baseLog, baseStats, baseRaft, baseRetired := c.last, c.log, c.stats, c.raftIndex, c.retired
	baseHist, basePx := c.hist, c.pstats
	c.histDirty, c.pxDirty, c.logDropped = false, false, 0
	c.batch = s.db.NewBatch()
	defer func() {
		c.batch.Close()
		c.batch = nil
		if c.it != nil {
			c.it.Close()
			c.it = nil
		}
	}()
	clear(c.overlay)
	clear(c.inLog)
	clear(c.ids)
	if c.replay != nil && len(c.replayIDs) > 0 {
		if c.ids == nil {
			c.ids = map[string]batchOutcome{}
		}
		maps.Copy(c.ids, c.replayIDs)
	}
	clear(c.touched)
	c.retiredDirty = false
	c.blk.Reset()
	c.entries = 0

	// A block being replayed is durable already: the space it needs is
	// taken.
	if c.replay == nil {
		if err := c.checkSpace(); err != nil {
			for _, r := range group {
				r.err = err
				s.m.writeErrors.WithLabelValues(errorKind(err)).Inc()
				close(r.done)
			}
			return
		}
	}

	// A durable group's block goes to the log segments; the others' (Raft
	// commands, a proxy's cache) stay in Pebble, which their own
	// durability rules cover, and so do a proxy's (whose blocks retention
	// drops within its window).
	segmented := s.segs != nil && s.px == nil && !s.opts.blocksInPebble && c.needsSync(group)
	c.appended = false
	clear(c.segDelta)

	var groupErr error
	for _, r := range group {
		switch r.kind {
		case reqWrite:
			groupErr = c.evalWrite(r, command{batch: r.batch, time: s.opts.Now().UnixNano()}, rootRole{})
		case reqApply:
			groupErr = c.prepareApply(r)
		case reqRaft:
			groupErr = c.prepareRaft(r)
		case reqRaftReset:
			c.raftIndex = 0
		case reqHeartbeat:
			groupErr = c.evalWrite(r, command{heartbeat: true, time: s.opts.Now().UnixNano()}, rootRole{})
		case reqCache:
			groupErr = c.prepareCache(r)
		case reqCompact:
			groupErr = c.compactRetired(r.segment)
		}
		if groupErr != nil {
			break
		}
	}
	if groupErr == nil && (c.blk.Len() > 0 || len(c.ids) > 0 || c.raftIndex != baseRaft || c.pxDirty || len(c.segDelta) > 0) {
		if c.raftIndex != baseRaft {
			c.batch.Set(metaRaft, encodeRaftIndex(c.raftIndex), nil)
		}
		var blkLen int
		var uncompressed bool
		if c.blk.Len() > 0 {
			var err error
			if blkLen, uncompressed, err = c.setBlock(segmented); err != nil {
				groupErr = classifyCommitError(err)
			}
		}
		if groupErr == nil && c.blk.Len() > 0 {
			c.sumBuf = c.encodeSummary(c.sumBuf, blkLen, uncompressed)
			c.batch.Set(summaryKey(c.blockFirst), c.sumBuf, nil)
			c.writeInLogRecords(uncompressed)
			c.log.bytes += int64(blkLen + 9)
			s.m.logBlockBytes.Observe(float64(blkLen))
			if err := c.settleRetired(); err != nil {
				s.opts.Logger.Warn("retired log blocks not settled", "db", s.opts.Name, "err", err)
			}
			logBytes := c.log.bytes
			if err := c.truncateLog(); err != nil {
				s.opts.Logger.Warn("log retention skipped", "db", s.opts.Name, "err", err)
			}
			c.logDropped = logBytes - c.log.bytes
			if err := c.gcHistory(); err != nil {
				s.opts.Logger.Warn("history GC skipped", "db", s.opts.Name, "err", err)
			}
			c.batch.Set(metaApplied, c.last.encode(), nil)
			c.batch.Set(metaLog, c.log.encode(), nil)
			c.batch.Set(metaStats, c.stats.encode(), nil)
		}
		if c.retiredDirty { // retention, or a segment's compaction
			c.batch.Set(metaRetired, c.retired.encode(), nil)
		}
		if err := c.writeBatchIDs(); err != nil {
			s.opts.Logger.Warn("batch id expiry skipped", "db", s.opts.Name, "err", err)
		}
		if err := c.writeRoleMeta(); err != nil {
			s.opts.Logger.Warn("history and proxy state not recorded", "db", s.opts.Name, "err", err)
		}
		if err := c.writeSegUse(); err != nil && groupErr == nil {
			groupErr = fmt.Errorf("%w: segment use: %v", ErrWriteFailed, err)
		}
		syncStart := time.Now()
		if groupErr == nil && c.appended {
			// The durability point: Pebble's batch follows, unsynced.
			if err := s.segs.sync(); err != nil {
				groupErr = classifyCommitError(err)
			}
		}
		if groupErr == nil {
			if err := s.engineWrite(func() error { return c.batch.Commit(c.writeOptions(group)) }); err != nil {
				groupErr = classifyCommitError(err)
			}
		}
		s.m.syncSeconds.Observe(time.Since(syncStart).Seconds())
	}
	if segmented {
		if groupErr != nil {
			s.segs.fail() // abandons the group's frames, if it appended any
		} else if c.appended {
			s.segs.done()
		}
	}
	if groupErr != nil {
		c.last, c.log, c.stats, c.raftIndex, c.retired = base, baseLog, baseStats, baseRaft, baseRetired
		c.hist, c.pstats = baseHist, basePx
		for _, r := range group {
			if r.err == nil {
				r.err = groupErr
			}
			r.res = WriteResult{}
			r.results = nil
		}
		s.opts.Logger.Error("commit failed", "db", s.opts.Name, "err", groupErr)
	} else {
		s.raftApplied.Store(c.raftIndex)
		c.publishRoleMeta()
		c.rm.blocks.Set(float64(c.retired.blocks))
		c.rm.bytes.Set(float64(c.retired.bytes))
	}
	if groupErr == nil && c.last.index != base.index {
		s.cache.invalidate(c.overlay, c.last.index)
		s.publish(c.last)
		s.m.entries.Add(float64(c.entries))
		s.m.commits.Inc()
		s.m.logBytes.Set(float64(c.log.bytes))
		s.m.logEntries.Set(float64(c.last.index - c.log.first + 1))
		s.m.keys.Set(float64(c.stats.keys))
	}
	s.m.groupSize.Observe(float64(len(group)))
	s.m.commitSeconds.Observe(time.Since(start).Seconds())
	for _, r := range group {
		if r.err != nil {
			s.m.writeErrors.WithLabelValues(errorKind(r.err)).Inc()
		}
		close(r.done)
	}
}

// now is the root's clock for the log: it never goes back.
func (c *committer) now() int64 {
	return max(c.s.opts.Now().UnixNano(), c.last.time)
}

// prepareApply appends replicated entries after checking they continue the
// log. A broken chain fails only this request.
func (c *committer) prepareApply(r *request) error {
	v := wal.Verifier{Index: c.last.index, Hash: c.last.hash}
	for i := range r.entries {
		if err := v.Check(&r.entries[i]); err != nil {
			r.err = fmt.Errorf("%w: %v", ErrNotContiguous, err)
			return nil
		}
	}
	n := len(r.entries)
	if n > 0 && c.px != nil {
		c.windowFloor = c.px.floor(r.entries[n-1].Index)
	}
	for i := range r.entries {
		if err := c.append(&r.entries[i], false); err != nil {
			return err
		}
	}
	if n > 0 {
		r.res = WriteResult{Index: r.entries[n-1].Index, Changed: true}
	}
	return nil
}

// append adds e to the group's block and its ops to the batch. With seal,
// the entry's hash is computed here (root); otherwise it was verified.
func (c *committer) append(e *wal.Entry, seal bool) error {
	if c.blk.Len() == 0 {
		c.blockFirst = e.Index
	}
	// The body is encoded into the block itself and hashed there: each
	// value is copied once, from the request to the block.
	at := c.blk.AddEntry(e, c.last.hash, seal)
	c.entryTime = e.Time
	c.offs = e.ValueOffsets(c.offs[:0])
	for i, op := range e.Ops {
		if err := c.applyOp(op, e.Index, at+c.offs[i]); err != nil {
			return err
		}
	}
	c.last = appliedRecord{index: e.Index, hash: e.Hash, time: e.Time}
	c.entries++
	return nil
}

func (c *committer) applyOp(op wal.Op, index uint64, valueOff int) error {
	ks, err := c.state(op.Key)
	if err != nil {
		return err
	}
	if err := c.release(ks); err != nil {
		return err
	}
	delete(c.inLog, string(op.Key))
	if c.hist.enabled && ks.exists && ks.index != index {
		// The version this op replaces; one made by the same entry was
		// never visible at any index.
		if err := c.recordHistory(op.Key, ks, index); err != nil {
			return err
		}
	}
	oldChunks := ks.chunks
	if ks.corrupt {
		// The corrupt record's chunk count is unknown: drop every chunk
		// of the key, before the new value's chunks are written.
		p := chunkKey(nil, op.Key, 0)
		p = p[:len(p)-4]
		c.batch.DeleteRange(p, prefixEnd(p), nil)
	}
	c.kbuf = dataKey(c.kbuf, op.Key)
	switch op.Type {
	case wal.OpSet:
		newChunks := 0
		remote := false
		switch {
		case c.px != nil:
			newChunks, remote = c.proxySet(op, index, ks)
		case len(op.Value) >= minInLogBytes && len(op.Value) <= c.s.opts.ChunkBytes:
			c.inLog[string(op.Key)] = pendingValue{index: index, offset: valueOff, value: op.Value}
		case len(op.Value) <= c.s.opts.ChunkBytes:
			c.buf = encodeInline(c.buf, index, op.Value)
			c.batch.Set(c.kbuf, c.buf, nil)
		default:
			newChunks = c.writeValue(op.Key, index, op.Value)
		}
		for i := newChunks; i < oldChunks; i++ {
			c.batch.Delete(chunkKey(nil, op.Key, uint32(i)), nil)
		}
		if ks.exists {
			c.stats.valueBytes -= int64(ks.valueLen)
		} else {
			c.stats.keys++
			c.stats.keyBytes += int64(len(op.Key))
		}
		c.stats.valueBytes += int64(len(op.Value))
		*ks = keyState{exists: true, index: index, value: op.Value, valueLen: len(op.Value), chunks: newChunks, remote: remote}
		if newChunks > 0 || remote {
			ks.valueCRC = crc(op.Value)
		}
	case wal.OpDelete:
		if !ks.exists {
			return nil
		}
		c.batch.Delete(c.kbuf, nil)
		for i := 0; i < oldChunks; i++ {
			c.batch.Delete(chunkKey(nil, op.Key, uint32(i)), nil)
		}
		c.proxyForget(ks)
		c.stats.keys--
		c.stats.keyBytes -= int64(len(op.Key))
		c.stats.valueBytes -= int64(ks.valueLen)
		*ks = keyState{}
	default:
		return fmt.Errorf("%w: op type %d", ErrInvalid, op.Type)
	}
	return nil
}

// writeValue writes the value record of key (in c.kbuf) inline, or in
// chunks when it is longer than ChunkBytes, and returns the chunk count.
func (c *committer) writeValue(key []byte, index uint64, value []byte) int {
	cb := c.s.opts.ChunkBytes
	if len(value) <= cb {
		c.buf = encodeInline(c.buf, index, value)
		c.batch.Set(c.kbuf, c.buf, nil)
		return 0
	}
	n := (len(value) + cb - 1) / cb
	for i := 0; i < n; i++ {
		part := value[i*cb : min((i+1)*cb, len(value))]
		c.buf = encodeChunk(c.buf, part)
		c.batch.Set(chunkKey(nil, key, uint32(i)), c.buf, nil)
	}
	c.buf = encodeChunked(c.buf, index, len(value), n, crc(value))
	c.batch.Set(c.kbuf, c.buf, nil)
	return n
}

// state returns what the group knows of key, loading it from the store the
// first time. A corrupt record is treated as an existing key with an
// unknown value, so it can be overwritten (which repairs it).
func (c *committer) state(key []byte) (*keyState, error) {
	if ks, ok := c.overlay[string(key)]; ok {
		return ks, nil
	}
	ks := &keyState{}
	c.kbuf = dataKey(c.kbuf, key)
	v, found, err := c.lookup(c.kbuf)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: read %q: %v", ErrWriteFailed, key, err)
	case !found:
	default:
		rec, derr := decodeRecord(v)
		if derr != nil {
			c.s.m.integrityErrors.WithLabelValues("value_crc").Inc()
			c.s.opts.Logger.Error("corrupt value record found while writing; it will be overwritten", "db", c.s.opts.Name, "key", fmt.Sprintf("%q", key), "err", derr)
			ks.exists, ks.corrupt = true, true
			ks.valueLen, ks.remote = salvage(v)
		} else {
			ks.exists, ks.index, ks.valueLen, ks.chunks = true, rec.index, rec.valueLen, rec.chunks
			switch {
			case rec.chunked:
				ks.valueCRC = rec.valueCRC
			case rec.remote:
				ks.remote, ks.valueCRC = true, rec.valueCRC
			case rec.inLog:
				ks.valueCRC = rec.valueCRC
				r := rec
				ks.logRec = &r
			default:
				ks.value = append([]byte(nil), rec.inline...)
			}
		}
	}
	c.overlay[string(key)] = ks
	return ks, nil
}

// lookup reads a key as committed before this group, through one iterator
// per group that consults bloom filters on every level (absent keys, the
// common case for new writes, then cost no data block read). The value is
// valid until the next lookup.
func (c *committer) lookup(k []byte) ([]byte, bool, error) {
	if _, err := c.iter(); err != nil {
		return nil, false, err
	}
	if !c.it.SeekPrefixGE(k) || !bytes.Equal(c.it.Key(), k) {
		return nil, false, c.it.Error()
	}
	v, err := c.it.ValueAndErr()
	return v, err == nil, err
}

// salvage is the value length a corrupt record states, and whether it is
// a proxy's remote record (its value not stored here), read ignoring its
// CRC, so that overwriting or deleting it keeps the stats and a proxy's
// cache counters exact when the damage is in the value bytes (a guess
// otherwise). Never served.
func salvage(b []byte) (valueLen int, remote bool) {
	if len(b) < recHeader {
		return 0, false
	}
	fixed := append([]byte(nil), b...)
	binary.BigEndian.PutUint32(fixed, crc(fixed[4:]))
	r, err := decodeRecord(fixed)
	if err != nil {
		return 0, false
	}
	return r.valueLen, r.remote
}

// errValueDamaged: the key's stored value cannot be read (its record,
// chunks or log block fail their checks), so whether a write changes it
// is unknown.
var errValueDamaged = fmt.Errorf("%w: stored value unreadable", ErrCorrupt)

// storedValueIs reports whether the key's current value equals v; an
// error wrapping errValueDamaged if the stored value is unreadable.
func (c *committer) storedValueIs(key []byte, ks *keyState, v []byte) (bool, error) {
	if ks.corrupt {
		return false, fmt.Errorf("%w: key %q: its record is corrupt", errValueDamaged, key)
	}
	if ks.valueLen != len(v) {
		return false, nil
	}
	if ks.value != nil {
		// Loaded, or set earlier in the group: the stored chunks or log
		// block may hold the value before the group.
		return bytes.Equal(ks.value, v), nil
	}
	if ks.logRec != nil {
		if ks.valueCRC != crc(v) {
			return false, nil
		}
		it, err := c.iter()
		if err != nil {
			return false, err
		}
		cur, err := c.s.readInLog(it, *ks.logRec, nil)
		if err != nil {
			return false, fmt.Errorf("%w: key %q: %v", errValueDamaged, key, err)
		}
		return bytes.Equal(cur, v), nil
	}
	if ks.chunks == 0 {
		return bytes.Equal(ks.value, v), nil // nil and empty are the same value
	}
	if ks.valueCRC != crc(v) {
		return false, nil
	}
	it, err := c.s.db.NewIter(nil)
	if err != nil {
		return false, err
	}
	defer it.Close()
	cur, err := readChunks(it, key, ks.chunks, ks.valueLen, ks.valueCRC, nil)
	if err != nil {
		return false, fmt.Errorf("%w: key %q: %v", errValueDamaged, key, err)
	}
	return bytes.Equal(cur, v), nil
}

// iter returns the group's iterator over the committed state.
func (c *committer) iter() (*pebble.Iterator, error) {
	if c.it == nil {
		it, err := c.s.db.NewIter(&pebble.IterOptions{UseL6Filters: true})
		if err != nil {
			return nil, err
		}
		c.it = it
	}
	return c.it, nil
}

// minInLogBytes is the smallest value stored only in the log (smaller
// values are cheap to write twice).
const minInLogBytes = 1024

// pendingValue is a value record to write once the group's block is done.
type pendingValue struct {
	index  uint64
	offset int // of the value in the block's uncompressed payload
	value  []byte
}

// blockCompression is how to store the group's block: uncompressed when
// values to be stored only in the log make up at least half of it (they
// can be only if the block is stored raw, and compressing them is CPU
// spent to then write them a second time, inline), else as configured.
func (c *committer) blockCompression() wal.Compression {
	n := 0
	for _, p := range c.inLog {
		n += len(p.value)
	}
	if 2*n >= c.blk.RawLen() {
		return wal.CompressNone
	}
	return c.s.opts.Compression
}

// setBlock stores the group's finished block and returns its size and
// whether it is stored uncompressed (its values then need no record of
// their own). With segmented, the block is appended to the log segments
// and the batch gets a reference to it (segment.go); otherwise the block
// is encoded straight into the batch's buffer (its payload is copied
// once). A block being replayed is already in a segment: the batch gets
// its reference, and its values inline records (the block is not rebuilt
// byte for byte, so offsets into it are not used).
func (c *committer) setBlock(segmented bool) (int, bool, error) {
	key := logKey(c.blockFirst)
	if c.replay != nil {
		c.buf = c.replay.encode(c.buf[:0])
		c.batch.Set(key, c.buf, nil)
		c.batch.Set(metaSegments, segTail{seq: c.replay.seq, off: c.replayEnd}.encode(), nil)
		c.useSegment(c.replay.seq, int64(c.replay.n), 1)
		return c.replay.n, false, nil
	}
	comp := c.blockCompression()
	hdr, payload := c.blk.Parts(c.buf[:0], comp)
	c.buf = hdr
	n := len(hdr) + len(payload)
	uncompressed := wal.Compression(hdr[1]) == wal.CompressNone
	if segmented {
		c.idsBuf = encodeIDs(c.idsBuf[:0], c.blockFirst, c.ids)
		ref, end, err := c.s.segs.append(hdr, payload, c.idsBuf)
		if err != nil {
			return 0, false, err
		}
		c.appended = true
		c.buf = ref.encode(c.buf[:0])
		c.batch.Set(key, c.buf, nil)
		c.batch.Set(metaSegments, segTail{seq: ref.seq, off: end}.encode(), nil)
		c.useSegment(ref.seq, int64(n), 1)
		return n, uncompressed, nil
	}
	op := c.batch.SetDeferred(len(key), n)
	copy(op.Key, key)
	copy(op.Value[copy(op.Value, hdr):], payload)
	op.Finish() // fails only for an indexed batch, as Set does
	return n, uncompressed, nil
}

// writeInLogRecords writes the deferred value records of the group: in-log
// records pointing into the group's block when it is stored uncompressed,
// inline records otherwise.
func (c *committer) writeInLogRecords(uncompressed bool) {
	for key, p := range c.inLog {
		c.kbuf = dataKey(c.kbuf, []byte(key))
		if uncompressed {
			c.buf = encodeInLog(c.buf[:0], p.index, c.blockFirst, p.offset, len(p.value), crc(p.value))
		} else {
			c.buf = encodeInline(c.buf, p.index, p.value)
		}
		c.batch.Set(c.kbuf, c.buf, nil)
	}
	clear(c.inLog)
}

// checkSpace refuses writes while free space is below the reserve, and
// leaves disk-full mode once the reserve and the ballast fit again.
func (c *committer) checkSpace() error {
	s := c.s
	du, err := s.opts.FS.GetDiskUsage(s.opts.Dir)
	if err != nil {
		return nil // cannot tell; let the write try
	}
	need := s.opts.MinFreeBytes
	if s.diskFull.Load() && s.opts.BallastBytes > 0 {
		need += uint64(s.opts.BallastBytes)
	}
	if du.AvailBytes < need {
		if !s.diskFull.Swap(true) {
			s.opts.Logger.Error("disk full: refusing writes", "db", s.opts.Name, "avail_bytes", du.AvailBytes, "reserve_bytes", need)
		}
		s.m.diskFull.Set(1)
		return fmt.Errorf("%w: %d bytes free, %d reserved", ErrDiskFull, du.AvailBytes, need)
	}
	if s.diskFull.Swap(false) {
		s.opts.Logger.Info("disk space back: accepting writes", "db", s.opts.Name, "avail_bytes", du.AvailBytes)
		s.ensureBallast()
	}
	s.m.diskFull.Set(0)
	return nil
}

func classifyCommitError(err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: %v", ErrDiskFull, err)
	}
	return fmt.Errorf("%w: %v", ErrWriteFailed, err)
}

// errorKind names an error for the errors_total{kind} metrics.
func errorKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{ErrConditionFailed, "condition_failed"}, {ErrTooLarge, "too_large"},
		{ErrInvalid, "invalid"}, {ErrDiskFull, "disk_full"}, {ErrCorrupt, "corrupt"},
		{ErrClosed, "closed"}, {ErrNotContiguous, "not_contiguous"}, {ErrWriteFailed, "write_failed"},
		{context.Canceled, "canceled"}, {context.DeadlineExceeded, "timeout"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "other"
}

// ErrorKind is errorKind for other packages' metrics.
func ErrorKind(err error) string { return errorKind(err) }
