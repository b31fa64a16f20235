package repl

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/quicksilver-kv/qs/internal/wal"
)

const helloFixed = 4 + 2 + 1 + 16 + 16 + 8 + 8

func (m *Hello) AppendPayload(dst []byte) []byte {
	dst = append(dst, Magic...)
	dst = binary.BigEndian.AppendUint16(dst, m.Version)
	var flags byte
	if m.NewestOnly {
		flags |= 1
	}
	if m.Bootstrap {
		flags |= 2
	}
	if m.Fetch {
		flags |= 4
	}
	if m.Prefetch {
		flags |= 8
	}
	if m.Shard {
		flags |= 16
	}
	dst = append(dst, flags)
	dst = append(dst, m.DBID[:]...)
	dst = append(dst, m.ProcessID[:]...)
	dst = binary.BigEndian.AppendUint64(dst, m.LastIndex)
	dst = binary.BigEndian.AppendUint64(dst, m.StopIndex)
	dst = binary.AppendUvarint(dst, uint64(len(m.Database)))
	dst = append(dst, m.Database...)
	if m.Bootstrap {
		dst = append(dst, m.Resume.Snapshot[:]...)
		dst = binary.BigEndian.AppendUint32(dst, m.Resume.File)
		dst = binary.BigEndian.AppendUint64(dst, m.Resume.Offset)
	}
	return dst
}

const resumeLen = 16 + 4 + 8

func decodeHello(p []byte) (*Hello, error) {
	if len(p) < helloFixed+1 {
		return nil, fmt.Errorf("%w: hello of %d bytes", ErrMalformed, len(p))
	}
	if string(p[:4]) != Magic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrMalformed, p[:4])
	}
	m := &Hello{Version: binary.BigEndian.Uint16(p[4:])}
	flags := p[6]
	if flags&^31 != 0 || flags&6 == 6 || (flags&8 != 0 && flags&6 != 0) || (flags&16 != 0 && flags&14 != 0) {
		return nil, fmt.Errorf("%w: unknown hello flags %#x", ErrMalformed, flags)
	}
	m.NewestOnly = flags&1 != 0
	m.Bootstrap = flags&2 != 0
	m.Fetch = flags&4 != 0
	m.Prefetch = flags&8 != 0
	m.Shard = flags&16 != 0
	copy(m.DBID[:], p[7:23])
	copy(m.ProcessID[:], p[23:39])
	m.LastIndex = binary.BigEndian.Uint64(p[39:])
	m.StopIndex = binary.BigEndian.Uint64(p[47:])
	name, rest, err := readString(p[helloFixed:], MaxDatabaseName)
	if err != nil {
		return nil, fmt.Errorf("%w: hello database name: %v", ErrMalformed, err)
	}
	if m.Bootstrap {
		if len(rest) < resumeLen {
			return nil, fmt.Errorf("%w: bootstrap hello without its resume point", ErrMalformed)
		}
		copy(m.Resume.Snapshot[:], rest)
		m.Resume.File = binary.BigEndian.Uint32(rest[16:])
		m.Resume.Offset = binary.BigEndian.Uint64(rest[20:])
		rest = rest[resumeLen:]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after hello", ErrMalformed, len(rest))
	}
	m.Database = name
	return m, nil
}

const welcomeLen = 2 + 16 + 16 + 8*4

func (m *Welcome) AppendPayload(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, m.Version)
	dst = append(dst, m.ProcessID[:]...)
	dst = append(dst, m.DBID[:]...)
	dst = binary.BigEndian.AppendUint64(dst, m.AppliedIndex)
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.AppliedTime))
	dst = binary.BigEndian.AppendUint64(dst, m.LogFirst)
	return binary.BigEndian.AppendUint64(dst, m.NextIndex)
}

func decodeWelcome(p []byte) (*Welcome, error) {
	if len(p) != welcomeLen {
		return nil, fmt.Errorf("%w: welcome of %d bytes, want %d", ErrMalformed, len(p), welcomeLen)
	}
	m := &Welcome{Version: binary.BigEndian.Uint16(p)}
	copy(m.ProcessID[:], p[2:18])
	copy(m.DBID[:], p[18:34])
	m.AppliedIndex = binary.BigEndian.Uint64(p[34:])
	m.AppliedTime = int64(binary.BigEndian.Uint64(p[42:]))
	m.LogFirst = binary.BigEndian.Uint64(p[50:])
	m.NextIndex = binary.BigEndian.Uint64(p[58:])
	return m, nil
}

