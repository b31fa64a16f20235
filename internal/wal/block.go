package wal

import (
	"encoding/binary"
	"fmt"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
)

// Compression selects how block payloads are compressed.
type Compression uint8

const (
	CompressNone   Compression = 0
	CompressZstd   Compression = 1
	CompressSnappy Compression = 2
)

// ParseCompression maps a config name to a Compression.
func ParseCompression(s string) (Compression, error) {
	switch s {
	case "zstd", "":
		return CompressZstd, nil
	case "snappy":
		return CompressSnappy, nil
	case "none":
		return CompressNone, nil
	}
	return 0, fmt.Errorf("unknown compression %q (want zstd, snappy or none)", s)
}

// A block holds consecutive entries, compressed together:
//
//	block   := version(1) compression(1) count(uvarint) lastTime(8 BE) rawLen(uvarint) payload
//	payload := compress(record*)
//	record  := bodyLen(uvarint) body hash(32)
//
// The index of the first entry is not in the block: it is the block's key in
// the store and the first entry's body carries it too.
const (
	blockVersion = 1
	// minCompress is the smallest payload worth compressing.
	minCompress = 256
	// MaxBlockRaw bounds the decompressed size of a block.
	MaxBlockRaw = 1 << 30
)

var (
	zenc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(2))
	// DecodeAll decodes at most cap(dst) bytes: payload decoding sizes dst
	// from the block header, checked against what the payload can hold.
	zdec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxBlockRaw), zstd.WithDecodeAllCapLimit(true))
)

// BlockHeader is the uncompressed part of a block.
type BlockHeader struct {
	Count    int
	LastTime int64
	RawLen   int
}

// BlockBuilder accumulates entries for one block.
type BlockBuilder struct {
	raw      []byte
	count    int
	lastTime int64
	zbuf     []byte // the compressed payload of the last Parts
}

// Add appends an entry whose body was already encoded and hash set.
func (b *BlockBuilder) Add(body []byte, h Hash, t int64) {
	b.raw = binary.AppendUvarint(b.raw, uint64(len(body)))
	b.raw = append(b.raw, body...)
	b.endEntry(h, t)
}

// AddEntry encodes e's body straight into the block (no intermediate
// copy of its values) and returns where, in the uncompressed payload, the
// body starts. With seal, e.Hash is set to ChainHash(prev, body), hashing
// the body's bytes once; otherwise e.Hash is the entry's own (verified)
// hash. The result is the same as Add(e.AppendBody(nil), e.Hash, e.Time)
// after e.Seal(prev, nil).
func (b *BlockBuilder) AddEntry(e *Entry, prev Hash, seal bool) int {
	b.raw = binary.AppendUvarint(b.raw, uint64(e.BodySize()))
	at := len(b.raw)
	b.raw = e.AppendBody(b.raw)
	if seal {
		e.Hash = ChainHash(prev, b.raw[at:])
	}
	b.endEntry(e.Hash, e.Time)
	return at
}

// endEntry appends the hash of the entry whose body was just appended.
func (b *BlockBuilder) endEntry(h Hash, t int64) {
	b.raw = append(b.raw, h[:]...)
	b.count++
	b.lastTime = t
}

// Len is the number of entries added.
func (b *BlockBuilder) Len() int { return b.count }

// RawLen is the size of the uncompressed payload so far.
func (b *BlockBuilder) RawLen() int { return len(b.raw) }

// Reset empties the builder, keeping its buffer.
func (b *BlockBuilder) Reset() { b.raw, b.count, b.lastTime = b.raw[:0], 0, 0 }

// Finish appends the encoded block to dst.
func (b *BlockBuilder) Finish(dst []byte, c Compression) []byte {
	hdr, payload := b.Parts(dst, c)
	return append(hdr, payload...)
}

// Parts returns the encoded block in two parts, to be stored one after
// the other: its header (appended to dst) and its payload. The payload
// is the builder's own buffer, valid until the next Add, Reset or Parts:
// uncompressed, a caller copying both parts into their destination copies
// the entries' bytes once; compressed, the buffer is reused by the next
// block.
func (b *BlockBuilder) Parts(dst []byte, c Compression) (header, payload []byte) {
	payload = b.raw
	if len(payload) < minCompress {
		c = CompressNone
	}
	switch c {
	case CompressZstd:
		b.zbuf = zenc.EncodeAll(b.raw, b.zbuf[:0])
		payload = b.zbuf
	case CompressSnappy:
		b.zbuf = snappy.Encode(b.zbuf[:cap(b.zbuf)], b.raw)
		payload = b.zbuf
	}
	if c != CompressNone && len(payload) >= len(b.raw) {
		c, payload = CompressNone, b.raw
	}
	dst = append(dst, blockVersion, byte(c))
	dst = binary.AppendUvarint(dst, uint64(b.count))
	dst = binary.BigEndian.AppendUint64(dst, uint64(b.lastTime))
	dst = binary.AppendUvarint(dst, uint64(len(b.raw)))
	return dst, payload
}

