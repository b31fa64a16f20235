package store

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/quicksilver-kv/qs/internal/wal"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// A value record, stored under dataKey:
//
//	record := crc32c(rest)(4) flags(1) index(8 BE) [clientFlags(4 BE)] [expires(8 BE)] body
//	inline body  := value
//	chunked body := valueLen(uvarint) chunks(uvarint) crc32c(value)(4)
//	in-log body  := block(8 BE) offset(uvarint) valueLen(uvarint) crc32c(value)(4)
//	remote body  := valueLen(uvarint) crc32c(value)(4) [digest(value)(16)]
//	lost body    := (empty)
//
// An in-log record stores no value: the value is read from the log block
// whose first index is block, at offset in its (uncompressed) payload. The
// log holds every value anyway, so a large value is written once per
// commit instead of twice. When log retention drops such a block, it is
// kept as a retired block while most of it is live, else the records still
// pointing into it are rewritten as inline records (retire.go).
//
// A remote record (proxy stores only, see proxy.go) says the key exists,
// with this index, length, CRC and digest, but its value is not stored
// here: it is fetched from a full replica, and served only if it has that
// length, CRC and digest. The digest (flagDigest; remote records written
// before it have none, and are checked by length and CRC only) is the
// first 16 bytes of the value's SHA-256: a CRC can be forged to any value
// of the same length, a digest cannot. A lost record (history only, see
// history.go) stands for a version whose value was unreadable when it was
// overwritten.
//
// flagClient and flagExpires may be added to the flags of any record but
// a lost one: the value has client flags (memcached's 32-bit flags,
// wal.Op.Flags) other than 0, or an expiry (wal.Op.Expires), stored after
// the index in that order. A record without them has client flags 0 and
// never expires, as every record written before they existed.
//
// A chunk, stored under chunkKey: crc32c(bytes)(4) bytes.
const (
	recHeader    = 4 + 1 + 8
	flagChunked  = 1 << 0
	flagInLog    = 1 << 1
	flagRemote   = 1 << 2
	flagLost     = 1 << 3
	flagDigest   = 1 << 4 // with flagRemote: the body ends with the value's digest
	flagClient   = 1 << 5
	flagExpires  = 1 << 6
	chunkOverhed = 4
)

// ValueDigestSize is the size of a value digest.
const ValueDigestSize = 16

// ValueDigest is the digest of a value a proxy checks fetched values against:
// the first ValueDigestSize bytes of its SHA-256.
type ValueDigest [ValueDigestSize]byte

// ValueDigestOf returns the digest of value.
func ValueDigestOf(value []byte) ValueDigest {
	sum := sha256.Sum256(value)
	return ValueDigest(sum[:ValueDigestSize])
}

// recordKind is the kind of a value record: where its value is.
type recordKind uint8

const (
	// recInline holds its value (inline).
	recInline recordKind = iota
	// recChunked has its value in chunks (valueLen, chunks, valueCRC).
	recChunked
	// recInLog has its value in the log block `block` at `offset`
	// (valueLen, valueCRC).
	recInLog
	// recRemote: the value is not stored here (valueLen and valueCRC are
	// set); proxy stores only.
	recRemote
	// recLost: the value is unknown (history of a corrupt record).
	recLost
)

// record is a decoded value record header.
type record struct {
	kind     recordKind
	index    uint64
	attrs    valueAttrs // what was stored with the value
	inline   []byte     // the value of an inline record
	valueLen int
	chunks   int
	valueCRC uint32
	// remote records: the value's digest, if the record has one.
	digest    ValueDigest
	hasDigest bool
	// in-log records: the value is in log block `block` at `offset`.
	block  uint64
	offset int
}

// valueAttrs is what a set stores with its value besides its bytes.
type valueAttrs struct {
	flags   uint32 // client flags
	expires int64  // log time (Unix ns) from which the root deletes the key; 0: never
}

// encodedLen is the number of bytes a's attributes take in a record.
func (a valueAttrs) encodedLen() int {
	n := 0
	if a.flags != 0 {
		n += 4
	}
	if a.expires != 0 {
		n += 8
	}
	return n
}

func attrsOf(op wal.Op) valueAttrs { return valueAttrs{flags: op.Flags, expires: op.Expires} }

// recordHead appends a record's header up to its body: room for the CRC,
// the flags byte (kind, plus flagClient and flagExpires for the
// attributes that are set), the index and the attributes.
func recordHead(dst []byte, kind byte, index uint64, a valueAttrs) []byte {
	if a.flags != 0 {
		kind |= flagClient
	}
	if a.expires != 0 {
		kind |= flagExpires
	}
	dst = append(dst[:0], 0, 0, 0, 0, kind)
	dst = binary.BigEndian.AppendUint64(dst, index)
	if a.flags != 0 {
		dst = binary.BigEndian.AppendUint32(dst, a.flags)
	}
	if a.expires != 0 {
		dst = binary.BigEndian.AppendUint64(dst, uint64(a.expires))
	}
	return dst
}

