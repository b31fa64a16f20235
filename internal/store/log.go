package store

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// LogRange is the retained log: entries First..Last. First is Last+1 when
// nothing is retained yet. BaseHash is the hash of entry First-1.
type LogRange struct {
	First, Last uint64
	BaseHash    wal.Hash
}

// LogRange returns the currently retained log.
func (s *Store) LogRange() (LogRange, error) {
	if s.closed.Load() {
		return LogRange{}, ErrClosed
	}
	s.engine.RLock()
	defer s.engine.RUnlock()
	snap := s.db.NewSnapshot()
	defer snap.Close()
	return logRangeAt(snap)
}

func logRangeAt(snap *pebble.Snapshot) (LogRange, error) {
	lv, c, err := snap.Get(metaLog)
	if err != nil {
		return LogRange{}, err
	}
	lr, err := decodeLogRecord(lv)
	c.Close()
	if err != nil {
		return LogRange{}, err
	}
	av, c, err := snap.Get(metaApplied)
	if err != nil {
		return LogRange{}, err
	}
	a, err := decodeApplied(av)
	c.Close()
	if err != nil {
		return LogRange{}, err
	}
	return LogRange{First: lr.first, Last: a.index, BaseHash: lr.baseHash}, nil
}

// ReadLog returns retained entries from index from on, in order, stopping
// after maxEntries entries or once maxBytes of entry bodies are gathered
// (at least one entry is returned if any exists). It returns
// ErrLogTruncated if from is older than the retained log. It holds no
// iterator after returning, so a slow reader pins nothing.
func (s *Store) ReadLog(from uint64, maxEntries, maxBytes int) ([]wal.Entry, error) {
	es, err := s.readLog(from, maxEntries, maxBytes)
	return es, engineErr(err)
}

