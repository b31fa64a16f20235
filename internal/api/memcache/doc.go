// Package memcache is the memcached front door of a Quicksilver database:
// any memcached client can read (and, at the root, write) keys through it,
// over TCP or Unix sockets, in the text, meta and binary protocols.
//
// The commands, flags, replies and the differences from memcached are
// described once, for clients and operators, in docs/protocol.md
// ("memcached protocol"); a change to what a client sees changes that page
// too.
//
// # Where things are
//
//	server.go             listeners, the connection limit, shutdown
//	sock*.go              reading and writing a socket (poller or blocking thread)
//	loop.go               event loops: gets served from epoll, the rest handed
//	                      off; their sockets kept out of Go's poller
//	conn.go               a connection's loop: read, dispatch, buffered replies
//	parse.go, meta.go     pure parsers of text and meta request lines
//	binary.go             pure parser of binary request headers
//	text.go, metaconn.go, binconn.go
//	                      serving the text, meta and binary commands
//	ops.go                the operations the three protocols share
//	backend.go            Backend, the only dependency on the database
//	errors.go             error kinds and their replies
//	metrics.go            Metrics, the qs_memcache_* collectors of one or more servers
//
// # Invariants
//
//   - Replies come in request order; requests may be pipelined. Replies are
//     buffered and written when no more input is buffered (before the
//     connection would block reading), before a write to the backend, and
//     when 32 KiB are pending. Every write ends at a reply boundary.
//   - A success (STORED, DELETED, HD, binary status 0) is sent only after
//     the Backend reports the write durable.
//   - Every conditional command (add, replace, append, prepend, cas, incr,
//     decr, touch, gat, and their meta and binary forms) is one
//     Backend.WriteIf, retried at most 16 times when the key changed in
//     between.
//   - Client flags and the expiry travel with the value (Attrs); nothing
//     expires here: the root deletes expired keys through the log.
//   - A get is answered from one Backend.Get, so from one log index. If it
//     fails, the reply is one SERVER_ERROR (or CLIENT_ERROR) line and no
//     value: the reply is built in memory (bounded by MaxReplyBytes) and
//     only sent once the read succeeded. Corrupt data is never served.
//   - An error line never contains a line break; backend error text is
//     sanitised and cut.
//   - noreply silences every reply to the request that carries it,
//     refusals included; only when the connection is closed because of the
//     request is the error sent anyway. The meta q flag silences success
//     only.
//   - When the byte stream can no longer be split into requests (a length
//     that cannot be parsed, an over-long line, a data block or binary body
//     larger than MaxSwallowBytes, binary lengths beyond the body), the
//     error is sent and the connection closed.
//   - Every request is counted in qs_memcache_requests_total and every
//     refusal or failure in qs_memcache_errors_total by kind.
//   - Every goroutine the server starts is tracked and waited for by
//     Shutdown; the event loops end once every connection they own is
//     closed.
//   - A connection of an event loop is served by one party at a time: its
//     loop while it is parked (conn.mu.parked), its goroutine otherwise.
//     Only the party that owns it reads, writes or closes its socket.
//
// Backend errors are the sentinels of package internal/store (backend.go
// says which are the client's fault).
package memcache
