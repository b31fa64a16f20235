package store

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// groupPending is the committer's scratch state for one group: its batch
// and lookups, its block and the records it defers, and what its ops
// changed in the other concerns' records. begin clears it for the next
// group, keeping the maps and buffers.
type groupPending struct {
	batch *pebble.Batch
	it    *pebble.Iterator // lookups of committed state (keystate.go)
	// overlay is what the group knows of the keys it touched (keystate.go).
	overlay map[string]*keyState
	// inLog holds the value records to write once the group's block is
	// finished: in-log records if it is stored uncompressed, inline ones
	// otherwise. A later op on the same key in the group removes its entry.
	inLog      map[string]pendingValue
	offs       []int // value offsets of the entry being appended
	blk        wal.BlockBuilder
	blockFirst uint64
	entries    int
	buf, kbuf  []byte
	sumBuf     []byte // a block summary (summary.go)
	idsBuf     []byte // the block's outcomes frame (segment.go)
	// ids are the outcomes of the group's batches with an ID
	// (idempotency.go).
	ids map[string]batchOutcome
	// touched holds the retired log blocks the group's ops counted down;
	// hrefs the history versions into log blocks it changed (retire.go).
	touched map[uint64]*retiredState
	hrefs   map[histRefKey]histRefState
	// Log segments (segment.go, seguse.go): whether the group appended
	// its block to a segment; its changes of what points into each
	// segment; the log bytes retention dropped.
	appended   bool
	segDelta   map[uint64]segUse
	logDropped int64
}

func newGroupPending() groupPending {
	return groupPending{overlay: map[string]*keyState{}, inLog: map[string]pendingValue{}, segDelta: map[uint64]segUse{}}
}

// begin readies the state for a group written into b.
func (g *groupPending) begin(b *pebble.Batch) {
	g.batch = b
	clear(g.overlay)
	clear(g.inLog)
	clear(g.ids)
	clear(g.touched)
	clear(g.hrefs)
	clear(g.segDelta)
	g.blk.Reset()
	g.entries = 0
	g.appended = false
	g.logDropped = 0
}

// end releases the group's batch and iterator.
func (g *groupPending) end() {
	g.batch.Close()
	g.batch = nil
	if g.it != nil {
		g.it.Close()
		g.it = nil
	}
}

// recordBatch remembers the outcome of the batch with this ID, evaluated
// at time t (idempotency.go).
func (g *groupPending) recordBatch(id []byte, res WriteResult, t int64) {
	if g.ids == nil {
		g.ids = map[string]batchOutcome{}
	}
	g.ids[string(id)] = batchOutcome{index: res.Index, time: t, changed: res.Changed}
}

// useSegment counts a block of n bytes into (sign 1) or out of (-1)
// segment seq (seguse.go).
func (g *groupPending) useSegment(seq uint64, n int64, sign int64) {
	d := g.segDelta[seq]
	d.blocks += sign
	d.bytes += sign * n
	g.segDelta[seq] = d
}

// noteHistRef notes a version the group records as a reference (rec)
// into a log block (retire.go).
func (g *groupPending) noteHistRef(key []byte, rec record, until uint64) {
	if g.hrefs == nil {
		g.hrefs = map[histRefKey]histRefState{}
	}
	g.hrefs[histRefKey{string(key), rec.index}] = histRefState{rec: rec, until: until}
}

// noteHistGone notes that the group removes (or copies out) the version
// of key written at index.
func (g *groupPending) noteHistGone(key []byte, index uint64) {
	if g.hrefs == nil {
		g.hrefs = map[histRefKey]histRefState{}
	}
	g.hrefs[histRefKey{string(key), index}] = histRefState{gone: true}
}

