package memcache

import (
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/quicksilver-kv/qs/internal/blocksock"
)

// threadSock serves a connection with blocking system calls (package
// blocksock), on the thread its goroutine is locked to.
type threadSock struct{ s *blocksock.Sock }

// newThreadSock switches nc's socket to blocking mode and returns a
// threadSock for it, or false (nc is left as it was) if nc is not a socket
// or its mode cannot be changed.
func newThreadSock(nc net.Conn) (sock, bool) {
	s, err := blocksock.New(nc)
	if err != nil {
		return nil, false
	}
	return threadSock{s}, true
}

func (t threadSock) read(p []byte, deadline time.Time) (int, error) { return t.s.Read(p, deadline) }

func (t threadSock) write(p []byte, deadline time.Time) (int, error) { return t.s.Write(p, deadline) }

// wake shuts the socket down for reading: a blocked read returns io.EOF.
func (t threadSock) wake()           { t.s.CloseRead() }
func (t threadSock) abort()          { t.s.Abort() }
func (t threadSock) dedicated() bool { return true }

// setThreadNice sets the nice value of the calling thread.
func setThreadNice(nice int) error {
	if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice); err != nil {
		return os.NewSyscallError("setpriority", err)
	}
	return nil
}

// threadNice returns the nice value of the calling thread (0 if it cannot
// be read).
func threadNice() int {
	// The system call returns 20 - nice, so that it is never negative.
	p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
	if err != nil {
		return 0
	}
	return 20 - p
}

// setThreadSlice asks for scheduling slices of d for the calling thread,
// if it runs under the normal policy (others are left alone).
func setThreadSlice(d time.Duration) error {
	a, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return os.NewSyscallError("sched_getattr", err)
	}
	if a.Policy != unix.SCHED_NORMAL {
		return nil
	}
	a.Runtime = uint64(d)
	if err := unix.SchedSetAttr(0, a, 0); err != nil {
		return os.NewSyscallError("sched_setattr", err)
	}
	return nil
}

// threadSlice returns the calling thread's requested slice (0: the
// kernel's default, or a kernel that does not report it).
func threadSlice() time.Duration {
	a, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return 0
	}
	return time.Duration(a.Runtime)
}
