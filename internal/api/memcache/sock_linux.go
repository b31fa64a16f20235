package memcache

import (
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// threadSock serves a connection with blocking system calls, on the thread
// its goroutine is locked to. Timeouts are the socket's SO_RCVTIMEO and
// SO_SNDTIMEO, set to the time left until the deadline (rounded up to
// timeoutStep, and set again only when that changes). The descriptor is
// used inside syscall.RawConn callbacks only, so it stays open while a call
// blocks, even if the connection is closed meanwhile; abort shuts the
// socket down to end such a call.
type threadSock struct {
	rc       syscall.RawConn
	rcv, snd time.Duration // timeouts as last set
	// The call under way, for the callbacks doRead and doWrite, bound
	// once: a closure per call would allocate on every request. Only the
	// connection's goroutine reads and writes.
	p               []byte
	d               time.Duration
	n               int
	err             error
	readFn, writeFn func(fd uintptr) bool
}

// timeoutStep is the granularity of socket timeouts: finer would mean a
// setsockopt before nearly every read.
const timeoutStep = 10 * time.Millisecond

// newThreadSock switches nc's socket to blocking mode and returns a
// threadSock for it, or false (nc is left as it was) if nc is not a socket
// or its mode cannot be changed.
func newThreadSock(nc net.Conn) (sock, bool) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, false
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetNonblock(int(fd), false) }); err != nil || serr != nil {
		return nil, false
	}
	t := &threadSock{rc: rc}
	t.readFn, t.writeFn = t.doRead, t.doWrite
	return t, true
}

// timeoutUntil returns the socket timeout for deadline, or false if the
// deadline has passed.
func timeoutUntil(deadline time.Time) (time.Duration, bool) {
	d := time.Until(deadline)
	if d <= 0 {
		return 0, false
	}
	return (d + timeoutStep - 1) / timeoutStep * timeoutStep, true
}

func setTimeout(fd uintptr, opt int, d time.Duration, last *time.Duration) error {
	if d == *last {
		return nil
	}
	tv := unix.NsecToTimeval(d.Nanoseconds())
	if err := unix.SetsockoptTimeval(int(fd), unix.SOL_SOCKET, opt, &tv); err != nil {
		return os.NewSyscallError("setsockopt", err)
	}
	*last = d
	return nil
}

func (t *threadSock) read(p []byte, deadline time.Time) (int, error) {
	d, ok := timeoutUntil(deadline)
	if !ok {
		return 0, os.ErrDeadlineExceeded
	}
	t.p, t.d = p, d
	cerr := t.rc.Read(t.readFn)
	n, err := t.n, t.err
	t.p = nil
	switch {
	case cerr != nil:
		return 0, cerr
	case err == unix.EAGAIN:
		return 0, os.ErrDeadlineExceeded
	case err != nil:
		return 0, os.NewSyscallError("read", err)
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

func (t *threadSock) write(p []byte, deadline time.Time) (int, error) {
	total := 0
	for total < len(p) {
		d, ok := timeoutUntil(deadline)
		if !ok {
			return total, os.ErrDeadlineExceeded
		}
		t.p, t.d = p[total:], d
		cerr := t.rc.Write(t.writeFn)
		n, err := t.n, t.err
		t.p = nil
		if n > 0 {
			total += n
		}
		switch {
		case cerr != nil:
			return total, cerr
		case err == unix.EAGAIN: // timed out: the loop checks the deadline
		case err != nil:
			return total, os.NewSyscallError("write", err)
		}
	}
	return total, nil
}

func (t *threadSock) doRead(fd uintptr) bool { return t.call(fd, unix.SO_RCVTIMEO, &t.rcv, unix.Read) }

func (t *threadSock) doWrite(fd uintptr) bool { return t.call(fd, unix.SO_SNDTIMEO, &t.snd, send) }

// call runs op on fd and t.p once the socket timeout opt is t.d (last is
// its value as last set), again after EINTR; it leaves the outcome in t.n
// and t.err. It runs inside a RawConn callback, which keeps fd open.
func (t *threadSock) call(fd uintptr, opt int, last *time.Duration, op func(int, []byte) (int, error)) bool {
	t.n = 0
	if t.err = setTimeout(fd, opt, t.d, last); t.err != nil {
		return true
	}
	for {
		if t.n, t.err = op(int(fd), t.p); t.err != unix.EINTR {
			return true
		}
	}
}

// send writes p with MSG_NOSIGNAL: a peer that is gone is an EPIPE error,
// not a SIGPIPE.
func send(fd int, p []byte) (int, error) { return unix.SendmsgN(fd, p, nil, nil, unix.MSG_NOSIGNAL) }

func (t *threadSock) shutdown(how int) {
	t.rc.Control(func(fd uintptr) { unix.Shutdown(int(fd), how) })
}

// wake shuts the socket down for reading: a blocked read returns io.EOF.
func (t *threadSock) wake()           { t.shutdown(unix.SHUT_RD) }
func (t *threadSock) abort()          { t.shutdown(unix.SHUT_RDWR) }
func (t *threadSock) dedicated() bool { return true }

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
