// Package memcache is the memcached text-protocol front door of a
// Quicksilver database: any memcached client can read (and, at the root,
// write) keys through it, over TCP or Unix sockets.
//
// # Supported subset
//
//	get <key>*                 VALUE <key> 0 <bytes>\r\n<data>\r\n ... END
//	gets <key>*                the same with the key's log index as cas unique
//	set <key> 0 0 <bytes> [noreply]\r\n<data>\r\n   STORED once durable
//	delete <key> [0] [noreply] DELETED or NOT_FOUND once durable
//	version                    VERSION <Version>
//	stats                      STAT <name> <value> ... END
//	quit                       closes the connection
//
// Flags are always 0 in replies. A set with non-zero flags or a non-zero
// exptime is refused with CLIENT_ERROR rather than silently stored without
// them: values are plain bytes and keys never expire, so a client relying on
// either would break without noticing. Other memcached commands (add, cas,
// incr, touch, flush_all, the meta commands, ...) are refused with
// "CLIENT_ERROR <command> is not supported"; the data block of an unsupported
// storage command is skipped. Unknown commands get ERROR.
//
// Keys follow memcached's rules: 1 to 250 bytes, no spaces or control
// characters. Lines may end in "\r\n" or "\n"; data blocks must be followed
// by "\r\n" (else "CLIENT_ERROR bad data chunk", after which the connection
// goes on with the bytes that follow the block).
//
// # Invariants
//
//   - Replies come in request order; requests may be pipelined. Replies are
//     buffered and written when no more input is buffered (before the
//     connection would block reading), before a write to the backend, and
//     when 32 KiB are pending. Every write ends at a reply boundary.
//   - STORED and DELETED are sent only after the Backend reports the write
//     durable.
//   - A get is answered from one Backend.Get, so from one log index. If it
//     fails, the reply is one SERVER_ERROR (or CLIENT_ERROR) line and no
//     value: the reply is built in memory (bounded by MaxReplyBytes) and
//     only sent once the read succeeded. Corrupt data is never served.
//   - An error line never contains a line break; backend error text is
//     sanitised and cut.
//   - noreply on set and delete silences every reply to that request,
//     errors included, as in memcached: a client that reads no reply must
//     not get one. When the connection is closed because of the request, the
//     error is sent anyway, and refusals of unsupported commands are always
//     sent (noreply is not recognised there).
//   - When the byte stream can no longer be split into requests (a set whose
//     length cannot be parsed, an over-long line, a data block larger than
//     MaxSwallowBytes), the error is sent and the connection closed.
//   - Every request is counted in qs_memcache_requests_total and every
//     refusal or failure in qs_memcache_errors_total by kind.
//
// # Limits and lifecycle
//
// Config bounds line length, keys per get, value size, reply size and
// connections, and sets the idle, request (slow-loris) and write timeouts.
// Connections beyond MaxConns are told "SERVER_ERROR too many connections"
// and closed. Shutdown closes listeners and idle connections, lets requests
// in flight finish, then force-closes what remains when its context ends;
// every goroutine the server starts is tracked and waited for.
//
// The Backend seam (backend.go) is the only dependency on the database; its
// errors are the sentinels of package internal/store.
package memcache
