package blocksock

import (
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Supported says whether New can succeed on this system.
const Supported = true

// Sock is a connection switched to blocking mode. Timeouts are the socket's
// SO_RCVTIMEO and SO_SNDTIMEO, set to the time left until the deadline
// (rounded up to timeoutStep, and set again only when that changes). The
// descriptor is used inside syscall.RawConn callbacks only, so it stays open
// while a call blocks, even if the connection is closed meanwhile; Abort
// shuts the socket down to end such a call.
//
// Read and Write must run on one goroutine only: they share the state of
// the call under way. CloseRead and Abort may run on any goroutine.
type Sock struct {
	rc       syscall.RawConn
	rcv, snd time.Duration // timeouts as last set
	// The call under way, for the callbacks doRead and doWrite, bound
	// once: a closure per call would allocate on every request.
	p               []byte
	d               time.Duration
	n               int
	err             error
	readFn, writeFn func(fd uintptr) bool
}

// New switches nc's socket to blocking mode and returns a Sock for it, or
// an error (nc is then left as it was) if nc is not a socket or its mode
// cannot be changed.
func New(nc net.Conn) (*Sock, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil, ErrUnsupported
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetNonblock(int(fd), false) }); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, os.NewSyscallError("fcntl", serr)
	}
	s := &Sock{rc: rc}
	s.readFn, s.writeFn = s.doRead, s.doWrite
	return s, nil
}

// Read reads into p, waiting until deadline at the latest
// (os.ErrDeadlineExceeded). It returns io.EOF when the peer closed.
func (s *Sock) Read(p []byte, deadline time.Time) (int, error) {
	d, ok := timeoutUntil(deadline)
	if !ok {
		return 0, os.ErrDeadlineExceeded
	}
	s.p, s.d = p, d
	cerr := s.rc.Read(s.readFn)
	n, err := s.n, s.err
	s.p = nil
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

// Write writes all of p by deadline.
func (s *Sock) Write(p []byte, deadline time.Time) (int, error) {
	total := 0
	for total < len(p) {
		d, ok := timeoutUntil(deadline)
		if !ok {
			return total, os.ErrDeadlineExceeded
		}
		s.p, s.d = p[total:], d
		cerr := s.rc.Write(s.writeFn)
		n, err := s.n, s.err
		s.p = nil
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

func (s *Sock) doRead(fd uintptr) bool { return s.call(fd, unix.SO_RCVTIMEO, &s.rcv, unix.Read) }

func (s *Sock) doWrite(fd uintptr) bool { return s.call(fd, unix.SO_SNDTIMEO, &s.snd, send) }

// call runs op on fd and s.p once the socket timeout opt is s.d (last is
// its value as last set), again after EINTR; it leaves the outcome in s.n
// and s.err. It runs inside a RawConn callback, which keeps fd open.
func (s *Sock) call(fd uintptr, opt int, last *time.Duration, op func(int, []byte) (int, error)) bool {
	s.n = 0
	if s.err = setTimeout(fd, opt, s.d, last); s.err != nil {
		return true
	}
	for {
		if s.n, s.err = op(int(fd), s.p); s.err != unix.EINTR {
			return true
		}
	}
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

// send writes p with MSG_NOSIGNAL: a peer that is gone is an EPIPE error,
// not a SIGPIPE.
func send(fd int, p []byte) (int, error) { return unix.SendmsgN(fd, p, nil, nil, unix.MSG_NOSIGNAL) }

func (s *Sock) shutdown(how int) {
	s.rc.Control(func(fd uintptr) { unix.Shutdown(int(fd), how) })
}

// CloseRead shuts the socket down for reading: a blocked Read returns
// io.EOF, and so do later ones.
func (s *Sock) CloseRead() { s.shutdown(unix.SHUT_RD) }

// Abort shuts the socket down: every Read and Write under way, and later,
// fails. The caller then closes the connection.
func (s *Sock) Abort() { s.shutdown(unix.SHUT_RDWR) }
