// Package repl replicates a database's log from one node to another: the
// wire protocol, the server that streams a store's log, and the Replica that
// keeps one store following an ordered list of sources. Every node can
// serve, so replicas form a fan-out tree of any depth (root → intermediate
// → leaf).
//
// # Invariants
//
//   - Never apply an unverified entry. The receiver checks that every entry
//     has index = previous + 1 and that its hash is SHA-256(previous hash ||
//     body), starting from the store's applied index and hash. A batch with
//     a gap or a broken chain is dropped whole: the connection is closed,
//     the error counted, and the next source tried. (store.Apply checks the
//     chain again before committing.)
//   - One durable commit per received batch: each Entries message is
//     applied with one store.Apply.
//   - Every log is a prefix of the root's. A server only sends entries it
//     has durably applied, in order, so a replica's log is always a prefix
//     of its source's, and by induction of the root's.
//   - A replica whose source fails keeps serving its own downstream clients:
//     servers and replicas share nothing but the store.
//
// # Wire protocol (version 1)
//
// One TCP connection per stream (TLS, when added, wraps the connection and
// changes nothing below). The client sends exactly one message, Hello; the
// server answers Welcome or Refuse, then sends Entries, Progress, and
// finally Done (if a StopIndex was asked) or Refuse (if retention overtook
// the client). A client sending anything after Hello is disconnected.
//
// Framing. Every message is one frame:
//
//	frame := type(1) length(4, big-endian) payload crc(4, big-endian)
//	crc   := CRC-32C (Castagnoli) of type || payload
//
// length is the payload length, at most MaxPayload (128 MiB). A frame whose
// checksum does not match is a transport corruption: the receiver drops the
// connection. Integers are big-endian fixed width unless marked uvarint
// (unsigned LEB128 as encoding/binary writes it). Strings are uvarint length
// + bytes.
//
// Messages (type byte, payload):
//
//	1 Hello    magic "QSR1" version(2) flags(1) dbid(16) pid(16) last(8) stop(8) name(string ≤ 255)
//	           flags bit 0: NewestOnly; other bits must be zero.
//	           dbid: the database id the client expects; all zero = accept any
//	           (learn it from Welcome). pid: the client's process id, 16 random
//	           bytes per process. last: the client's applied index; streaming
//	           starts at last+1. stop: 0, or the last index wanted.
//	           NewestOnly: start after the server's applied index, ignoring last.
//	2 Welcome  version(2) pid(16) dbid(16) applied(8) time(8) logfirst(8) next(8)
//	           The server's process id and database id, its applied index and
//	           that entry's root time (Unix ns, 0 if none), the first retained
//	           log index, and the index of the first entry it will send.
//	3 Refuse   code(1) reason(string ≤ 4096). The server closes afterwards.
//	4 Entries  count(uvarint ≥ 1) record*;  record := bodylen(uvarint) body hash(32)
//	           body is the wal entry body (wal.Entry.AppendBody):
//	           version(1)=1 kind(1) index(8) time(8) nops(uvarint) op*,
//	           op := type(1) keylen(uvarint) key [vallen(uvarint) value] (value for set only).
//	           Entries are consecutive, continuing the previous message.
//	5 Progress applied(8) time(8): sent when the stream has been idle for the
//	           server's ProgressInterval (default 1s), so the client knows the
//	           server is alive even without root heartbeats.
//	6 Done     last(8): the StopIndex was reached; the server closes.
//
// Unknown message types, trailing bytes and malformed fields are decode
// errors; the receiver drops the connection.
//
// Versioning. Hello carries the client's version; a server accepts
// MinProtocolVersion..ProtocolVersion and echoes the version it will speak
// in Welcome, or refuses with code "version". A new version may add message
// types and Hello flags; version 1 peers refuse them.
//
// Refusal codes (stable; the reason text is for humans):
//
//	1 version           protocol version not supported
//	2 unknown_database  the server has no database of that name
//	3 wrong_dbid        the database has another id than the client expects
//	4 self_replication  the client's process id is the server's own
//	5 log_truncated     last+1 is older than the retained log: the client must bootstrap
//	6 ahead             last is beyond the server's applied index
//	7 bad_hello         the first message was not a Hello
//	8 shutting_down     the server is stopping
//
// # Liveness
//
// The root writes a heartbeat entry every second (internal/server writes it when nothing else was written), so a
// replica's lag is now − the root time of its last applied entry. A replica
// that receives neither Entries nor Progress for its IdleTimeout (default
// 30 s) disconnects and tries the next source, after a jittered, doubling,
// bounded backoff.
//
// Not yet here: bootstrap from a snapshot (after log_truncated), TLS,
// source discovery, and forwarding verified entries downstream before the
// local commit finishes.
package repl