func encodeInline(dst []byte, index uint64, attrs valueAttrs, value []byte) []byte {
	dst = recordHead(dst, 0, index, attrs)
	dst = append(dst, value...)
	binary.BigEndian.PutUint32(dst, crc(dst[4:]))
	return dst
}

func encodeInLog(dst []byte, index uint64, attrs valueAttrs, block uint64, offset, valueLen int, valueCRC uint32) []byte {
	dst = recordHead(dst, flagInLog, index, attrs)
	dst = binary.BigEndian.AppendUint64(dst, block)
	dst = binary.AppendUvarint(dst, uint64(offset))
	dst = binary.AppendUvarint(dst, uint64(valueLen))
	dst = binary.BigEndian.AppendUint32(dst, valueCRC)
	binary.BigEndian.PutUint32(dst, crc(dst[4:]))
	return dst
}

func encodeChunked(dst []byte, index uint64, attrs valueAttrs, valueLen, chunks int, valueCRC uint32) []byte {
	dst = recordHead(dst, flagChunked, index, attrs)
	dst = binary.AppendUvarint(dst, uint64(valueLen))
	dst = binary.AppendUvarint(dst, uint64(chunks))
	dst = binary.BigEndian.AppendUint32(dst, valueCRC)
	binary.BigEndian.PutUint32(dst, crc(dst[4:]))
	return dst
}

// encodeRemote encodes a remote record; digest nil writes one without a
// digest (a value that could not be read to compute it).
func encodeRemote(dst []byte, index uint64, attrs valueAttrs, valueLen int, valueCRC uint32, digest *ValueDigest) []byte {
	kind := byte(flagRemote)
	if digest != nil {
		kind |= flagDigest
	}
	dst = recordHead(dst, kind, index, attrs)
	dst = binary.AppendUvarint(dst, uint64(valueLen))
	dst = binary.BigEndian.AppendUint32(dst, valueCRC)
	if digest != nil {
		dst = append(dst, digest[:]...)
	}
	binary.BigEndian.PutUint32(dst, crc(dst[4:]))
	return dst
}

func encodeLost(dst []byte, index uint64) []byte {
	dst = append(dst[:0], 0, 0, 0, 0, flagLost)
	dst = binary.BigEndian.AppendUint64(dst, index)
	binary.BigEndian.PutUint32(dst, crc(dst[4:]))
	return dst
}

// decodeRecord checks the record CRC and decodes it. inline aliases b.
func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) < recHeader {
		return r, fmt.Errorf("%w: value record of %d bytes is truncated", ErrCorrupt, len(b))
	}
	if got, want := crc(b[4:]), binary.BigEndian.Uint32(b); got != want {
		return r, fmt.Errorf("%w: value record crc %08x, stored %08x", ErrCorrupt, got, want)
	}
	flags := b[4]
	r.index = binary.BigEndian.Uint64(b[5:])
	body := b[recHeader:]
	if flags&(flagClient|flagExpires) != 0 && flags&flagLost == 0 {
		if flags&flagClient != 0 {
			if len(body) < 4 {
				return r, fmt.Errorf("%w: value record client flags truncated", ErrCorrupt)
			}
			if r.attrs.flags = binary.BigEndian.Uint32(body); r.attrs.flags == 0 {
				return r, fmt.Errorf("%w: value record with client flags 0", ErrCorrupt)
			}
			body = body[4:]
		}
		if flags&flagExpires != 0 {
			if len(body) < 8 {
				return r, fmt.Errorf("%w: value record expiry truncated", ErrCorrupt)
			}
			if r.attrs.expires = int64(binary.BigEndian.Uint64(body)); r.attrs.expires == 0 {
				return r, fmt.Errorf("%w: value record with expiry 0", ErrCorrupt)
			}
			body = body[8:]
		}
		flags &^= flagClient | flagExpires
	}
	switch flags {
	case 0, flagChunked, flagInLog:
	case flagRemote, flagRemote | flagDigest:
		want := 4
		if flags&flagDigest != 0 {
			want += ValueDigestSize
		}
		l, n := binary.Uvarint(body)
		if n <= 0 || l > wal.MaxValueLen || len(body) != n+want {
			return r, fmt.Errorf("%w: remote record malformed", ErrCorrupt)
		}
		r.kind, r.valueLen, r.valueCRC = recRemote, int(l), binary.BigEndian.Uint32(body[n:])
		if flags&flagDigest != 0 {
			r.hasDigest = true
			copy(r.digest[:], body[n+4:])
		}
		return r, nil
	case flagLost:
		if len(body) != 0 {
			return r, fmt.Errorf("%w: lost record malformed", ErrCorrupt)
		}
		r.kind = recLost
		return r, nil
	default:
		return r, fmt.Errorf("%w: value record flags %#x", ErrCorrupt, flags)
	}
	if flags&flagInLog != 0 {
		if flags != flagInLog || len(body) < 8+1+1+4 {
			return r, fmt.Errorf("%w: in-log record malformed", ErrCorrupt)
		}
		r.kind = recInLog
		r.block = binary.BigEndian.Uint64(body)
		body = body[8:]
		off, n := binary.Uvarint(body)
		if n <= 0 || off > wal.MaxBlockRaw {
			return r, fmt.Errorf("%w: in-log record offset", ErrCorrupt)
		}
		body = body[n:]
		l, n := binary.Uvarint(body)
		if n <= 0 || l > wal.MaxValueLen {
			return r, fmt.Errorf("%w: in-log record length", ErrCorrupt)
		}
		body = body[n:]
		if len(body) != 4 {
			return r, fmt.Errorf("%w: in-log record trailer", ErrCorrupt)
		}
		r.offset, r.valueLen, r.valueCRC = int(off), int(l), binary.BigEndian.Uint32(body)
		return r, nil
	}
	if flags&flagChunked == 0 {
		r.inline, r.valueLen = body, len(body)
		r.valueCRC = 0 // computed lazily by callers that need it
		return r, nil
	}
	r.kind = recChunked
	l, n := binary.Uvarint(body)
	if n <= 0 || l > wal.MaxValueLen {
		return r, fmt.Errorf("%w: chunked record length", ErrCorrupt)
	}
	body = body[n:]
	c, n := binary.Uvarint(body)
	if n <= 0 || c == 0 || c > l+1 {
		return r, fmt.Errorf("%w: chunked record chunk count", ErrCorrupt)
	}
	body = body[n:]
	if len(body) != 4 {
		return r, fmt.Errorf("%w: chunked record trailer", ErrCorrupt)
	}
	r.valueLen, r.chunks, r.valueCRC = int(l), int(c), binary.BigEndian.Uint32(body)
	return r, nil
}