// maxReason bounds a Refuse reason.
const maxReason = 4096

func (m *Refuse) AppendPayload(dst []byte) []byte {
	dst = append(dst, byte(m.Code))
	r := m.Reason
	if len(r) > maxReason {
		r = r[:maxReason]
	}
	dst = binary.AppendUvarint(dst, uint64(len(r)))
	return append(dst, r...)
}

func decodeRefuse(p []byte) (*Refuse, error) {
	if len(p) < 2 {
		return nil, fmt.Errorf("%w: refuse of %d bytes", ErrMalformed, len(p))
	}
	reason, rest, err := readString(p[1:], maxReason)
	if err != nil {
		return nil, fmt.Errorf("%w: refuse reason: %v", ErrMalformed, err)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after refuse", ErrMalformed, len(rest))
	}
	return &Refuse{Code: RefuseCode(p[0]), Reason: reason}, nil
}

func (m *Entries) AppendPayload(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(m.Entries)))
	for i := range m.Entries {
		e := &m.Entries[i]
		dst = binary.AppendUvarint(dst, uint64(e.BodySize()))
		dst = e.AppendBody(dst)
		dst = append(dst, e.Hash[:]...)
	}
	return dst
}

// minRecord is the smallest encoded record: a length byte, an 18-byte body
// header, an op count byte and the hash.
const minRecord = 1 + 18 + 1 + len(wal.Hash{})

// decodeEntries decodes an Entries payload. Keys and values alias p.
func decodeEntries(p []byte) (*Entries, error) {
	count, n := binary.Uvarint(p)
	if n <= 0 || count == 0 {
		return nil, fmt.Errorf("%w: bad entry count", ErrMalformed)
	}
	p = p[n:]
	if count > uint64(len(p)/minRecord) {
		return nil, fmt.Errorf("%w: %d entries in %d bytes", ErrMalformed, count, len(p))
	}
	m := &Entries{Entries: make([]wal.Entry, 0, count)}
	for i := uint64(0); i < count; i++ {
		l, n := binary.Uvarint(p)
		if n <= 0 || l > uint64(len(p)-n) {
			return nil, fmt.Errorf("%w: entry record %d: bad length", ErrMalformed, i)
		}
		body := p[n : n+int(l)]
		p = p[n+int(l):]
		if len(p) < len(wal.Hash{}) {
			return nil, fmt.Errorf("%w: entry record %d: hash truncated", ErrMalformed, i)
		}
		e, err := wal.DecodeBody(body)
		if err != nil {
			return nil, fmt.Errorf("%w: entry record %d: %v", ErrMalformed, i, err)
		}
		copy(e.Hash[:], p)
		p = p[len(wal.Hash{}):]
		m.Entries = append(m.Entries, e)
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last entry", ErrMalformed, len(p))
	}
	return m, nil
}

func (m *Progress) AppendPayload(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, m.AppliedIndex)
	return binary.BigEndian.AppendUint64(dst, uint64(m.AppliedTime))
}

func decodeProgress(p []byte) (*Progress, error) {
	if len(p) != 16 {
		return nil, fmt.Errorf("%w: progress of %d bytes", ErrMalformed, len(p))
	}
	return &Progress{AppliedIndex: binary.BigEndian.Uint64(p), AppliedTime: int64(binary.BigEndian.Uint64(p[8:]))}, nil
}

// Limits of a snapshot manifest.
const (
	MaxSnapshotFiles = 1 << 20
	maxFileName      = 255
)

func (m *Snapshot) AppendPayload(dst []byte) []byte {
	dst = append(dst, m.ID[:]...)
	dst = binary.BigEndian.AppendUint64(dst, m.Index)
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.Time))
	dst = append(dst, m.Hash[:]...)
	dst = binary.AppendUvarint(dst, uint64(len(m.Files)))
	for _, f := range m.Files {
		dst = binary.AppendUvarint(dst, uint64(len(f.Name)))
		dst = append(dst, f.Name...)
		dst = binary.BigEndian.AppendUint64(dst, f.Size)
	}
	return dst
}

