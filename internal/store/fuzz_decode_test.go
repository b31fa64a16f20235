package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quicksilver-kv/qs/internal/wal"
)

// The fuzzers of the store's on-disk decoders. Their seed corpora live in
// testdata/fuzz/<FuzzName>/ and run as unit tests with plain `go test`.
// Run one with
//
//	go test -run '^$' -fuzz=FuzzDecodeRecord -fuzztime=30s ./internal/store/
//
// Each requires that a decoder never panics, that what it refuses is an
// ErrCorrupt, and that what it accepts encodes back to what it decoded.

func mustCorrupt(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%s: error %v does not wrap ErrCorrupt", what, err)
	}
}

// sealed returns b with its leading CRC (4 bytes, big-endian, over the
// rest) set, so that a fuzzer reaches what the CRC guards.
func sealed(b []byte) []byte {
	if len(b) < 4 {
		return b
	}
	b = append([]byte(nil), b...)
	binary.BigEndian.PutUint32(b, crc(b[4:]))
	return b
}

// FuzzDecodeRecord: value records and chunks, with their CRC as found
// and set right.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeInline(nil, 7, valueAttrs{}, []byte("value")))
	f.Add(encodeInline(nil, 1, valueAttrs{}, nil))
	f.Add(encodeInline(nil, 2, valueAttrs{flags: 123}, []byte("flagged")))
	f.Add(encodeChunked(nil, 9, valueAttrs{}, 1<<20, 16, 0xdeadbeef))
	f.Add(encodeInLog(nil, 3, valueAttrs{}, 2, 100, 40, 0x01020304))
	f.Add(encodeRemote(nil, 5, valueAttrs{}, 1000, 42, nil))
	d := ValueDigestOf([]byte("value"))
	f.Add(encodeRemote(nil, 5, valueAttrs{}, 5, crc([]byte("value")), &d))
	f.Add(encodeRemote(nil, 6, valueAttrs{flags: 1<<32 - 1, expires: 1}, 1000, 42, &d))
	f.Add(encodeInLog(nil, 3, valueAttrs{expires: 1 << 62}, 2, 100, 40, 0x01020304))
	f.Add(encodeLost(nil, 11))
	f.Add(encodeChunk(nil, []byte("part of a value")))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkRecord(t, b)
		checkRecord(t, sealed(b))
	})
}

func checkRecord(t *testing.T, b []byte) {
	{
		if part, err := decodeChunk(b); err != nil {
			mustCorrupt(t, "chunk", err)
		} else if !bytes.Equal(encodeChunk(nil, part), b) {
			t.Fatalf("chunk %x re-encodes differently", b)
		}
		r, err := decodeRecord(b)
		if err != nil {
			mustCorrupt(t, "record", err)
			return
		}
		if r.valueLen < 0 || r.valueLen > wal.MaxValueLen || r.offset < 0 || r.chunks < 0 {
			t.Fatalf("record %x decodes out of bounds: %+v", b, r)
		}
		var again []byte
		switch r.kind {
		case recInline:
			again = encodeInline(nil, r.index, r.attrs, r.inline)
		case recChunked:
			again = encodeChunked(nil, r.index, r.attrs, r.valueLen, r.chunks, r.valueCRC)
		case recInLog:
			again = encodeInLog(nil, r.index, r.attrs, r.block, r.offset, r.valueLen, r.valueCRC)
		case recRemote:
			var d *ValueDigest
			if r.hasDigest {
				d = &r.digest
			}
			again = encodeRemote(nil, r.index, r.attrs, r.valueLen, r.valueCRC, d)
		case recLost:
			again = encodeLost(nil, r.index)
		default:
			t.Fatalf("record %x decodes to kind %d", b, r.kind)
		}
		r2, err := decodeRecord(again)
		if err != nil {
			t.Fatalf("re-encoded record %x does not decode: %v", again, err)
		}
		if r2.kind != r.kind || r2.index != r.index || r2.attrs != r.attrs || !bytes.Equal(r2.inline, r.inline) || r2.valueLen != r.valueLen ||
			r2.chunks != r.chunks || r2.valueCRC != r.valueCRC || r2.block != r.block || r2.offset != r.offset ||
			r2.hasDigest != r.hasDigest || r2.digest != r.digest {
			t.Fatalf("record round trip: %+v, then %+v", r, r2)
		}
	}
}