// ParseBlockHeader decodes the header and returns the payload.
func ParseBlockHeader(blk []byte) (BlockHeader, Compression, []byte, error) {
	var h BlockHeader
	if len(blk) < 2 || blk[0] != blockVersion {
		return h, 0, nil, fmt.Errorf("%w: bad block version", ErrMalformed)
	}
	c := Compression(blk[1])
	if c > CompressSnappy {
		return h, 0, nil, fmt.Errorf("%w: unknown block compression %d", ErrMalformed, c)
	}
	b := blk[2:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count == 0 || count > MaxBlockRaw {
		return h, 0, nil, fmt.Errorf("%w: bad block count", ErrMalformed)
	}
	b = b[n:]
	if len(b) < 8 {
		return h, 0, nil, fmt.Errorf("%w: block header truncated", ErrMalformed)
	}
	h.LastTime = int64(binary.BigEndian.Uint64(b))
	b = b[8:]
	rawLen, n := binary.Uvarint(b)
	if n <= 0 || rawLen > MaxBlockRaw {
		return h, 0, nil, fmt.Errorf("%w: bad block length", ErrMalformed)
	}
	h.Count, h.RawLen = int(count), int(rawLen)
	return h, c, b[n:], nil
}

// DecodeBlock decodes every entry of a block, checking each record's
// structure (not the hash chain: see Verifier). Keys and values alias
// freshly allocated memory, never blk.
func DecodeBlock(blk []byte) ([]Entry, error) {
	h, c, payload, err := ParseBlockHeader(blk)
	if err != nil {
		return nil, err
	}
	raw, err := decompress(h, c, payload)
	if err != nil {
		return nil, err
	}
	if h.Count > len(raw)/(18+32) {
		return nil, fmt.Errorf("%w: block claims %d entries in %d bytes", ErrMalformed, h.Count, len(raw))
	}
	entries := make([]Entry, 0, h.Count)
	for i := 0; i < h.Count; i++ {
		var body []byte
		if body, raw, err = readBytes(raw, MaxBlockRaw); err != nil {
			return nil, fmt.Errorf("%w: block record %d: %v", ErrMalformed, i, err)
		}
		if len(raw) < len(Hash{}) {
			return nil, fmt.Errorf("%w: block record %d: hash truncated", ErrMalformed, i)
		}
		e, err := DecodeBody(body)
		if err != nil {
			return nil, fmt.Errorf("block record %d: %w", i, err)
		}
		copy(e.Hash[:], raw)
		raw = raw[len(Hash{}):]
		entries = append(entries, e)
	}
	if len(raw) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last block record", ErrMalformed, len(raw))
	}
	return entries, nil
}

// decompress returns the payload's records in freshly allocated memory,
// exactly h.RawLen bytes of them. A header claiming more than the payload
// could expand to is refused before anything of that size is allocated, so
// a flipped length bit cannot cost a gigabyte.
func decompress(h BlockHeader, c Compression, payload []byte) ([]byte, error) {
	var raw []byte
	var err error
	switch c {
	case CompressZstd:
		// Every zstd block has a 3-byte header and decodes to at most
		// 128 KiB.
		if h.RawLen > (len(payload)/3+1)<<17 {
			return nil, fmt.Errorf("%w: block header says %d bytes, more than %d zstd bytes can hold", ErrMalformed, h.RawLen, len(payload))
		}
		raw, err = zdec.DecodeAll(payload, make([]byte, 0, h.RawLen))
	case CompressSnappy:
		// Snappy expands at most 64 bytes from a 3-byte copy.
		var n int
		if n, err = snappy.DecodedLen(payload); err == nil && n != h.RawLen {
			err = fmt.Errorf("decoded length %d, header says %d", n, h.RawLen)
		}
		if err == nil && h.RawLen > len(payload)*22 {
			err = fmt.Errorf("decoded length %d is more than %d snappy bytes can hold", h.RawLen, len(payload))
		}
		if err == nil {
			raw, err = snappy.Decode(nil, payload)
		}
	default:
		raw = append([]byte(nil), payload...)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: block payload: %v", ErrMalformed, err)
	}
	if len(raw) != h.RawLen {
		return nil, fmt.Errorf("%w: block payload is %d bytes, header says %d", ErrMalformed, len(raw), h.RawLen)
	}
	return raw, nil
}

// Verifier checks that entries continue a log: each index is the previous
// plus one and each hash chains from the previous hash. It holds no I/O.
type Verifier struct {
	Index uint64 // index of the last accepted entry (0 = empty log)
	Hash  Hash   // hash of the last accepted entry
	buf   []byte
}

// Check verifies e against the chain and, if it follows, advances the
// verifier. It returns an error naming what is wrong otherwise.
func (v *Verifier) Check(e *Entry) error {
	if e.Index != v.Index+1 {
		return fmt.Errorf("entry %d does not follow index %d", e.Index, v.Index)
	}
	v.buf = e.AppendBody(v.buf[:0])
	if got := ChainHash(v.Hash, v.buf); got != e.Hash {
		return fmt.Errorf("entry %d: hash %s does not chain from %s (want %s)", e.Index, e.Hash, v.Hash, got)
	}
	v.Index, v.Hash = e.Index, e.Hash
	return nil
}

// BlockLastHash returns the hash of the last entry in a block.
func BlockLastHash(blk []byte) (Hash, error) {
	var h Hash
	bh, c, payload, err := ParseBlockHeader(blk)
	if err != nil {
		return h, err
	}
	raw := payload // a raw payload is read in place
	if c != CompressNone {
		if raw, err = decompress(bh, c, payload); err != nil {
			return h, err
		}
	}
	if len(raw) != bh.RawLen || len(raw) < len(h) {
		return h, fmt.Errorf("%w: block payload unreadable", ErrMalformed)
	}
	copy(h[:], raw[len(raw)-len(h):])
	return h, nil
}
