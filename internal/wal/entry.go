package wal

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// Limits of the format itself. Databases may configure tighter limits.
const (
	// MaxKeyLen is the longest key the format accepts.
	MaxKeyLen = 8 << 10
	// MaxValueLen is the largest value the format accepts (stored chunked).
	MaxValueLen = 256 << 20
	// MaxOps is the most operations one entry may carry.
	MaxOps = 1 << 20
)

// bodyVersion is the first byte of every entry body.
const bodyVersion = 1

// ErrMalformed is returned for any entry or block that cannot be decoded.
var ErrMalformed = errors.New("qs: malformed log entry")

// OpType is the kind of a single operation in an entry.
type OpType uint8

const (
	OpSet    OpType = 1
	OpDelete OpType = 2
)

// opSetAttrs is how a set with attributes (client flags other than 0, an
// expiry) is encoded: as a set, with an attribute mask and the attributes
// between its key and its value. A set without attributes keeps the
// original encoding (type 1), so logs written before attributes existed
// decode, and hash, exactly as before.
const opSetAttrs = 3

// Attribute mask bits of an opSetAttrs op.
const (
	attrFlags   = 1 << 0 // client flags (4 bytes, BE), not 0
	attrExpires = 1 << 1 // expiry (8 bytes, BE), not 0
	attrAll     = attrFlags | attrExpires
)

func (t OpType) String() string {
	switch t {
	case OpSet:
		return "set"
	case OpDelete:
		return "del"
	}
	return fmt.Sprintf("op(%d)", uint8(t))
}

// Op is one change to one key. Value is empty for OpDelete.
type Op struct {
	Type  OpType
	Key   []byte
	Value []byte
	// Flags are the client flags stored with a set's value (the 32-bit
	// flags of memcached; 0 unless a client sets them). 0 for OpDelete.
	Flags uint32
	// Expires is the log time (Unix ns, the clock of Entry.Time) from
	// which the root deletes the key the set writes; 0: never. 0 for
	// OpDelete.
	Expires int64
}

// attrs is the attribute mask of op: 0 when it is encoded without
// attributes.
func (op *Op) attrs() byte {
	if op.Type != OpSet {
		return 0
	}
	var m byte
	if op.Flags != 0 {
		m |= attrFlags
	}
	if op.Expires != 0 {
		m |= attrExpires
	}
	return m
}

// opHeaderLen is the size of op's encoding before its value: type, key
// length, key, and the attributes of a set that has some.
func (op *Op) opHeaderLen() int {
	n := 1 + uvarintLen(uint64(len(op.Key))) + len(op.Key)
	if m := op.attrs(); m != 0 {
		n++
		if m&attrFlags != 0 {
			n += 4
		}
		if m&attrExpires != 0 {
			n += 8
		}
	}
	return n
}

// Kind says what an entry is for.
type Kind uint8

const (
	// KindData carries one atomic batch of operations.
	KindData Kind = 1
	// KindHeartbeat carries only the root's clock; replicas measure lag
	// against the time of the last entry they applied.
	KindHeartbeat Kind = 2
)

// Hash is an entry hash in the chain.
type Hash [sha256.Size]byte

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// Entry is one log record.
type Entry struct {
	Index uint64
	Time  int64 // the root's clock when the entry was created, Unix nanoseconds
	Kind  Kind
	Ops   []Op
	Hash  Hash // ChainHash(previous hash, body)
}

// AppendBody appends the canonical encoding of e (everything but Hash) to dst.
//
//	body := version(1) kind(1) index(8 BE) time(8 BE) nops(uvarint) op*
//	op   := type(1) keylen(uvarint) key [attrs(1) [flags(4 BE)] [expires(8 BE)]] [vallen(uvarint) value]
//
// A set has a value; a set with client flags other than 0 or an expiry
// has type 3 and the attributes its mask names (a set without them is
// always type 1, so the encoding is unique).
func (e *Entry) AppendBody(dst []byte) []byte {
	dst = append(dst, bodyVersion, byte(e.Kind))
	dst = binary.BigEndian.AppendUint64(dst, e.Index)
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.Time))
	dst = binary.AppendUvarint(dst, uint64(len(e.Ops)))
	for i := range e.Ops {
		op := &e.Ops[i]
		m := op.attrs()
		if m != 0 {
			dst = append(dst, opSetAttrs)
		} else {
			dst = append(dst, byte(op.Type))
		}
		dst = binary.AppendUvarint(dst, uint64(len(op.Key)))
		dst = append(dst, op.Key...)
		if m != 0 {
			dst = append(dst, m)
			if m&attrFlags != 0 {
				dst = binary.BigEndian.AppendUint32(dst, op.Flags)
			}
			if m&attrExpires != 0 {
				dst = binary.BigEndian.AppendUint64(dst, uint64(op.Expires))
			}
		}
		if op.Type == OpSet {
			dst = binary.AppendUvarint(dst, uint64(len(op.Value)))
			dst = append(dst, op.Value...)
		}
	}
	return dst
}

// ValueOffsets appends to dst, for each op, the offset of its value within
// the body AppendBody produces (-1 for ops without a value).
func (e *Entry) ValueOffsets(dst []int) []int {
	off := 2 + 16 + uvarintLen(uint64(len(e.Ops)))
	for i := range e.Ops {
		op := &e.Ops[i]
		off += op.opHeaderLen()
		if op.Type != OpSet {
			dst = append(dst, -1)
			continue
		}
		off += uvarintLen(uint64(len(op.Value)))
		dst = append(dst, off)
		off += len(op.Value)
	}
	return dst
}

