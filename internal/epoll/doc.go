// Package epoll waits for input on many sockets at once from one thread,
// and reads and writes them without blocking: the few calls an event loop
// needs (the memcached front door's, internal/api/memcache).
//
// A socket is added to a Set with an identifier of the caller's choice;
// Wait returns the identifiers of sockets with input (or whose peer closed
// or failed: a read then says which), level-triggered: a socket whose input
// was not all read is reported again. Wake makes a Wait under way (or the
// next one) return at once, from any goroutine.
//
// Sockets are used by descriptor. The caller owns them: it must remove a
// socket from its Set before it closes it, and not use a descriptor after
// it closed its connection. Detach takes a connection's socket out of Go's
// network poller (a descriptor of its own, the net.Conn closed), so that
// the poller is not told of the input a Set serves; Poll then waits for
// one such socket on the calling thread. Linux only; New and Detach
// return ErrUnsupported elsewhere.
package epoll

import "errors"

// ErrUnsupported is returned by New where epoll does not exist.
var ErrUnsupported = errors.ErrUnsupported

// ErrWouldBlock is returned by Read and Write when the socket has no input,
// or no room for output, right now.
var ErrWouldBlock = errors.New("epoll: operation would block")