// FuzzDecodeMeta: the fixed-size meta records and the batch outcomes,
// chosen by the first byte. Each is canonical: it re-encodes to exactly
// the bytes it was decoded from.
func FuzzDecodeMeta(f *testing.F) {
	seeds := [][]byte{
		appliedRecord{index: 12, time: 99, hash: wal.Hash{1, 2, 3}}.encode(),
		logRecord{first: 3, bytes: 4096, baseHash: wal.Hash{9}}.encode(),
		statsRecord{keys: 2, valueBytes: 30, keyBytes: 8}.encode(),
		historyRecord{enabled: true, horizon: 5, bytes: 10, entries: 1}.encode(),
		proxyRecord{values: 3, bytes: 300}.encode(),
		retiredRecord{live: 1, liveBytes: 10, blockBytes: 100}.encode(),
		retiredTotals{blocks: 2, bytes: 200}.encode(),
		batchOutcome{index: 8, time: 1700000000, changed: true}.encode(),
	}
	for i, s := range seeds {
		f.Add(append([]byte{byte(i)}, s...))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		b := in[1:]
		var again []byte
		var err error
		switch in[0] % 8 {
		case 0:
			var a appliedRecord
			a, err = decodeApplied(b)
			again = a.encode()
		case 1:
			var l logRecord
			l, err = decodeLogRecord(b)
			again = l.encode()
		case 2:
			var s statsRecord
			s, err = decodeStats(b)
			again = s.encode()
		case 3:
			var h historyRecord
			h, err = decodeHistoryRecord(b)
			again = h.encode()
		case 4:
			var p proxyRecord
			p, err = decodeProxyRecord(b)
			again = p.encode()
		case 5:
			var r retiredRecord
			r, err = decodeRetired(b)
			again = r.encode()
		case 6:
			var r retiredTotals
			r, err = decodeRetiredTotals(b)
			again = r.encode()
		case 7:
			var o batchOutcome
			o, err = decodeBatchOutcome(b)
			again = o.encode()
		}
		if err != nil {
			mustCorrupt(t, "meta record", err)
			return
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("record %d: %x re-encodes to %x", in[0]%8, b, again)
		}
	})
}

// FuzzDecodeSegmentMeta: block references, segment tails and segment
// uses (uvarints), chosen by the first byte.
func FuzzDecodeSegmentMeta(f *testing.F) {
	f.Add(append([]byte{0}, blockRef{seq: 3, off: 8, n: 4000, payloadAt: 20}.encode(nil)...))
	f.Add([]byte{0, 5, 1, 2, 3})
	f.Add(append([]byte{1}, segTail{seq: 2, off: 1 << 20}.encode()...))
	f.Add(append([]byte{2}, segUse{blocks: 4, bytes: 1 << 16}.encode()...))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		b := in[1:]
		switch in[0] % 3 {
		case 0:
			r, isRef, err := decodeBlockRef(b)
			if err != nil {
				mustCorrupt(t, "block reference", err)
				return
			}
			if !isRef {
				return
			}
			if r.seq == 0 || r.off < 0 || r.n < 0 || r.payloadAt < 0 || r.payloadAt > r.n {
				t.Fatalf("block reference %x out of bounds: %+v", b, r)
			}
			r2, isRef, err := decodeBlockRef(r.encode(nil))
			if err != nil || !isRef || r2 != r {
				t.Fatalf("block reference round trip: %+v, then %+v, %v", r, r2, err)
			}
		case 1:
			tl, err := decodeSegTail(b)
			if err != nil {
				mustCorrupt(t, "segment tail", err)
				return
			}
			if tl.off < 0 {
				t.Fatalf("segment tail %x out of bounds: %+v", b, tl)
			}
			if t2, err := decodeSegTail(tl.encode()); err != nil || t2 != tl {
				t.Fatalf("segment tail round trip: %+v, then %+v, %v", tl, t2, err)
			}
		case 2:
			u, err := decodeSegUse(b)
			if err != nil {
				mustCorrupt(t, "segment use", err)
				return
			}
			if u.blocks < 0 || u.bytes < 0 {
				t.Fatalf("segment use %x out of bounds: %+v", b, u)
			}
			if u2, err := decodeSegUse(u.encode()); err != nil || u2 != u {
				t.Fatalf("segment use round trip: %+v, then %+v, %v", u, u2, err)
			}
		}
	})
}