func encodeChunk(dst, part []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst[:0], crc(part))
	return append(dst, part...)
}

func decodeChunk(b []byte) ([]byte, error) {
	if len(b) < chunkOverhed {
		return nil, fmt.Errorf("%w: chunk truncated", ErrCorrupt)
	}
	if got, want := crc(b[4:]), binary.BigEndian.Uint32(b); got != want {
		return nil, fmt.Errorf("%w: chunk crc %08x, stored %08x", ErrCorrupt, got, want)
	}
	return b[4:], nil
}

// appliedRecord is the durable position of the database: the last entry
// applied, its hash and its time. It is written in the same batch as the
// entry, so it can never disagree with the data.
type appliedRecord struct {
	index uint64
	hash  wal.Hash
	time  int64
}

func (a appliedRecord) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, a.index)
	b = append(b, a.hash[:]...)
	return binary.BigEndian.AppendUint64(b, uint64(a.time))
}

func decodeApplied(b []byte) (appliedRecord, error) {
	var a appliedRecord
	if len(b) != 8+32+8 {
		return a, fmt.Errorf("%w: applied record of %d bytes", ErrCorrupt, len(b))
	}
	a.index = binary.BigEndian.Uint64(b)
	copy(a.hash[:], b[8:])
	a.time = int64(binary.BigEndian.Uint64(b[40:]))
	return a, nil
}

// logRecord describes the retained log: entries first..applied.index, their
// stored size, and the hash of entry first-1 (zero when first is 1).
type logRecord struct {
	first    uint64
	bytes    int64
	baseHash wal.Hash
}

func (l logRecord) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, l.first)
	b = binary.BigEndian.AppendUint64(b, uint64(l.bytes))
	return append(b, l.baseHash[:]...)
}

func decodeLogRecord(b []byte) (logRecord, error) {
	var l logRecord
	if len(b) != 8+8+32 {
		return l, fmt.Errorf("%w: log record of %d bytes", ErrCorrupt, len(b))
	}
	l.first = binary.BigEndian.Uint64(b)
	l.bytes = int64(binary.BigEndian.Uint64(b[8:]))
	copy(l.baseHash[:], b[16:])
	return l, nil
}

// statsRecord counts live keys and the bytes of their keys and values.
type statsRecord struct {
	keys       int64
	valueBytes int64
	keyBytes   int64
}

func (s statsRecord) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(s.keys))
	b = binary.BigEndian.AppendUint64(b, uint64(s.valueBytes))
	return binary.BigEndian.AppendUint64(b, uint64(s.keyBytes))
}

func decodeStats(b []byte) (statsRecord, error) {
	var s statsRecord
	if len(b) != 24 {
		return s, fmt.Errorf("%w: stats record of %d bytes", ErrCorrupt, len(b))
	}
	s.keys = int64(binary.BigEndian.Uint64(b))
	s.valueBytes = int64(binary.BigEndian.Uint64(b[8:]))
	s.keyBytes = int64(binary.BigEndian.Uint64(b[16:]))
	return s, nil
}
