package repl

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Wire format constants. docs/protocol.md has the full description.
const (
	// Magic opens every Hello.
	Magic = "QSR1"
	// ProtocolVersion is the version this package speaks. A server accepts
	// Hello versions MinProtocolVersion..ProtocolVersion.
	ProtocolVersion    uint16 = 7
	MinProtocolVersion uint16 = 1
	// streamVersion is the version bootstrap clients send, and stream
	// clients to a source that refused ReportVersion: they need nothing
	// version 2 added, so servers of version 1 keep serving them.
	streamVersion uint16 = 1
	// replicaVersion is the version of a replica's stream Hello: the
	// newest that adds anything to log streams (PathVersion).
	replicaVersion = PathVersion
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
	case MsgPath:
		return "path"
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