// FuzzDecodeIDs: the batch ID frames of the log segments.
func FuzzDecodeIDs(f *testing.F) {
	f.Add(encodeIDs(nil, 5, map[string]batchOutcome{"a": {index: 5, time: 1}, "bb": {index: 6, time: 2, changed: true}}))
	f.Add(encodeIDs(nil, 1, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, first, sum, err := decodeIDs(b)
		if err != nil {
			mustCorrupt(t, "batch ID frame", err)
			return
		}
		for id := range ids {
			if len(id) > MaxBatchIDBytes {
				t.Fatalf("batch ID of %d bytes accepted", len(id))
			}
		}
		if len(ids) == 0 {
			return // a frame of no outcomes: never written (encodeIDs writes none)
		}
		again := encodeIDs(nil, first, ids)
		binary.LittleEndian.PutUint32(again[idsCRCAt:], sum)
		ids2, first2, sum2, err := decodeIDs(again)
		if err != nil || first2 != first || sum2 != sum || len(ids2) != len(ids) {
			t.Fatalf("batch ID frame round trip: %v", err)
		}
		for id, o := range ids {
			if ids2[id] != o {
				t.Fatalf("batch ID %q: %+v, then %+v", id, o, ids2[id])
			}
		}
	})
}

// FuzzDecodeSummary: the summaries of log blocks, with their CRC as
// found and set right.
func FuzzDecodeSummary(f *testing.F) {
	sum := func(parts ...[]byte) []byte {
		b := append([]byte{0, 0, 0, 0}, bytes.Join(parts, nil)...)
		binary.BigEndian.PutUint32(b, crc(b[4:]))
		return b
	}
	uv := func(v uint64) []byte { return binary.AppendUvarint(nil, v) }
	hashTime := make([]byte, 8+len(wal.Hash{}))
	f.Add(uint64(10), sum(uv(3), hashTime, uv(4096), uv(0)))
	f.Add(uint64(10), sum(uv(3), hashTime, uv(4096), uv(1), uv(2), uv(3), []byte("key"), uv(100)))
	f.Fuzz(func(t *testing.T, block uint64, b []byte) {
		checkSummary(t, block, b)
		checkSummary(t, block, sealed(b))
	})
}

func checkSummary(t *testing.T, block uint64, b []byte) {
	{
		s, err := decodeSummary(block, b)
		if err != nil {
			mustCorrupt(t, "summary", err)
			return
		}
		if s.count == 0 || s.storedBytes < 0 {
			t.Fatalf("summary %x out of bounds: %+v", b, s)
		}
		for _, v := range s.values {
			if v.index-block >= s.count || v.valueLen < 0 || v.valueLen > wal.MaxValueLen {
				t.Fatalf("summary %x: value out of bounds: %+v", b, v)
			}
		}
	}
}

