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
// # Wire protocol (versions 1 to 3)
//
// One TCP connection per stream (TLS, when configured, wraps the connection and
// changes nothing below). The client sends exactly one message, Hello; the
// server answers Welcome or Refuse, then sends Entries, Progress, and
// finally Done (if a StopIndex was asked) or Refuse (if retention overtook
// the client). A client sending anything after Hello is disconnected, but
// for the Report messages of a version-3 stream (report.go).
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
//	           flags bit 0: NewestOnly, bit 1: Bootstrap, bit 2: Fetch (version 2);
//	           other bits must be zero.
//	           With Bootstrap the name is followed by the resume point:
//	           snapshot(16) file(4) offset(8), all zero for a new download.
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
//	6 Done     last(8): the StopIndex was reached (or, for a bootstrap, the snapshot sent); the server closes.
//	7 Snapshot  id(16) index(8) time(8) hash(32) count(uvarint) file*;  file := name(string ≤ 255) size(8)
//	           Bootstrap only: the snapshot's id, the index, root time and hash
//	           of its last entry, and its files in the order they will be sent.
//	8 Chunk     file(uvarint) offset(uvarint) data: the next bytes of file
//	           number file (an index into the manifest), at offset.
//	9 FileEnd   file(uvarint) size(8) crc(4): file is complete; crc is the
//	           CRC-32C of the whole file. The receiver checks size and crc
//	           before keeping the file.
//	12 Report  body (≤ 1 MiB), client → server on a version-3 stream: the
//	           replica's subtree and read samples (internal/tree), every
//	           second. Over-limit, too-frequent and unusable reports are
//	           dropped and counted; the stream goes on.
//
// Unknown message types, trailing bytes and malformed fields are decode
// errors; the receiver drops the connection.
//
// Versioning. Hello carries the client's version; a server accepts
// MinProtocolVersion..ProtocolVersion and echoes the version it will speak
// in Welcome, or refuses with code "version". A new version may add message
// types and Hello flags; version 1 peers refuse them. Version 2 adds fetch
// connections; bootstrap clients still send version 1. Version 3 adds
// reports: a replica's stream Hello is version 3, and when a source of an
// older version refuses it ("version"), the replica speaks version 1 to
// that source within the same attempt and sends it no reports.
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
//	9 unavailable       the server cannot make a snapshot now
//	10 bad_request      a fetch connection sent a malformed or unexpected message
//	11 proxy            the database is a proxy here: no snapshots, no values
//
// # Fetch connections (version 2)
//
// A proxy fetches the values it does not hold on connections opened with a
// version-2 Hello carrying the Fetch flag. After the Welcome the client
// sends Fetch messages, pipelined; the server answers each with one Values
// message, in order, with the request's id, read from one view of its
// store as of min(asof, its published applied index):
//
//	10 Fetch   id(8) asof(8) count(uvarint 1..MaxFetchKeys) item*;  item := index(8) keylen(uvarint) key
//	11 Values  id(8) applied(8) horizon(8) count(uvarint) result*;
//	           result := status(1) [index(8) vallen(uvarint) value]  (status ok only)
//
// index is the version the client expects (0: any); statuses: 0 ok, 1
// absent, 2 behind, 3 gone, 4 mismatch, 5 error, 6 skipped (see
// protocol_fetch.go). Bad input is counted, refused with bad_request when
// the frame was readable, and closes the connection. The full description
// is in docs/protocol.md.
//
// # Bootstrap
//
// A replica bootstraps when a source refuses it with log_truncated (it is
// behind the retained log) and a round of its other sources could not
// continue its log either (it then bootstraps from the first that refused),
// or when it is new (applied index 0) and the source is more than
// bootstrap_min_entries (default 10,000) ahead. It sends
// a Hello with the Bootstrap flag and its resume point; the server answers
// Welcome (next = the snapshot's index + 1), the Snapshot manifest, then for
// each file from the resume point on: Chunk messages in order and a FileEnd,
// and finally Done(last = the snapshot's index). The client then opens an
// ordinary stream from index + 1.
//
// The server's snapshot is a checkpoint of its store (immutable files hard
// linked, the write-ahead log copied) made in milliseconds, in
// <store dir>.snapshots/<id>. Reading its files holds no read transaction on
// the live database. A snapshot is shared by every bootstrap while it is
// younger than snapshot_keep (default 10 minutes) and the log still continues
// from its index; it is kept snapshot_keep after its last use so that an
// interrupted download can resume, and removed when superseded and unused,
// or when the server stops (those of a killed process when the store next
// opens). A resume point naming a snapshot the server no
// longer has gets a new snapshot: the client discards its partial download
// and starts over. Snapshot bytes are paced by the server's bootstrap_rate
// (default 100 MiB/s, all transfers together).
//
// The client writes the files into <store dir>.bootstrap, with a record
// (QS-BOOTSTRAP.json) of the snapshot and of the files complete, checked and
// fsynced. A file name that is empty, ".", "..", contains a path separator,
// or names the record is refused. After a broken connection or a restart,
// the resume point is the first incomplete file and its size on disk; the
// CRC of a resumed file covers the bytes already on disk, read again by both
// sides. A partial download is removed once an ordinary stream applies
// entries (nothing would resume it then). When every file is in, the directory is synced and renamed to
// <store dir>.ready (the commit point), and the store swaps it in: readers
// wait for the swap (milliseconds) and never see the applied index go back.
// A crash at any point leaves either the old database or the new one; the
// next start finishes the install. Only one bootstrap runs per host at a
// time: the client holds an flock on bootstrap_lock (default
// $TMPDIR/qs-bootstrap.lock) while it downloads and installs.
//
// # Liveness
//
// The root writes a heartbeat entry every second (internal/server writes it when nothing else was written), so a
// replica's lag is now − the root time of its last applied entry. A replica
// that receives nothing (not one byte of Entries or Progress) for its
// IdleTimeout (default 30 s) disconnects and tries the next source, after a
// jittered, doubling, bounded backoff. The timeout is on bytes, not on
// whole messages, and so is the server's WriteTimeout (on each 256 KiB it
// writes): a large batch crosses a slow link in as long as it takes while
// bytes keep moving.
//
// Not yet here: source discovery, and forwarding verified entries
// downstream before the local commit finishes.
package repl
