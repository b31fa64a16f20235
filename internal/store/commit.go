package store

import (
	"errors"
	"fmt"
	"time"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// committer is the commit loop: it runs each group's sequence (commit)
// and wires the concerns together, each owning its state:
//
//	last, log, stats  the log tail and the counters (commit.go, log.go)
//	g                 a group's scratch state, reset per group
//	                  (groupblock.go, keystate.go)
//	ret               log retention and retired log blocks (retire.go)
//	hw                the MVCC history (history.go)
//	px                a proxy's cache counters (proxy.go)
//	rp                the block a replay at open applies (segstore.go)
//	raftIndex         the last applied Raft index (raftapply.go)
//	lastIDExpiry      when batch IDs last expired (idempotency.go)
//	eval, place,      evaluation, where values go, a root's clock
//	clock             (evaluate.go, placement.go, rootclock.go)
type committer struct {
	s     *Store
	last  appliedRecord
	log   logRecord
	stats statsRecord

	g   groupPending
	ret retention
	hw  historyWriter
	px  proxyWriter
	rp  replayState

	raftIndex    uint64
	lastIDExpiry time.Time

	eval  evaluator
	place placement
	clock rootClock
}

func newCommitter(s *Store) (*committer, error) {
	c := &committer{s: s, g: newGroupPending()}
	c.eval = evaluator{idempotencyWindow: s.opts.IdempotencyWindow.Nanoseconds()}
	c.place = placementOf(s)
	var err error
	if c.last, err = s.readApplied(); err != nil {
		return nil, err
	}
	// A root's entries after a restart are bounded from the last one's
	// time and the real time since now, not from the wall clock alone.
	c.clock.learn(c.last.time, s.opts.Elapsed())
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
	if c.ret, err = newRetention(s); err != nil {
		return nil, err
	}
	if c.raftIndex, err = s.readRaftApplied(); err != nil {
		return nil, err
	}
	if v, err = s.getMeta(metaHistory); err != nil {
		return nil, err
	}
	if c.hw.rec, err = decodeHistoryRecord(v); err != nil {
		return nil, err
	}
	if c.px, err = newProxyWriter(s); err != nil {
		return nil, err
	}
	if c.px.state != nil {
		c.publishRoleMeta()
	}
	return c, nil
}

func (c *committer) commit(group []*request) {
	s := c.s
	start := time.Now()
	base, baseLog, baseStats, baseRaft, baseRetired := c.last, c.log, c.stats, c.raftIndex, c.ret.totals
	baseHist, basePx := c.hw.rec, c.px.stats
	c.hw.dirty, c.px.dirty = false, false
	c.g.begin(s.db.NewBatch())
	defer c.g.end()
	c.rp.restoreIDs(&c.g)
	c.ret.dirty = false

	// A block being replayed is durable already: the space it needs is
	// taken.
	if !c.rp.active() {
		if err := s.checkCommitSpace(); err != nil {
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
	segmented := s.segs != nil && c.place.segmented() && !s.opts.blocksInPebble && needsSync(group)

	var groupErr error
	segmentFull := false // a log segment got ENOSPC (see enterDiskFull)
	for _, r := range group {
		switch r.kind {
		case reqWrite:
			groupErr = c.evalWrite(r, command{batch: r.batch, time: c.stamp()}, rootRole{})
		case reqApply:
			groupErr = c.prepareApply(r)
		case reqRaft:
			groupErr = c.prepareRaft(r)
		case reqRaftReset:
			c.raftIndex = 0
		case reqHeartbeat:
			groupErr = c.evalWrite(r, command{heartbeat: true, time: c.stamp()}, rootRole{})
		case reqCache:
			groupErr = c.place.cache(c, r)
		case reqCompact:
			groupErr = c.compactRetired(r.segments)
		}
		if groupErr != nil {
			break
		}
	}
	if groupErr == nil && (c.g.blk.Len() > 0 || len(c.g.ids) > 0 || c.raftIndex != baseRaft || c.px.dirty || len(c.g.segDelta) > 0) {
		if c.raftIndex != baseRaft {
			c.g.batch.Set(metaRaft, encodeRaftIndex(c.raftIndex), nil)
		}
		var blkLen int
		var uncompressed bool
		if c.g.blk.Len() > 0 {
			var err error
			if blkLen, uncompressed, err = c.setBlock(segmented); err != nil {
				groupErr = classifyCommitError(err)
				segmentFull = segmented && errors.Is(groupErr, ErrDiskFull)
			}
		}
		if groupErr == nil && c.g.blk.Len() > 0 {
			c.g.sumBuf = c.encodeSummary(c.g.sumBuf, blkLen, uncompressed)
			c.g.batch.Set(summaryKey(c.g.blockFirst), c.g.sumBuf, nil)
			c.g.writeInLogRecords(uncompressed)
			c.log.bytes += int64(blkLen + 9)
			s.m.logBlockBytes.Observe(float64(blkLen))
			if err := c.gcHistory(); err != nil {
				s.opts.Logger.Warn("history GC skipped", "db", s.opts.Name, "err", err)
			}
			if err := c.settleRetired(); err != nil {
				s.opts.Logger.Warn("retired log blocks not settled", "db", s.opts.Name, "err", err)
			}
			logBytes := c.log.bytes
			if err := c.truncateLog(); err != nil {
				s.opts.Logger.Warn("log retention skipped", "db", s.opts.Name, "err", err)
			}
			c.g.logDropped = logBytes - c.log.bytes
			c.g.batch.Set(metaApplied, c.last.encode(), nil)
			c.g.batch.Set(metaLog, c.log.encode(), nil)
			c.g.batch.Set(metaStats, c.stats.encode(), nil)
		}
		c.ret.writeTotals(c.g.batch) // retention, or a segment's compaction
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
		if groupErr == nil && c.g.appended {
			// The durability point: Pebble's batch follows, unsynced.
			if err := s.segs.sync(); err != nil {
				groupErr = classifyCommitError(err)
			}
		}
		if groupErr == nil {
			if err := s.engineWrite(func() error { return c.g.batch.Commit(c.writeOptions(group)) }); err != nil {
				groupErr = classifyCommitError(err)
			}
		}
		s.m.syncSeconds.Observe(time.Since(syncStart).Seconds())
	}
	if segmented {
		if groupErr != nil {
			s.segs.fail() // abandons the group's frames, if it appended any
		} else if c.g.appended {
			s.segs.done()
		}
	}
	if groupErr != nil {
		if errors.Is(groupErr, ErrDiskFull) {
			s.enterDiskFull(groupErr, segmentFull)
		}
		c.last, c.log, c.stats, c.raftIndex, c.ret.totals = base, baseLog, baseStats, baseRaft, baseRetired
		c.hw.rec, c.px.stats = baseHist, basePx
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
		c.ret.publish()
	}
	if groupErr == nil && c.last.index != base.index {
		s.cache.invalidate(c.g.overlay, c.last.index)
		s.publish(c.last)
		s.m.entries.Add(float64(c.g.entries))
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

// stamp is the time of the root's next entry (rootClock): never before
// the last entry's, never further ahead of it than real time allows.
func (c *committer) stamp() int64 {
	t, clamped := c.clock.stamp(c.s.opts.Now().UnixNano(), c.s.opts.Elapsed(), c.last.time)
	if clamped {
		c.s.m.clockClamped.Inc()
	}
	return t
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
	if n > 0 {
		c.place.applying(c, r.entries[n-1].Index)
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
	if c.g.blk.Len() == 0 {
		c.g.blockFirst = e.Index
	}
	// The body is encoded into the block itself and hashed there: each
	// value is copied once, from the request to the block.
	at := c.g.blk.AddEntry(e, c.last.hash, seal)
	c.hw.entryTime = e.Time
	c.g.offs = e.ValueOffsets(c.g.offs[:0])
	for i, op := range e.Ops {
		if err := c.applyOp(op, e.Index, at+c.g.offs[i]); err != nil {
			return err
		}
	}
	c.last = appliedRecord{index: e.Index, hash: e.Hash, time: e.Time}
	c.g.entries++
	return nil
}