// FuzzHistTimeKey: the keys of the history's time index.
func FuzzHistTimeKey(f *testing.F) {
	f.Add(histTimeKey(nil, 42, []byte("key")))
	f.Add([]byte("segment"))
	f.Fuzz(func(t *testing.T, k []byte) {
		until, key, ok := parseHistTimeKey(k)
		if !ok {
			return
		}
		if !bytes.Equal(histTimeKey(nil, until, key), k) {
			t.Fatalf("history time key %x re-encodes differently", k)
		}
	})
}

// FuzzSegmentFile: a log segment of arbitrary content after a valid one.
// Reading its header and walking its frames never panics, and an error
// is an ErrCorrupt.
func FuzzSegmentFile(f *testing.F) {
	var b wal.BlockBuilder
	e := wal.Entry{Index: 1, Time: 1}
	body := e.AppendBody(nil)
	e.Seal(wal.Hash{}, nil)
	b.Add(body, e.Hash, e.Time)
	blk := b.Finish(nil, wal.CompressNone)
	frame := func(p []byte) []byte {
		h := binary.LittleEndian.AppendUint32(nil, uint32(len(p)))
		h = binary.LittleEndian.AppendUint32(h, crc32.Checksum(p, castagnoli))
		return append(h, p...)
	}
	hdr := segHeader(1, frameHeader)
	f.Add(append(append([]byte(nil), hdr...), frame(blk)...))
	f.Add(append(append(append([]byte(nil), hdr...), frame(encodeIDs(nil, 1, map[string]batchOutcome{"x": {index: 1}}))...), frame(blk)...))
	f.Add(hdr)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, content []byte) {
		fs := vfs.NewMem()
		write := func(seq uint64, p []byte) {
			w, err := fs.Create(segName(seq), vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(p); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}
		write(1, segHeader(0, 0))
		write(2, content)
		g := newSegments(fs, "", maxSegmentBytes, newStoreMetrics())
		if err := g.openAll(); err != nil {
			t.Fatal(err)
		}
		defer g.close()
		if _, _, _, err := g.header(2); err != nil {
			mustCorrupt(t, "segment header", err)
		}
		pos := segTail{seq: 1, off: int64(len(segHeader(0, 0)))}
		want := uint64(1)
		_, err := g.walkTail(pos, func() uint64 { return want }, func(b tailBlock) (bool, error) {
			want = b.entries[len(b.entries)-1].Index + 1
			return true, nil
		})
		mustCorrupt(t, "segment walk", err)
	})
}

// TestDecodeSummaryBounds: a summary whose CRC matches but whose value
// length or stored size is beyond what the store writes is refused (the
// caller counts it and reads the block instead), not taken as counts.
func TestDecodeSummaryBounds(t *testing.T) {
	t.Parallel()
	uv := func(v uint64) []byte { return binary.AppendUvarint(nil, v) }
	hashTime := make([]byte, 8+len(wal.Hash{}))
	for name, body := range map[string][]byte{
		"value length": bytes.Join([][]byte{uv(3), hashTime, uv(4096), uv(1), uv(0), uv(1), []byte("k"), uv(wal.MaxValueLen + 1)}, nil),
		"stored size":  bytes.Join([][]byte{uv(3), hashTime, uv(1<<62 + 1), uv(0)}, nil),
	} {
		b := sealed(append([]byte{0, 0, 0, 0}, body...))
		if _, err := decodeSummary(10, b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s out of bounds: %v, want ErrCorrupt", name, err)
		}
	}
	ok := sealed(append([]byte{0, 0, 0, 0}, bytes.Join([][]byte{uv(3), hashTime, uv(4096), uv(1), uv(2), uv(1), []byte("k"), uv(wal.MaxValueLen)}, nil)...))
	s, err := decodeSummary(10, ok)
	if err != nil || len(s.values) != 1 || s.values[0].valueLen != wal.MaxValueLen || s.values[0].index != 12 {
		t.Fatalf("summary at the bounds: %+v, %v", s, err)
	}
}
