package repl

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Wire format constants. docs/protocol.md has the full description.
const (
	// Magic opens every Hello.
	Magic = "QSR1"
	// ProtocolVersion is the version this package speaks. A server accepts
	// Hello versions MinProtocolVersion..ProtocolVersion.
	ProtocolVersion    uint16 = 6
	MinProtocolVersion uint16 = 1
	// streamVersion is the version bootstrap clients send, and stream
	// clients to a source that refused ReportVersion: they need nothing
	// version 2 added, so servers of version 1 keep serving them.
	streamVersion uint16 = 1
	// replicaVersion is the version of a replica's stream Hello: the
	// newest that adds anything to log streams (RootVersion). Later
	// versions change only fetch connections, so a source of that
	// version is not asked to step down.
	replicaVersion = RootVersion
	// FetchVersion is the first version with fetch connections.
	FetchVersion uint16 = 2
	// MaxPayload is the hard limit on one message payload. It must hold the
	// largest single entry the store accepts (64 MiB of keys and values by
	// default) plus its encoding.
	MaxPayload = 128 << 20
	// MaxDatabaseName is the longest database name a Hello may carry.
	MaxDatabaseName = 255
	// MaxHelloPayload bounds a connection's first frame, read before the
	// server knows what the client wants: a Hello is a few hundred bytes.
	MaxHelloPayload = 4 << 10

	frameHeader  = 5 // type(1) length(4 BE)
	frameTrailer = 4 // CRC-32C(type || payload)
)

