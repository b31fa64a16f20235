package store

import (
	"fmt"

	"github.com/quicksilver-kv/qs/internal/wal"
)

func (c *committer) applyOp(op wal.Op, index uint64, valueOff int) error {
	ks, err := c.state(op.Key)
	if err != nil {
		return err
	}
	keep := c.hist.enabled && ks.exists && ks.index != index
	if !keep || !historyRefers(ks) {
		// Else the history's version takes over the reference.
		if err := c.release(ks); err != nil {
			return err
		}
	}
	delete(c.inLog, string(op.Key))
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
		c.batch.DeleteRange(p, prefixEnd(p), nil)
	}
	c.indexExpiry(op.Key, ks, op, index)
	c.kbuf = dataKey(c.kbuf, op.Key)
	switch op.Type {
	case wal.OpSet:
		newChunks, remote := c.place.set(c, op, index, valueOff, ks)
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
		*ks = keyState{exists: true, index: index, attrs: attrsOf(op), value: op.Value, valueLen: len(op.Value), chunks: newChunks, remote: remote}
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
		c.buf = encodeInline(c.buf, index, attrs, value)
		c.batch.Set(c.kbuf, c.buf, nil)
		return 0
	}
	n := (len(value) + cb - 1) / cb
	for i := 0; i < n; i++ {
		part := value[i*cb : min((i+1)*cb, len(value))]
		c.buf = encodeChunk(c.buf, part)
		c.batch.Set(chunkKey(nil, key, uint32(i)), c.buf, nil)
	}
	c.buf = encodeChunked(c.buf, index, attrs, len(value), n, crc(value))
	c.batch.Set(c.kbuf, c.buf, nil)
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
			c.buf = encodeInLog(c.buf[:0], p.index, p.attrs, c.blockFirst, p.offset, len(p.value), crc(p.value))
		} else {
			c.buf = encodeInline(c.buf, p.index, p.attrs, p.value)
		}
		c.batch.Set(c.kbuf, c.buf, nil)
	}
	clear(c.inLog)
}
