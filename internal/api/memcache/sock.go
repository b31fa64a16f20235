package memcache

import (
	"net"
	"sync/atomic"
	"time"
)

// sock is how a connection reads and writes its socket: through Go's
// network poller (pollSock), with blocking system calls on a thread of
// its own (threadSock, Linux), or, for a connection of an event loop,
// without the poller (loopSock, Linux).
//
// Why a thread of its own: a request that arrives for a connection served
// through the poller wakes the poller's thread, which hands the goroutine to
// a P, which may have to wake another thread to run it: two or three
// wake-ups, each of which waits for a CPU when writes (hashing, Pebble's
// flushes and compactions, fsyncs) keep the CPUs busy. A thread blocked in
// read(2) is woken by the kernel itself, once, and carries on with the
// request. See docs/benchmarks.md, "Event loops and dedicated read threads".
type sock interface {
	// read reads into p, waiting until deadline at the latest
	// (os.ErrDeadlineExceeded). It returns io.EOF when the peer closed.
	read(p []byte, deadline time.Time) (int, error)
	// write writes all of p by deadline.
	write(p []byte, deadline time.Time) (int, error)
	// wake makes a read under way (or the next one) return at once: the
	// server is shutting down.
	wake()
	// abort makes every read and write under way (and later) fail; the
	// caller then closes the connection.
	abort()
	// dedicated reports whether the connection has a thread of its own.
	dedicated() bool
}

// pollSock serves a connection through Go's network poller.
type pollSock struct {
	nc                          net.Conn
	readDeadline, writeDeadline time.Time // as last set, to skip repeating it
	// woken and aborted are set by wake and abort, which may run on other
	// goroutines: a read or write that sets its own deadline after they
	// set theirs puts theirs back, so that neither is lost (a graceful
	// shutdown would otherwise wait out the idle timeout of a connection
	// woken just before its read began).
	woken, aborted atomic.Bool
}

func (p *pollSock) read(b []byte, deadline time.Time) (int, error) {
	if !deadline.Equal(p.readDeadline) {
		p.nc.SetReadDeadline(deadline)
		p.readDeadline = deadline
		if p.woken.Load() || p.aborted.Load() {
			p.nc.SetReadDeadline(aLongTimeAgo)
		}
	}
	return p.nc.Read(b)
}

func (p *pollSock) write(b []byte, deadline time.Time) (int, error) {
	if !deadline.Equal(p.writeDeadline) {
		p.nc.SetWriteDeadline(deadline)
		p.writeDeadline = deadline
		if p.aborted.Load() {
			p.nc.SetWriteDeadline(aLongTimeAgo)
		}
	}
	return p.nc.Write(b)
}

func (p *pollSock) wake() {
	p.woken.Store(true)
	p.nc.SetReadDeadline(aLongTimeAgo)
}

func (p *pollSock) abort() {
	p.aborted.Store(true)
	p.nc.SetDeadline(aLongTimeAgo)
}

func (p *pollSock) dedicated() bool { return false }

var aLongTimeAgo = time.Unix(1, 0)

// readSlice is the scheduling slice a dedicated thread asks for (Linux
// 6.12 and later; the smallest the kernel accepts). The kernel's EEVDF
// scheduler gives a task with a shorter slice an earlier deadline, so a
// woken reader preempts a task running a long slice (a flush, a
// compaction, hashing a large value) instead of waiting for it to end,
// while its share of the CPU stays what its nice value makes it. Any
// process may ask for it; older kernels ignore it.
const readSlice = 100 * time.Microsecond