func (s *Store) readLog(from uint64, maxEntries, maxBytes int) ([]wal.Entry, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	s.engine.RLock()
	defer s.engine.RUnlock()
	e := s.gate.enter()
	defer s.gate.leave(e)
	snap := s.db.NewSnapshot()
	defer snap.Close()
	lr, err := logRangeAt(snap)
	if err != nil {
		return nil, err
	}
	if from < lr.First {
		return nil, fmt.Errorf("%w: asked for %d, log starts at %d", ErrLogTruncated, from, lr.First)
	}
	if from > lr.Last {
		return nil, nil
	}
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: logKey(lr.First), UpperBound: logKey(lr.Last + 1)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []wal.Entry
	size := 0
	// The block holding `from` is the last block starting at or before it:
	// usually one starting at `from` (readers that follow the log ask for
	// the entry after their last block), found by a forward seek, which
	// unlike a backward one does not copy the block.
	ok := it.SeekGE(logKey(from))
	if !ok || !bytes.Equal(it.Key(), logKey(from)) {
		ok = it.SeekLT(logKey(from + 1))
	}
	// next is the index the following block must start at: blocks are
	// consecutive, so a lost or misplaced one is a hole or a repeat.
	var next uint64
	for ; ok; ok = it.Next() {
		first, valid := logKeyIndex(it.Key())
		if !valid {
			return nil, fmt.Errorf("%w: bad log key %x", ErrCorrupt, it.Key())
		}
		if next != 0 && first != next {
			s.m.integrityErrors.WithLabelValues("log_block").Inc()
			return nil, fmt.Errorf("%w: log block %d follows entry %d: the log is not contiguous", ErrCorrupt, first, next-1)
		}
		raw, err := it.ValueAndErr()
		if err == nil {
			raw, err = s.blockBytes(raw, nil)
		}
		if err != nil {
			if errors.Is(err, ErrCorrupt) { // a segment frame failing its check
				s.m.integrityErrors.WithLabelValues("log_block").Inc()
			}
			return nil, err
		}
		entries, err := wal.DecodeBlock(raw)
		if err != nil {
			s.m.integrityErrors.WithLabelValues("log_block").Inc()
			return nil, fmt.Errorf("%w: log block %d: %v", ErrCorrupt, first, err)
		}
		for i := range entries {
			e := &entries[i]
			if e.Index != first+uint64(i) {
				s.m.integrityErrors.WithLabelValues("log_block").Inc()
				return nil, fmt.Errorf("%w: log block %d holds entry %d at position %d", ErrCorrupt, first, e.Index, i)
			}
			next = e.Index + 1
			if e.Index < from {
				continue
			}
			out = append(out, *e)
			size += e.BodySize()
			if len(out) >= maxEntries || size >= maxBytes {
				return out, nil
			}
		}
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	if len(out) == 0 || out[0].Index != from {
		return nil, fmt.Errorf("%w: entry %d not found in the retained log", ErrCorrupt, from)
	}
	return out, nil
}

// pointsInto reports whether key's record may still point into the log
// block blockFirst once the group commits: false if the group rewrote or
// deleted the key (its new record is in the batch). A key the group only
// read (a condition, an identical rewrite) keeps its stored record.
func (c *committer) pointsInto(key []byte, blockFirst uint64) bool {
	ks, ok := c.g.overlay[string(key)]
	return !ok || (ks.logRec != nil && ks.logRec.block == blockFirst)
}

// truncateLog drops the oldest log blocks, inside the group's batch, while
// the retained log exceeds a retention limit. The block the group is
// writing is never dropped, so the log always holds the newest entries.
// It runs at most once a second of real time, and drops a bounded number
// of blocks per run so a commit never stalls on it.
//
// A block's age is measured by the log's own clock (the time of the last
// entry, bounded: rootClock, boundTime), never local time: a node whose
// wall clock jumps ahead drops nothing early (lagging replicas would
// otherwise have to bootstrap), and a replica drops what its source
// drops, whatever its own clock says.
func (c *committer) truncateLog() error {
	r := c.s.opts.Retention
	count := int64(c.last.index - c.log.first + 1)
	over := func(count, bytes int64) bool {
		return (r.MaxEntries > 0 && count > r.MaxEntries) || (r.MaxBytes > 0 && bytes > r.MaxBytes)
	}
	if !c.ret.due(c.s.opts.Elapsed(), over(count, c.log.bytes)) {
		return nil
	}
	it, err := c.s.db.NewIter(&pebble.IterOptions{LowerBound: logKey(c.log.first), UpperBound: logKey(c.g.blockFirst)})
	if err != nil {
		return err
	}
	defer it.Close()
	var cut []byte
	var base wal.Hash // of the last entry of the last block handled
	first, bytes := c.log.first, c.log.bytes
	cutoff := c.last.time - r.MaxAge.Nanoseconds()
	const maxBlocksPerRun = 4096
	n, bySummary := 0, 0
	// A block that cannot be handled stays, and so do the ones after it:
	// the log shrinks by the blocks already handled (their deletes and
	// records are in the batch).
	var stopped error
	for ok := it.First(); ok && n < maxBlocksPerRun; ok = it.Next() {
		blockFirst, valid := logKeyIndex(it.Key())
		if !valid {
			stopped = fmt.Errorf("%w: bad log key %x", ErrCorrupt, it.Key())
			break
		}
		// The block's summary says what retention needs; a block without
		// one (written before summaries existed) is read.
		sum, usable, present, err := c.summary(blockFirst)
		if err != nil {
			stopped = err
			break
		}
		var raw []byte
		if !usable {
			if raw, err = it.ValueAndErr(); err == nil {
				raw, err = c.s.blockBytes(raw, nil)
			}
			if err != nil {
				stopped = err
				break
			}
			h, _, _, err := wal.ParseBlockHeader(raw)
			if err != nil {
				stopped = fmt.Errorf("%w: log block at %d: %v", ErrCorrupt, blockFirst, err)
				break
			}
			sum = blockSummary{count: uint64(h.Count), lastTime: h.LastTime, storedBytes: int64(len(raw))}
		}
		next := blockFirst + sum.count
		count := int64(c.last.index - blockFirst + 1) // retained, this block included
		old := r.MaxAge > 0 && sum.lastTime < cutoff
		if !over(count, bytes) && !old {
			break
		}
		if !usable {
			if sum.lastHash, err = wal.BlockLastHash(raw); err != nil {
				stopped = fmt.Errorf("%w: log block %d: %v", ErrCorrupt, blockFirst, err)
				break
			}
		}
		var live retiredRecord
		if usable {
			live, err = c.liveFromSummary(blockFirst, &sum)
		} else {
			live, err = c.liveRecord(blockFirst, raw)
		}
		if err == nil {
			err = c.leaveLog(blockFirst, live, raw) // raw is nil with a summary
		}
		if err != nil {
			stopped = err
			break
		}
		if present {
			c.g.batch.Delete(summaryKey(blockFirst), nil)
		}
		if usable {
			bySummary++
		}
		bytes -= sum.storedBytes + 9
		first = next
		cut = append(cut[:0], it.Key()...)
		base = sum.lastHash
		n++
	}
	if cut == nil {
		if stopped != nil {
			return stopped
		}
		return it.Error()
	}
	c.s.m.logTruncated.Add(float64(first - c.log.first))
	c.ret.dropped(bySummary, n-bySummary)
	c.log = logRecord{first: first, bytes: bytes, baseHash: base}
	return stopped
}
