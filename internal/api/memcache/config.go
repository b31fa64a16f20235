package memcache

import (
	"errors"
	"fmt"
	"time"
)

// Config holds the limits of a Server and where it counts. A zero field
// means "use the default"; DefaultConfig returns every default,
// EnsureDefaults fills zero fields and Validate rejects values the server
// cannot work with.
type Config struct {
	// MaxLineBytes is the longest request line accepted, terminator
	// included. A longer line is answered with "CLIENT_ERROR line too long"
	// and the connection is closed, since the rest of the line cannot be
	// told apart from the next request. Default 2 MiB, as memcached's;
	// at least 512.
	MaxLineBytes int
	// MaxKeysPerGet is the most keys one get or gets may name. Default
	// 65536 (memcached has no such limit; a line of MaxLineBytes bounds
	// it there).
	MaxKeysPerGet int
	// MaxValueBytes is the largest value a set may store. A larger set is
	// answered with "SERVER_ERROR object too large for cache". Default 1 MiB.
	MaxValueBytes int
	// MaxSwallowBytes bounds how much of a rejected data block (a set that is
	// too large or malformed, an unsupported storage command) is read and
	// discarded to keep the connection in step. A larger block closes the
	// connection after the error reply. Default 16 MiB; at least
	// MaxValueBytes.
	MaxSwallowBytes int
	// MaxReplyBytes bounds the reply to one get or gets, which is built in
	// memory before it is sent so that a failed read never sends part of its
	// values. A larger reply is answered with SERVER_ERROR. Default 64 MiB;
	// at least MaxValueBytes plus room for one VALUE line.
	MaxReplyBytes int
	// MaxConns is the most connections served at once, over all listeners.
	// A connection beyond it makes room by closing the connection that has
	// waited longest for its next request, as memcached does; if every
	// connection is inside a request, the new one is told "SERVER_ERROR too
	// many connections" and closed. Default 4096.
	MaxConns int
	// IdleTimeout is how long a connection may wait between requests before
	// it is closed. Default 5 minutes.
	IdleTimeout time.Duration
	// RequestTimeout is how long a client has to send a whole request (line
	// and data block) once its first byte arrived; it defeats slow-loris
	// clients. Default 10 seconds.
	RequestTimeout time.Duration
	// WriteTimeout bounds each write of replies to a client that does not
	// read. Default 10 seconds.
	WriteTimeout time.Duration
	// Threads is how many connections at most are served each on a
	// dedicated OS thread with blocking socket calls (Linux), which picks
	// a request up faster than Go's network poller when the CPUs are busy
	// (sock.go); later connections go through the poller. Each costs a
	// thread while it is open. Default 256; -1: none.
	Threads int
	// EventLoops is how many OS threads serve connections from an epoll
	// loop each (Linux), as memcached's worker threads do: a loop reads
	// requests on all its connections as they arrive and answers get and
	// gets itself, and hands anything that waits (a write, a request not
	// yet whole) to a goroutine of the connection until it is idle again.
	// Under load one wake-up then serves many requests. When loops serve
	// connections, Threads is not used. Default 2; -1: none.
	EventLoops int
	// ReadNice, if not 0 and below the process's nice value, is the nice
	// value (-20 to 19, lower runs first) of a dedicated thread while its connection
	// serves gets: reads are then picked up before writes and background
	// work (Pebble's flushes and compactions) when the CPUs are busy, and
	// get a larger share of them, at the expense of writes (and, on a
	// replica, of applying the log). The system allows it only with
	// CAP_SYS_NICE or a matching RLIMIT_NICE; otherwise reads keep the
	// process's priority (logged once). Default 0: off.
	ReadNice int
	// Metrics receives the server's qs_memcache_* series; the servers of
	// every database of a process share one, registered once by its
	// owner. Nil: the server counts in a Metrics of its own, registered
	// nowhere.
	Metrics *Metrics
}

// DefaultConfig returns the default limits.
func DefaultConfig() Config {
	return Config{
		MaxLineBytes:    2 << 20,
		MaxKeysPerGet:   65536,
		MaxValueBytes:   1 << 20,
		MaxSwallowBytes: 16 << 20,
		MaxReplyBytes:   64 << 20,
		MaxConns:        4096,
		IdleTimeout:     5 * time.Minute,
		RequestTimeout:  10 * time.Second,
		WriteTimeout:    10 * time.Second,
		Threads:         256,
		EventLoops:      2,
	}
}