func decodeSnapshot(p []byte) (*Snapshot, error) {
	const fixed = 16 + 8 + 8 + 32
	if len(p) < fixed+1 {
		return nil, fmt.Errorf("%w: snapshot of %d bytes", ErrMalformed, len(p))
	}
	m := &Snapshot{}
	copy(m.ID[:], p)
	m.Index = binary.BigEndian.Uint64(p[16:])
	m.Time = int64(binary.BigEndian.Uint64(p[24:]))
	copy(m.Hash[:], p[32:64])
	count, n := binary.Uvarint(p[fixed:])
	if n <= 0 || count > MaxSnapshotFiles || count > uint64(len(p)) {
		return nil, fmt.Errorf("%w: bad snapshot file count", ErrMalformed)
	}
	p = p[fixed+n:]
	m.Files = make([]SnapshotFile, 0, count)
	for i := uint64(0); i < count; i++ {
		name, rest, err := readString(p, maxFileName)
		if err != nil || len(rest) < 8 {
			return nil, fmt.Errorf("%w: snapshot file %d: bad entry", ErrMalformed, i)
		}
		m.Files = append(m.Files, SnapshotFile{Name: name, Size: binary.BigEndian.Uint64(rest)})
		p = rest[8:]
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the snapshot manifest", ErrMalformed, len(p))
	}
	return m, nil
}

func (m *Chunk) AppendPayload(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(m.File))
	dst = binary.AppendUvarint(dst, m.Offset)
	return append(dst, m.Data...)
}

// decodeChunk decodes a Chunk; Data aliases p.
func decodeChunk(p []byte) (*Chunk, error) {
	f, n := binary.Uvarint(p)
	if n <= 0 || f > MaxSnapshotFiles {
		return nil, fmt.Errorf("%w: chunk file number", ErrMalformed)
	}
	off, n2 := binary.Uvarint(p[n:])
	if n2 <= 0 {
		return nil, fmt.Errorf("%w: chunk offset", ErrMalformed)
	}
	return &Chunk{File: uint32(f), Offset: off, Data: p[n+n2:]}, nil
}

func (m *FileEnd) AppendPayload(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(m.File))
	dst = binary.BigEndian.AppendUint64(dst, m.Size)
	return binary.BigEndian.AppendUint32(dst, m.CRC)
}

func decodeFileEnd(p []byte) (*FileEnd, error) {
	f, n := binary.Uvarint(p)
	if n <= 0 || f > MaxSnapshotFiles || len(p)-n != 12 {
		return nil, fmt.Errorf("%w: file end of %d bytes", ErrMalformed, len(p))
	}
	return &FileEnd{File: uint32(f), Size: binary.BigEndian.Uint64(p[n:]), CRC: binary.BigEndian.Uint32(p[n+8:])}, nil
}

func (m *Done) AppendPayload(dst []byte) []byte {
	return binary.BigEndian.AppendUint64(dst, m.LastIndex)
}

func decodeDone(p []byte) (*Done, error) {
	if len(p) != 8 {
		return nil, fmt.Errorf("%w: done of %d bytes", ErrMalformed, len(p))
	}
	return &Done{LastIndex: binary.BigEndian.Uint64(p)}, nil
}

func readString(b []byte, max int) (string, []byte, error) {
	l, n := binary.Uvarint(b)
	if n <= 0 {
		return "", nil, errors.New("bad length")
	}
	if l > uint64(max) {
		return "", nil, fmt.Errorf("length %d over limit %d", l, max)
	}
	b = b[n:]
	if uint64(len(b)) < l {
		return "", nil, fmt.Errorf("length %d but %d bytes left", l, len(b))
	}
	return string(b[:l]), b[l:], nil
}

// DecodePayload decodes the payload of a message of type t.
func DecodePayload(t MsgType, p []byte) (Message, error) {
	switch t {
	case MsgHello:
		return decodeHello(p)
	case MsgWelcome:
		return decodeWelcome(p)
	case MsgRefuse:
		return decodeRefuse(p)
	case MsgEntries:
		return decodeEntries(p)
	case MsgProgress:
		return decodeProgress(p)
	case MsgDone:
		return decodeDone(p)
	case MsgSnapshot:
		return decodeSnapshot(p)
	case MsgChunk:
		return decodeChunk(p)
	case MsgFileEnd:
		return decodeFileEnd(p)
	case MsgFetch:
		return decodeFetch(p)
	case MsgValues:
		return decodeValues(p)
	case MsgPrefetch:
		return decodePrefetch(p)
	case MsgReport:
		return decodeReport(p)
	case MsgHead:
		return decodeHead(p)
	case MsgNode:
		return decodeNode(p)
	case MsgSeal:
		return decodeSeal(p)
	case MsgRoot:
		return decodeRoot(p)
	case MsgPath:
		return decodePath(p)
	}
	return nil, fmt.Errorf("%w: unknown message type %d", ErrMalformed, uint8(t))
}
