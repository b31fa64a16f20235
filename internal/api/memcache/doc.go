// Package memcache is the memcached front door of a Quicksilver database:
// any memcached client can read (and, at the root, write) keys through it,
// over TCP or Unix sockets, in the text, meta and binary protocols.
//
// # Commands
//
// Text protocol:
//
//	get|gets <key>*            VALUE <key> 0 <bytes> [<cas>] ... END; the cas
//	                           unique is the key's log index
//	gat|gats 0 <key>*          the same (exptime must be 0)
//	set|add|replace|append|prepend <key> 0 0 <bytes> [noreply]\r\n<data>\r\n
//	                           STORED, NOT_STORED
//	cas <key> 0 0 <bytes> <unique> [noreply]   STORED, EXISTS, NOT_FOUND
//	delete <key> [0] [noreply] DELETED, NOT_FOUND
//	incr|decr <key> <delta> [noreply]          the new value, NOT_FOUND
//	touch <key> 0 [noreply]    TOUCHED, NOT_FOUND
//	flush_all [0] [noreply]    OK (only where the database allows it)
//	version                    VERSION <X.Y.Z>
//	stats                      STAT <name> <value> ... END
//	quit                       closes the connection
//
// Meta protocol (memcached 1.6): mg, ms, md, ma and mn, with the flags
// b (base64 key), c (return cas), C (compare cas), f (flags, always 0),
// F (set flags: 0 only), k (return key), O (opaque), q (quiet: no reply on
// success, nor on a miss for mg), s (size), t (TTL: -1), T and N (TTL: 0
// only), v (value), M (ms modes E A P R S; ma modes I + D -), D and J (ma
// delta and initial value), u (no effect: there is no LRU), P and L
// (ignored). h, l, I, R, E and x are refused.
//
// Binary protocol, recognised by its first byte 0x80 (no text command
// starts with it) and never parsed as text: get, getq, getk, getkq, set,
// add, replace, append, prepend (and their quiet variants, with the cas
// field honoured), delete, incr, decr (create-on-miss with the initial value
// unless the expiration is 0xffffffff), touch, gat, gatq, gatk, gatkq,
// noop, version, stat and quit; any other opcode gets status 0x0081
// "Unknown command" and the connection goes on.
//
// Every conditional command (add, replace, append, prepend, cas, incr,
// decr, and their meta and binary forms) is one Backend.WriteIf: an entry
// of the log applied only if the key's index is still the one the command
// read, so each is atomic and durable before its reply. When the key
// changed in between, the command reads again, at most 16 times, then
// answers SERVER_ERROR (kind "contended"). At a node that takes no writes
// every write command is refused as set is, whatever the key holds.
//
// # Differences from memcached
//
//   - Flags must be 0 and exptime (TTL) must be 0: values are stored as
//     bytes and keys never expire, so a non-zero value is refused with
//     CLIENT_ERROR (binary: 0x0083) rather than silently dropped.
//   - The cas unique is the index of the entry that last wrote the key: a
//     set that writes the value the key already holds changes nothing, not
//     even the unique. incr and decr store the plain number (memcached pads
//     a shrunk number with spaces; both are read back alike).
//   - flush_all deletes every key as one entry of the log, only where the
//     database's configuration allows it (memcache_flush_all = true); a
//     delay other than 0 is refused.
//   - Keys follow the text protocol's rules in every protocol: 1 to 250
//     bytes, no spaces or control characters.
//   - stats takes no argument (no groups such as items, slabs or
//     cachedump); verbosity, shutdown, slabs, lru_crawler, watch and the
//     like are refused with "CLIENT_ERROR <command> is not supported".
//
// Lines may end in "\r\n" or "\n"; data blocks must be followed by "\r\n"
// (else "CLIENT_ERROR bad data chunk", after which the connection goes on
// with the bytes that follow the block). Unknown commands get ERROR.
//
// # Invariants
//
//   - Replies come in request order; requests may be pipelined. Replies are
//     buffered and written when no more input is buffered (before the
//     connection would block reading), before a write to the backend, and
//     when 32 KiB are pending. Every write ends at a reply boundary.
//   - A success (STORED, DELETED, HD, binary status 0) is sent only after
//     the Backend reports the write durable.
//   - A get is answered from one Backend.Get, so from one log index. If it
//     fails, the reply is one SERVER_ERROR (or CLIENT_ERROR) line and no
//     value: the reply is built in memory (bounded by MaxReplyBytes) and
//     only sent once the read succeeded. Corrupt data is never served.
//   - An error line never contains a line break; backend error text is
//     sanitised and cut.
//   - noreply silences every reply to the request that carries it,
//     refusals included, as in memcached: a client that reads no reply must
//     not get one. Only when the connection is closed because of the
//     request is the error sent anyway. The meta q flag silences success
//     only; errors are always sent, as are binary errors of quiet opcodes.
//   - When the byte stream can no longer be split into requests (a length
//     that cannot be parsed, an over-long line, a data block or binary body
//     larger than MaxSwallowBytes, binary lengths beyond the body), the
//     error is sent and the connection closed.
//   - Every request is counted in qs_memcache_requests_total and every
//     refusal or failure in qs_memcache_errors_total by kind.
//
// # Limits and lifecycle
//
// Config bounds line length (2 MiB), keys per get (65,536), value size,
// reply size and connections, and sets the idle, request (slow-loris) and
// write timeouts. At MaxConns a new connection makes room by closing the
// connection idle longest (qs_memcache_idle_evictions_total, stat
// idle_kicks), as memcached does; when every connection is inside a
// request, the new one is told "SERVER_ERROR too many connections" and
// closed. Shutdown closes listeners and idle connections, lets requests in
// flight finish, then force-closes what remains when its context ends;
// every goroutine the server starts is tracked and waited for.
//
// The Backend seam (backend.go) is the only dependency on the database; its
// errors are the sentinels of package internal/store.
package memcache