func (c *committer) applyOp(op wal.Op, index uint64, valueOff int) error {
	ks, err := c.state(op.Key)
	if err != nil {
		return err
	}
	keep := c.hw.rec.enabled && ks.exists && ks.index != index
	if !keep || !historyRefers(ks) {
		// Else the history's version takes over the reference.
		if err := c.release(ks); err != nil {
			return err
		}
	}
	delete(c.g.inLog, string(op.Key))
	if keep {
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
		c.g.batch.DeleteRange(p, prefixEnd(p), nil)
	}
	c.indexExpiry(op.Key, ks, op, index)
	c.g.kbuf = dataKey(c.g.kbuf, op.Key)
	switch op.Type {
	case wal.OpSet:
		newChunks, remote := c.place.set(c, op, index, valueOff, ks)
		for i := newChunks; i < oldChunks; i++ {
			c.g.batch.Delete(chunkKey(nil, op.Key, uint32(i)), nil)
		}
		if ks.exists {
			c.stats.valueBytes -= int64(ks.valueLen)
		} else {
			c.stats.keys++
			c.stats.keyBytes += int64(len(op.Key))
		}
		c.stats.valueBytes += int64(len(op.Value))
		*ks = keyState{exists: true, index: index, attrs: attrsOf(op), value: op.Value, valueLen: len(op.Value), chunks: newChunks, remote: remote}
		if newChunks > 0 || remote {
			ks.valueCRC = crc(op.Value)
		}
	case wal.OpDelete:
		if !ks.exists {
			return nil
		}
		c.g.batch.Delete(c.g.kbuf, nil)
		for i := 0; i < oldChunks; i++ {
			c.g.batch.Delete(chunkKey(nil, op.Key, uint32(i)), nil)
		}
		c.place.forget(c, ks)
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
func (c *committer) writeValue(key []byte, index uint64, attrs valueAttrs, value []byte) int {
	cb := c.s.opts.ChunkBytes
	if len(value) <= cb {
		c.g.buf = encodeInline(c.g.buf, index, attrs, value)
		c.g.batch.Set(c.g.kbuf, c.g.buf, nil)
		return 0
	}
	n := (len(value) + cb - 1) / cb
	for i := 0; i < n; i++ {
		part := value[i*cb : min((i+1)*cb, len(value))]
		c.g.buf = encodeChunk(c.g.buf, part)
		c.g.batch.Set(chunkKey(nil, key, uint32(i)), c.g.buf, nil)
	}
	c.g.buf = encodeChunked(c.g.buf, index, attrs, len(value), n, crc(value))
	c.g.batch.Set(c.g.kbuf, c.g.buf, nil)
	return n
}

// minInLogBytes is the smallest value stored only in the log (smaller
// values are cheap to write twice).
const minInLogBytes = 1024

// pendingValue is a value record to write once the group's block is done.
type pendingValue struct {
	index  uint64
	attrs  valueAttrs
	offset int // of the value in the block's uncompressed payload
	value  []byte
}

// blockCompression is how to store the group's block: uncompressed when
// values to be stored only in the log make up at least half of it (they
// can be only if the block is stored raw, and compressing them is CPU
// spent to then write them a second time, inline), else as configured.
func (c *committer) blockCompression() wal.Compression {
	n := 0
	for _, p := range c.g.inLog {
		n += len(p.value)
	}
	if 2*n >= c.g.blk.RawLen() {
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
	key := logKey(c.g.blockFirst)
	if c.rp.active() {
		return c.rp.setBlock(&c.g, key), false, nil
	}
	comp := c.blockCompression()
	hdr, payload := c.g.blk.Parts(c.g.buf[:0], comp)
	c.g.buf = hdr
	n := len(hdr) + len(payload)
	uncompressed := wal.Compression(hdr[1]) == wal.CompressNone
	if segmented {
		c.g.idsBuf = encodeIDs(c.g.idsBuf[:0], c.g.blockFirst, c.g.ids)
		ref, end, err := c.s.segs.append(hdr, payload, c.g.idsBuf)
		if err != nil {
			return 0, false, err
		}
		c.g.appended = true
		c.g.buf = ref.encode(c.g.buf[:0])
		c.g.batch.Set(key, c.g.buf, nil)
		c.g.batch.Set(metaSegments, segTail{seq: ref.seq, off: end}.encode(), nil)
		c.g.useSegment(ref.seq, int64(n), 1)
		return n, uncompressed, nil
	}
	op := c.g.batch.SetDeferred(len(key), n)
	copy(op.Key, key)
	copy(op.Value[copy(op.Value, hdr):], payload)
	op.Finish() // fails only for an indexed batch, as Set does
	return n, uncompressed, nil
}

// writeInLogRecords writes the deferred value records of the group: in-log
// records pointing into the group's block when it is stored uncompressed,
// inline records otherwise.
func (g *groupPending) writeInLogRecords(uncompressed bool) {
	for key, p := range g.inLog {
		g.kbuf = dataKey(g.kbuf, []byte(key))
		if uncompressed {
			g.buf = encodeInLog(g.buf[:0], p.index, p.attrs, g.blockFirst, p.offset, len(p.value), crc(p.value))
		} else {
			g.buf = encodeInline(g.buf, p.index, p.attrs, p.value)
		}
		g.batch.Set(g.kbuf, g.buf, nil)
	}
	clear(g.inLog)
}