// Errors of the wire format.
var (
	// ErrChecksum: a frame's CRC-32C does not match (corruption in transit).
	ErrChecksum = errors.New("qs: replication frame checksum mismatch")
	// ErrMalformed: a frame or message cannot be decoded.
	ErrMalformed = errors.New("qs: malformed replication message")
	// ErrRefused is wrapped by every *RefusedError.
	ErrRefused = errors.New("qs: replication refused")
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// MsgType is the first byte of every frame.
type MsgType uint8

const (
	MsgHello    MsgType = 1  // client → server, first and only client message
	MsgWelcome  MsgType = 2  // server → client, accepts the Hello
	MsgRefuse   MsgType = 3  // server → client, then the server closes
	MsgEntries  MsgType = 4  // server → client, consecutive log entries
	MsgProgress MsgType = 5  // server → client, keepalive with the server's applied index
	MsgDone     MsgType = 6  // server → client, StopIndex reached, then the server closes
	MsgSnapshot MsgType = 7  // server → client, bootstrap: the snapshot's manifest
	MsgChunk    MsgType = 8  // server → client, bootstrap: bytes of one snapshot file
	MsgFileEnd  MsgType = 9  // server → client, bootstrap: a file is complete, with its CRC
	MsgFetch    MsgType = 10 // client → server, fetch connections: values as of an index
	MsgValues   MsgType = 11 // server → client, fetch connections: the answer to one Fetch
)

func (t MsgType) String() string {
	switch t {
	case MsgHello:
		return "hello"
	case MsgWelcome:
		return "welcome"
	case MsgRefuse:
		return "refuse"
	case MsgEntries:
		return "entries"
	case MsgProgress:
		return "progress"
	case MsgDone:
		return "done"
	case MsgSnapshot:
		return "snapshot"
	case MsgChunk:
		return "chunk"
	case MsgFileEnd:
		return "file_end"
	case MsgFetch:
		return "fetch"
	case MsgValues:
		return "values"
	case MsgPrefetch:
		return "prefetch"
	case MsgReport:
		return "report"
	case MsgHead:
		return "head"
	case MsgNode:
		return "node"
	case MsgSeal:
		return "seal"
	case MsgRoot:
		return "root"
	}
	return fmt.Sprintf("msg(%d)", uint8(t))
}

// ProcessID identifies one running process; a server refuses a client
// carrying its own id (a node replicating from itself).
type ProcessID [16]byte

func (id ProcessID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is unset.
func (id ProcessID) IsZero() bool { return id == ProcessID{} }

// NewProcessID returns a random id.
func NewProcessID() ProcessID {
	var id ProcessID
	if _, err := rand.Read(id[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return id
}

// DefaultProcessID is this process's id, the default of ServerConfig and
// ReplicaConfig, so a process's servers and replicas recognise each other.
var DefaultProcessID = NewProcessID()

// RefuseCode says why a server refused a client. Codes are stable.
type RefuseCode uint8

const (
	RefuseVersion         RefuseCode = 1  // protocol version not supported
	RefuseUnknownDatabase RefuseCode = 2  // the server has no such database
	RefuseWrongDBID       RefuseCode = 3  // the database has another id
	RefuseSelf            RefuseCode = 4  // the client has the server's process id
	RefuseLogTruncated    RefuseCode = 5  // LastIndex+1 is older than the retained log: bootstrap
	RefuseAhead           RefuseCode = 6  // LastIndex is beyond the server's applied index
	RefuseBadHello        RefuseCode = 7  // the Hello could not be decoded
	RefuseShuttingDown    RefuseCode = 8  // the server is stopping
	RefuseUnavailable     RefuseCode = 9  // the server cannot make a snapshot now
	RefuseBadRequest      RefuseCode = 10 // a fetch connection sent a malformed or unexpected message
	RefuseProxy           RefuseCode = 11 // the server is a proxy: it serves neither snapshots nor values
	RefuseFull            RefuseCode = 16 // the server streams to as many replicas as it takes (max_children)
	RefuseDetached        RefuseCode = 17 // the server is a replica between sources: it takes no new replica now
	RefuseCycle           RefuseCode = 18 // the client is an ancestor of the server in the tree
)

var refuseNames = map[RefuseCode]string{
	RefuseVersion:         "version",
	RefuseUnknownDatabase: "unknown_database",
	RefuseWrongDBID:       "wrong_dbid",
	RefuseSelf:            "self_replication",
	RefuseLogTruncated:    "log_truncated",
	RefuseAhead:           "ahead",
	RefuseBadHello:        "bad_hello",
	RefuseShuttingDown:    "shutting_down",
	RefuseUnavailable:     "unavailable",
	RefuseBadRequest:      "bad_request",
	RefuseProxy:           "proxy",
	RefuseFull:            "full",
	RefuseDetached:        "detached",
	RefuseCycle:           "cycle",
}

func (c RefuseCode) String() string {
	if s, ok := refuseNames[c]; ok {
		return s
	}
	return fmt.Sprintf("code_%d", uint8(c))
}

// RefusedError is a Refuse received from a server.
type RefusedError struct {
	Code   RefuseCode
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("qs: replication refused: %s: %s", e.Code, e.Reason)
}

// Is makes errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Message is one protocol message.
type Message interface {
	Type() MsgType
	// AppendPayload appends the message's payload encoding to dst.
	AppendPayload(dst []byte) []byte
}

// Hello opens a replication stream, or a bootstrap.
//
//	payload := magic "QSR1" version(2 BE) flags(1) dbid(16) pid(16) last(8 BE) stop(8 BE) namelen(uvarint) name [resume]
//	flags   := bit 0 NewestOnly, bit 1 Bootstrap, bit 2 Fetch, bit 3 Prefetch, bit 4 Shard
//	resume  := snapshot(16) file(4 BE) offset(8 BE)   (present iff Bootstrap)
type Hello struct {
	Version   uint16
	Database  string
	DBID      store.DBID // zero: accept any and learn it from Welcome
	ProcessID ProcessID
	LastIndex uint64 // the client's applied index; streaming starts at LastIndex+1
	StopIndex uint64 // 0: stream forever; else the server sends Done after this index
	// NewestOnly asks for no history: streaming starts after the server's
	// applied index, whatever LastIndex says (for caches that only want
	// changes from now on; a replica never sets it).
	NewestOnly bool
	// Bootstrap asks for a snapshot instead of the log (see Resume).
	Bootstrap bool
	// Fetch opens a fetch connection (version 2): request/response
	// messages for values as of an index, instead of the log.
	Fetch bool
	// Prefetch subscribes to a relay's prefetch stream (version 2): the
	// values the relay resolves for the proxies of its data centre,
	// instead of the log.
	Prefetch bool
	// Shard opens an L2 connection (version 2) to a proxy of the same
	// data centre: requests for exact versions of the keys of the shard
	// it owns (protocol_shard.go), instead of the log.
	Shard bool
	// Resume is where an interrupted download of a snapshot stopped; the
	// zero value asks for a new snapshot.
	Resume ResumePoint
}

// ResumePoint is a position in a snapshot's files.
type ResumePoint struct {
	Snapshot SnapshotID
	File     uint32 // index into the manifest's files
	Offset   uint64 // bytes of that file already held
}

// SnapshotID names one snapshot on one server.
type SnapshotID [16]byte

func (id SnapshotID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is unset.
func (id SnapshotID) IsZero() bool { return id == SnapshotID{} }

// Welcome accepts a Hello.
//
//	payload := version(2 BE) pid(16) dbid(16) applied(8 BE) time(8 BE) logfirst(8 BE) next(8 BE)
type Welcome struct {
	Version      uint16 // the version the stream will use
	ProcessID    ProcessID
	DBID         store.DBID
	AppliedIndex uint64 // the server's applied index at the handshake
	AppliedTime  int64  // root clock of that entry, Unix ns
	LogFirst     uint64 // first retained log index
	NextIndex    uint64 // index of the first entry the server will send
}

// Refuse rejects a Hello (or ends a stream); the server closes afterwards.
//
//	payload := code(1) reasonlen(uvarint) reason
type Refuse struct {
	Code   RefuseCode
	Reason string
}

// Entries carries consecutive log entries, exactly as the wal encodes them.
//
//	payload := count(uvarint) record*
//	record  := bodylen(uvarint) body hash(32)
type Entries struct {
	Entries []wal.Entry
}

// Progress tells an idle client the server is alive and where it is.
//
//	payload := applied(8 BE) time(8 BE)
type Progress struct {
	AppliedIndex uint64
	AppliedTime  int64
}

// Snapshot is the manifest of a bootstrap: the snapshot's id and head,
// and its files, sent in this order. The client continues through the log
// from Index+1 once every file arrived.
//
//	payload := id(16) index(8 BE) time(8 BE) hash(32) count(uvarint) file*
//	file    := name(string ≤ 255) size(8 BE)
type Snapshot struct {
	ID    SnapshotID
	Index uint64
	Time  int64
	Hash  wal.Hash
	Files []SnapshotFile
}

// SnapshotFile is one file of a snapshot.
type SnapshotFile struct {
	Name string
	Size uint64
}

// Chunk carries bytes of one snapshot file, in order.
//
//	payload := file(uvarint) offset(uvarint) data
type Chunk struct {
	File   uint32
	Offset uint64
	Data   []byte
}

// FileEnd says a snapshot file is complete: the receiver checks the size
// and the CRC-32C of the whole file before keeping it.
//
//	payload := file(uvarint) size(8 BE) crc32c(4 BE)
type FileEnd struct {
	File uint32
	Size uint64
	CRC  uint32
}

// Done ends a stream that reached its StopIndex.
//
//	payload := last(8 BE)
type Done struct {
	LastIndex uint64
}

func (*Hello) Type() MsgType    { return MsgHello }
func (*Welcome) Type() MsgType  { return MsgWelcome }
func (*Refuse) Type() MsgType   { return MsgRefuse }
func (*Entries) Type() MsgType  { return MsgEntries }
func (*Progress) Type() MsgType { return MsgProgress }
func (*Done) Type() MsgType     { return MsgDone }
func (*Snapshot) Type() MsgType { return MsgSnapshot }
func (*Chunk) Type() MsgType    { return MsgChunk }
func (*FileEnd) Type() MsgType  { return MsgFileEnd }

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
	}
	return nil, fmt.Errorf("%w: unknown message type %d", ErrMalformed, uint8(t))
}

// AppendFrame appends the frame of m to dst:
//
//	frame := type(1) length(4 BE) payload crc32c(type || payload)(4 BE)
func AppendFrame(dst []byte, m Message) ([]byte, error) {
	start := len(dst)
	dst = append(dst, byte(m.Type()), 0, 0, 0, 0)
	dst = m.AppendPayload(dst)
	n := len(dst) - start - frameHeader
	if n > MaxPayload {
		return dst[:start], fmt.Errorf("%w: %s payload of %d bytes over the %d limit", ErrMalformed, m.Type(), n, MaxPayload)
	}
	binary.BigEndian.PutUint32(dst[start+1:], uint32(n))
	crc := crc32.Update(0, crcTable, dst[start:start+1])
	crc = crc32.Update(crc, crcTable, dst[start+frameHeader:])
	return binary.BigEndian.AppendUint32(dst, crc), nil
}

// WriteMessage writes m as one frame with one Write call.
func WriteMessage(w io.Writer, m Message) error {
	buf, err := AppendFrame(nil, m)
	if err != nil {
		return err
	}
	_, err = w.Write(buf)
	return err
}

// ReadFrame reads one frame and checks its length limit and checksum. It
// returns io.EOF only if r ended cleanly before the frame; a frame cut
// short gives io.ErrUnexpectedEOF. The payload is freshly allocated, grown
// as bytes arrive, so a corrupted length costs no memory up front.
func ReadFrame(r io.Reader) (MsgType, []byte, error) {
	var fr frameReader
	t, p, err := fr.next(r)
	return t, p[:len(p):len(p)], err
}

// frameReader reads frames into one reused buffer: a payload is valid
// until the next call. The buffer grows only as bytes actually arrive.
type frameReader struct {
	buf []byte
	// limit is the largest payload accepted; 0: MaxPayload.
	limit uint32
}

func (fr *frameReader) next(r io.Reader) (MsgType, []byte, error) {
	var hdr [frameHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	t := MsgType(hdr[0])
	n := binary.BigEndian.Uint32(hdr[1:])
	limit := uint32(MaxPayload)
	if fr.limit > 0 {
		limit = fr.limit
	}
	if n > limit {
		return 0, nil, fmt.Errorf("%w: frame of %d bytes over the %d limit", ErrMalformed, n, limit)
	}
	want := int(n) + frameTrailer
	b := fr.buf[:0]
	for len(b) < want {
		if len(b) == cap(b) {
			b = append(b, make([]byte, min(max(cap(b), 64<<10), want-len(b)))...)[:len(b)]
		}
		k, err := io.ReadFull(r, b[len(b):min(cap(b), want)])
		b = b[:len(b)+k]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, nil, err
		}
	}
	fr.buf = b
	payload, sum := b[:n], binary.BigEndian.Uint32(b[n:])
	crc := crc32.Update(0, crcTable, hdr[:1])
	crc = crc32.Update(crc, crcTable, payload)
	if crc != sum {
		return 0, nil, fmt.Errorf("%w: %s frame of %d bytes", ErrChecksum, t, n)
	}
	return t, payload, nil
}

// message reads and decodes one message; it may alias the buffer.
func (fr *frameReader) message(r io.Reader) (Message, error) {
	t, p, err := fr.next(r)
	if err != nil {
		return nil, err
	}
	return DecodePayload(t, p)
}

// ReadHello reads and decodes a connection's first message, refusing a
// frame over MaxHelloPayload before reading its payload.
func ReadHello(r io.Reader) (Message, error) {
	fr := frameReader{limit: MaxHelloPayload}
	return fr.message(r)
}

// ReadMessage reads and decodes one message.
func ReadMessage(r io.Reader) (Message, error) {
	t, p, err := ReadFrame(r)
	if err != nil {
		return nil, err
	}
	return DecodePayload(t, p)
}