// EnsureDefaults sets every zero field to its default.
func (c *Config) EnsureDefaults() {
	d := DefaultConfig()
	setInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setInt(&c.MaxLineBytes, d.MaxLineBytes)
	setInt(&c.MaxKeysPerGet, d.MaxKeysPerGet)
	setInt(&c.MaxValueBytes, d.MaxValueBytes)
	setInt(&c.MaxSwallowBytes, max(d.MaxSwallowBytes, c.MaxValueBytes))
	setInt(&c.MaxReplyBytes, max(d.MaxReplyBytes, c.MaxValueBytes+minReplyRoom))
	setInt(&c.MaxConns, d.MaxConns)
	setDur(&c.IdleTimeout, d.IdleTimeout)
	setDur(&c.RequestTimeout, d.RequestTimeout)
	setDur(&c.WriteTimeout, d.WriteTimeout)
	setInt(&c.Threads, d.Threads)
	setInt(&c.EventLoops, d.EventLoops)
}

// Validate reports the first field that a server cannot work with. It
// expects defaults to have been applied.
func (c *Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("memcache config: "+format, args...))
		}
	}
	check(c.MaxLineBytes >= minLineBytes, "MaxLineBytes %d is below %d", c.MaxLineBytes, minLineBytes)
	check(c.MaxKeysPerGet >= 1, "MaxKeysPerGet %d must be at least 1", c.MaxKeysPerGet)
	check(c.MaxValueBytes >= 1 && c.MaxValueBytes <= maxValueLimit,
		"MaxValueBytes %d must be in [1, %d]", c.MaxValueBytes, maxValueLimit)
	check(c.MaxSwallowBytes >= c.MaxValueBytes, "MaxSwallowBytes %d is below MaxValueBytes %d", c.MaxSwallowBytes, c.MaxValueBytes)
	check(c.MaxReplyBytes >= c.MaxValueBytes+minReplyRoom,
		"MaxReplyBytes %d must be at least MaxValueBytes+%d", c.MaxReplyBytes, minReplyRoom)
	check(c.MaxConns >= 1, "MaxConns %d must be at least 1", c.MaxConns)
	check(c.IdleTimeout > 0, "IdleTimeout %v must be positive", c.IdleTimeout)
	check(c.RequestTimeout > 0, "RequestTimeout %v must be positive", c.RequestTimeout)
	check(c.WriteTimeout > 0, "WriteTimeout %v must be positive", c.WriteTimeout)
	check(c.Threads >= -1, "Threads %d must be -1 (none) or more", c.Threads)
	check(c.EventLoops >= -1 && c.EventLoops <= maxEventLoops, "EventLoops %d must be -1 (none) or in [1, %d]", c.EventLoops, maxEventLoops)
	check(c.ReadNice >= -20 && c.ReadNice <= 19, "ReadNice %d must be in [-20, 19]", c.ReadNice)
	return errors.Join(errs...)
}

// Fixed sizes of the implementation, gathered here rather than scattered.
const (
	// handoffLinger is how long a connection of an event loop that was
	// handed to a goroutine (for a write, say) waits there for its next
	// request before it parks in its loop again: a client that writes
	// usually writes again at once, and each hand-off costs a goroutine
	// and two changes of the epoll set.
	handoffLinger = 2 * time.Millisecond
	// pollWaiters bounds the goroutines of event loop connections waiting
	// in poll(2) at once, each on an OS thread; the others wait in their
	// loop's epoll set (loopSock.wait), so slow clients cannot make a
	// thread each (Go stops the process at 10,000).
	pollWaiters = 64
	// maxEventLoops bounds Config.EventLoops (memcached's -t allows 64
	// worker threads).
	maxEventLoops = 64
	// maxKeyLen is memcached's key length limit.
	maxKeyLen = 250
	// minLineBytes leaves room for the longest valid set line.
	minLineBytes = 512
	// minReplyRoom is room for one "VALUE <key> 0 <bytes> <cas>\r\n...\r\nEND\r\n".
	minReplyRoom = 512
	// maxValueLimit keeps data block sizes far from int overflow.
	maxValueLimit = 1 << 30
	// initialBufBytes is the size of a new connection's input and output
	// buffers. Buffers grow for long lines, large values and large replies
	// and are given back once drained if they grew beyond retainBufBytes, so
	// that thousands of mostly idle connections stay small.
	initialBufBytes = 4 << 10
	retainBufBytes  = 64 << 10
	// flushBytes: pending replies are written once they reach this size even
	// if more pipelined requests are buffered. Well below retainBufBytes, so
	// that the output buffer of a pipelining client is kept, not reallocated.
	flushBytes = 32 << 10
	// maxErrorText bounds the backend error text copied into an error line;
	// common clients read reply lines into 4 KiB buffers.
	maxErrorText = 512
	// lingerTimeout and lingerBytes bound how long and how much a connection
	// closed after an error reply keeps reading (and discarding) what the
	// client still sends, so that the kernel does not answer that data with
	// a reset that destroys the error reply before the client read it.
	lingerTimeout = 500 * time.Millisecond
	lingerBytes   = 1 << 20
)
