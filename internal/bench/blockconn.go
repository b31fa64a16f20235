package bench

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/quicksilver-kv/qs/internal/blocksock"
)

// blockingConn is a connection read and written with blocking system calls
// on the calling goroutine's thread (package blocksock), for the readlat
// reader: its latencies then hold the server's delays and one kernel
// wake-up of this thread, not the Go scheduler's wake-ups of this process,
// which under load add a tail of their own (docs/benchmarks.md,
// "Event loops and dedicated read threads").
//
// Deadlines are kept as set; one in the past aborts the calls under way,
// after which the connection fails every call (the session closes it).
type blockingConn struct {
	net.Conn
	s      *blocksock.Sock
	rd, wd atomic.Int64 // deadlines, Unix nanoseconds; 0: none
}

// newBlockingConn switches c to blocking mode, or returns an error and
// leaves c as it was (not Linux, not a socket).
func newBlockingConn(c net.Conn) (*blockingConn, error) {
	s, err := blocksock.New(c)
	if err != nil {
		return nil, err
	}
	return &blockingConn{Conn: c, s: s}, nil
}

// noDeadline stands for "no deadline" in blocking calls, which always take
// one.
const noDeadline = 24 * time.Hour

func deadline(ns int64) time.Time {
	if ns == 0 {
		return time.Now().Add(noDeadline)
	}
	return time.Unix(0, ns)
}

func (c *blockingConn) Read(p []byte) (int, error)  { return c.s.Read(p, deadline(c.rd.Load())) }
func (c *blockingConn) Write(p []byte) (int, error) { return c.s.Write(p, deadline(c.wd.Load())) }

func (c *blockingConn) SetDeadline(t time.Time) error {
	ns := c.set(t)
	c.rd.Store(ns)
	c.wd.Store(ns)
	return nil
}

func (c *blockingConn) SetReadDeadline(t time.Time) error {
	c.rd.Store(c.set(t))
	return nil
}

func (c *blockingConn) SetWriteDeadline(t time.Time) error {
	c.wd.Store(c.set(t))
	return nil
}

// set returns t as stored, and aborts the calls under way if t has passed:
// a blocked system call does not see a new deadline.
func (c *blockingConn) set(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	if !t.After(time.Now()) {
		c.s.Abort()
	}
	return t.UnixNano()
}