// BodySize returns len(e.AppendBody(nil)) without encoding.
func (e *Entry) BodySize() int {
	n := 2 + 16 + uvarintLen(uint64(len(e.Ops)))
	for i := range e.Ops {
		op := &e.Ops[i]
		n += op.opHeaderLen()
		if op.Type == OpSet {
			n += uvarintLen(uint64(len(op.Value))) + len(op.Value)
		}
	}
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// ChainHash returns SHA-256(prev || body).
func ChainHash(prev Hash, body []byte) Hash {
	h := sha256.New()
	h.Write(prev[:])
	h.Write(body)
	var out Hash
	h.Sum(out[:0])
	return out
}

// Seal sets e.Hash from the previous hash and returns the encoded body.
func (e *Entry) Seal(prev Hash, buf []byte) []byte {
	body := e.AppendBody(buf[:0])
	e.Hash = ChainHash(prev, body)
	return body
}

// DecodeBody decodes a body produced by AppendBody. Keys and values alias b.
// Hash is left zero; the caller sets it from the stored or computed hash.
func DecodeBody(b []byte) (Entry, error) {
	var e Entry
	if len(b) < 18 {
		return e, fmt.Errorf("%w: body of %d bytes is shorter than its header", ErrMalformed, len(b))
	}
	if b[0] != bodyVersion {
		return e, fmt.Errorf("%w: unknown body version %d", ErrMalformed, b[0])
	}
	e.Kind = Kind(b[1])
	if e.Kind != KindData && e.Kind != KindHeartbeat {
		return e, fmt.Errorf("%w: unknown entry kind %d", ErrMalformed, b[1])
	}
	e.Index = binary.BigEndian.Uint64(b[2:])
	e.Time = int64(binary.BigEndian.Uint64(b[10:]))
	b = b[18:]
	nops, n := uvarint(b)
	if n <= 0 || nops > MaxOps {
		return e, fmt.Errorf("%w: bad op count", ErrMalformed)
	}
	b = b[n:]
	if e.Kind == KindHeartbeat && nops != 0 {
		return e, fmt.Errorf("%w: heartbeat with %d ops", ErrMalformed, nops)
	}
	// Every op takes at least 2 bytes; refuse counts the input cannot hold
	// before allocating for them.
	if nops > uint64(len(b))/2 {
		return e, fmt.Errorf("%w: %d ops in %d bytes", ErrMalformed, nops, len(b))
	}
	if nops > 0 {
		e.Ops = make([]Op, 0, nops)
	}
	for i := uint64(0); i < nops; i++ {
		if len(b) < 1 {
			return e, fmt.Errorf("%w: op %d truncated", ErrMalformed, i)
		}
		op := Op{Type: OpType(b[0])}
		withAttrs := b[0] == opSetAttrs
		if withAttrs {
			op.Type = OpSet
		}
		if op.Type != OpSet && op.Type != OpDelete {
			return e, fmt.Errorf("%w: op %d has unknown type %d", ErrMalformed, i, b[0])
		}
		b = b[1:]
		var err error
		if op.Key, b, err = readBytes(b, MaxKeyLen); err != nil {
			return e, fmt.Errorf("%w: op %d key: %v", ErrMalformed, i, err)
		}
		if len(op.Key) == 0 {
			return e, fmt.Errorf("%w: op %d has an empty key", ErrMalformed, i)
		}
		if withAttrs {
			if b, err = decodeAttrs(b, &op); err != nil {
				return e, fmt.Errorf("%w: op %d: %v", ErrMalformed, i, err)
			}
		}
		if op.Type == OpSet {
			if op.Value, b, err = readBytes(b, MaxValueLen); err != nil {
				return e, fmt.Errorf("%w: op %d value: %v", ErrMalformed, i, err)
			}
		}
		e.Ops = append(e.Ops, op)
	}
	if len(b) != 0 {
		return e, fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(b))
	}
	return e, nil
}

// decodeAttrs reads the attributes of an opSetAttrs op into op. Only
// canonical encodings are accepted: a mask naming something, and no
// attribute equal to its default.
func decodeAttrs(b []byte, op *Op) ([]byte, error) {
	if len(b) < 1 {
		return nil, errors.New("attributes truncated")
	}
	m := b[0]
	b = b[1:]
	if m == 0 || m&^attrAll != 0 {
		return nil, fmt.Errorf("attribute mask %#x", m)
	}
	if m&attrFlags != 0 {
		if len(b) < 4 {
			return nil, errors.New("flags truncated")
		}
		if op.Flags = binary.BigEndian.Uint32(b); op.Flags == 0 {
			return nil, errors.New("flags attribute of 0")
		}
		b = b[4:]
	}
	if m&attrExpires != 0 {
		if len(b) < 8 {
			return nil, errors.New("expiry truncated")
		}
		if op.Expires = int64(binary.BigEndian.Uint64(b)); op.Expires == 0 {
			return nil, errors.New("expiry attribute of 0")
		}
		b = b[8:]
	}
	return b, nil
}

// uvarint is binary.Uvarint refusing non-minimal encodings (0x80 0x00 for
// 0, say), so a body that decodes has exactly one encoding: AppendBody of
// the decoded entry gives back the same bytes, and the same hash.
func uvarint(b []byte) (uint64, int) {
	v, n := binary.Uvarint(b)
	if n > 0 && n != uvarintLen(v) {
		return 0, 0
	}
	return v, n
}

func readBytes(b []byte, max int) (val, rest []byte, err error) {
	l, n := uvarint(b)
	if n <= 0 {
		return nil, nil, errors.New("bad length")
	}
	if l > uint64(max) {
		return nil, nil, fmt.Errorf("length %d over limit %d", l, max)
	}
	b = b[n:]
	if uint64(len(b)) < l {
		return nil, nil, fmt.Errorf("length %d but %d bytes left", l, len(b))
	}
	return b[:l:l], b[l:], nil
}
