package store

import (
	"encoding/binary"
	"fmt"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// Log block summaries.
//
// Every log block is committed with a summary record, in the same batch:
// what retention needs to drop the block from the log without reading it
// back. Its entry count, the time and hash of its last entry (the age
// limit and the log's new base hash), its stored size, and the in-log
// values committed with it: for each, the entry's index, the key and the
// value's length. Retention checks those keys' records to count the
// block's live values (retire.go), as it did by decoding the block;
// reading a 40–80 kB block back from its blob file and decoding it cost
// 14% of the store's CPU under a steady stream of large writes once the
// log was full (BenchmarkWrite40KB/log-full).
//
// Record: mlb<BE64 block> →
//
//	crc32c(rest)(4) count(uvarint) lastTime(8 BE) lastHash(32)
//	storedBytes(uvarint) values(uvarint)
//	values × [index-block(uvarint) len(key)(uvarint) key valueLen(uvarint)]
//
// The summary leaves with its block: deleted when retention drops the
// block from the log (a retired block has its retiredRecord instead).
// Blocks written before summaries existed, or whose summary fails its
// CRC, are read back as before.

// blockSummary is a decoded summary record.
type blockSummary struct {
	count       uint64
	lastTime    int64
	lastHash    wal.Hash
	storedBytes int64
	values      []summaryValue
}

// summaryValue is an in-log value committed with the block.
type summaryValue struct {
	index    uint64
	key      []byte // the user key (a slice of the decoded record)
	valueLen int
}

// summaryKey is the key of block's summary record.
func summaryKey(block uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), metaBlockSummary...), block)
}

// summaryKeyBlock returns the block of a summary record's key.
func summaryKeyBlock(k []byte) (uint64, bool) {
	if len(k) != len(metaBlockSummary)+8 || string(k[:len(metaBlockSummary)]) != string(metaBlockSummary) {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[len(metaBlockSummary):]), true
}

// encodeSummary appends the summary of the group's block (stored in
// storedBytes bytes) to dst. With inLog, the block is stored uncompressed
// and the group's pending in-log values point into it.
func (c *committer) encodeSummary(dst []byte, storedBytes int, inLog bool) []byte {
	dst = append(dst[:0], 0, 0, 0, 0)
	dst = binary.AppendUvarint(dst, c.last.index-c.g.blockFirst+1)
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.last.time))
	dst = append(dst, c.last.hash[:]...)
	dst = binary.AppendUvarint(dst, uint64(storedBytes))
	if !inLog {
		dst = binary.AppendUvarint(dst, 0)
	} else {
		dst = binary.AppendUvarint(dst, uint64(len(c.g.inLog)))
		for key, p := range c.g.inLog {
			dst = binary.AppendUvarint(dst, p.index-c.g.blockFirst)
			dst = binary.AppendUvarint(dst, uint64(len(key)))
			dst = append(dst, key...)
			dst = binary.AppendUvarint(dst, uint64(len(p.value)))
		}
	}
	binary.BigEndian.PutUint32(dst, crc(dst[4:]))
	return dst
}

// decodeSummary decodes the summary of block; its keys point into b.
func decodeSummary(block uint64, b []byte) (blockSummary, error) {
	var s blockSummary
	bad := func(what string) (blockSummary, error) {
		return blockSummary{}, fmt.Errorf("%w: summary of log block %d: %s", ErrCorrupt, block, what)
	}
	if len(b) < 4 || binary.BigEndian.Uint32(b) != crc(b[4:]) {
		return bad("CRC mismatch")
	}
	b = b[4:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	var ok bool
	if s.count, ok = uv(); !ok || s.count == 0 {
		return bad("bad entry count")
	}
	if len(b) < 8+len(s.lastHash) {
		return bad("truncated")
	}
	s.lastTime = int64(binary.BigEndian.Uint64(b))
	copy(s.lastHash[:], b[8:])
	b = b[8+len(s.lastHash):]
	stored, ok := uv()
	if !ok || stored > 1<<62 {
		return bad("bad stored size")
	}
	s.storedBytes = int64(stored)
	n, ok := uv()
	if !ok || n > uint64(len(b)) {
		return bad("bad value count")
	}
	if n > 0 {
		s.values = make([]summaryValue, n)
	}
	for i := range s.values {
		d, ok1 := uv()
		kl, ok2 := uv()
		if !ok1 || !ok2 || d >= s.count || kl > uint64(len(b)) {
			return bad("bad value entry")
		}
		key := b[:kl]
		b = b[kl:]
		vl, ok3 := uv()
		if !ok3 || vl > wal.MaxValueLen {
			return bad("bad value length")
		}
		s.values[i] = summaryValue{index: block + d, key: key, valueLen: int(vl)}
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	return s, nil
}

// summary returns the summary of block: usable is false if it has none
// or its summary does not decode (counted and logged; the caller reads the
// block instead), present whether a summary record exists.
func (c *committer) summary(block uint64) (s blockSummary, usable, present bool, err error) {
	v, found, err := c.lookup(summaryKey(block))
	if err != nil || !found {
		return blockSummary{}, false, false, err
	}
	c.g.sumBuf = append(c.g.sumBuf[:0], v...) // lookups move the iterator
	s, err = decodeSummary(block, c.g.sumBuf)
	if err != nil {
		c.s.m.integrityErrors.WithLabelValues("block_summary").Inc()
		c.s.opts.Logger.Error("log block summary unreadable; reading the block instead", "db", c.s.opts.Name, "block", block, "err", err)
		return blockSummary{}, false, true, nil
	}
	return s, true, true, nil
}

// liveFromSummary counts the live values of block from its summary: the
// values whose records will still point into it once the group commits.
func (c *committer) liveFromSummary(block uint64, s *blockSummary) (retiredRecord, error) {
	r := retiredRecord{blockBytes: s.storedBytes}
	for _, v := range s.values {
		ref, live, err := c.liveAt(v.key, block, v.index)
		if err != nil {
			return r, err
		}
		if !live {
			continue
		}
		r.live++
		r.liveBytes += int64(ref.rec.valueLen)
	}
	return r, nil
}
