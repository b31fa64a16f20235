package epoll

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Set is an epoll instance and the eventfd that wakes it.
type Set struct {
	epfd, wakefd int
	events       []unix.EpollEvent
}

// wakeID is the identifier of the wake-up eventfd; callers' identifiers
// must not be 0.
const wakeID = 0

// New returns an empty Set that reports at most batch sockets per Wait.
func New(batch int) (*Set, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	s := &Set{epfd: epfd, wakefd: wakefd, events: make([]unix.EpollEvent, max(batch, 1))}
	if err := s.ctl(unix.EPOLL_CTL_ADD, wakefd, wakeID); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Set) ctl(op, fd int, id uint64) error {
	return s.ctlEvents(op, fd, id, unix.EPOLLIN|unix.EPOLLRDHUP)
}

func (s *Set) ctlEvents(op, fd int, id uint64, events uint32) error {
	ev := unix.EpollEvent{Events: events}
	setID(&ev, id)
	if err := unix.EpollCtl(s.epfd, op, fd, &ev); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// Add starts reporting input on fd as id (not 0).
func (s *Set) Add(fd int, id uint64) error {
	return s.add(fd, id, unix.EPOLLIN|unix.EPOLLRDHUP)
}

// AddOutput starts reporting room for output on fd as id (not 0).
func (s *Set) AddOutput(fd int, id uint64) error {
	return s.add(fd, id, unix.EPOLLOUT)
}

func (s *Set) add(fd int, id uint64, events uint32) error {
	if id == wakeID {
		return errors.New("epoll: identifier 0 is reserved")
	}
	return s.ctlEvents(unix.EPOLL_CTL_ADD, fd, id, events)
}

// Remove stops reporting fd.
func (s *Set) Remove(fd int) error {
	if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_DEL, fd, nil); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// Wait blocks until a socket has input, Wake is called, or timeout passes
// (negative: no limit), and appends the identifiers of the sockets with
// input to ids. woken reports a Wake since the last Wait.
func (s *Set) Wait(ids []uint64, timeout time.Duration) (_ []uint64, woken bool, err error) {
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	n, err := unix.EpollWait(s.epfd, s.events, ms)
	if err == unix.EINTR {
		return ids, false, nil
	}
	if err != nil {
		return ids, false, os.NewSyscallError("epoll_wait", err)
	}
	for i := range n {
		id := getID(&s.events[i])
		if id == wakeID {
			woken = true
			var b [8]byte
			unix.Read(s.wakefd, b[:]) // resets the counter; EAGAIN if another Wait did
			continue
		}
		ids = append(ids, id)
	}
	return ids, woken, nil
}

// Wake makes a Wait under way, or the next one, return.
func (s *Set) Wake() {
	b := [8]byte{1}
	unix.Write(s.wakefd, b[:]) // EAGAIN only when the counter is full: a wake-up is pending anyway
}

// Close releases the Set. Sockets in it are left open.
func (s *Set) Close() error {
	err := unix.Close(s.epfd)
	if werr := unix.Close(s.wakefd); err == nil {
		err = werr
	}
	return err
}

// FD returns the descriptor of nc's socket, or false if nc is not a socket.
func FD(nc net.Conn) (int, bool) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil || fd < 0 {
		return 0, false
	}
	return fd, true
}

// Detach takes nc's socket out of Go's network poller: it returns a
// descriptor of its own for the socket (non-blocking, as nc's was) and
// closes nc, whose poller then reports nothing more for it. The caller
// closes the descriptor. If it fails, nc is left as it was.
func Detach(nc net.Conn) (int, error) {
	fd, ok := FD(nc)
	if !ok {
		return 0, ErrUnsupported
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return 0, os.NewSyscallError("fcntl", err)
	}
	nc.Close()
	return dup, nil
}

// Poll waits until fd has input (or room for output, if write), is shut
// down or fails, or timeoutMs milliseconds pass (negative: no limit), on
// the calling thread. It returns nil if interrupted (EINTR): the caller
// checks again.
func Poll(fd int, write bool, timeoutMs int) error {
	ev := int16(unix.POLLIN | unix.POLLRDHUP)
	if write {
		ev = unix.POLLOUT
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: ev}}
	if _, err := unix.Poll(fds, timeoutMs); err != nil && err != unix.EINTR {
		return os.NewSyscallError("poll", err)
	}
	return nil
}

// Shutdown shuts fd's socket down for reading, writing, or both.
func Shutdown(fd int, read, write bool) error {
	how := unix.SHUT_RDWR
	switch {
	case read && !write:
		how = unix.SHUT_RD
	case write && !read:
		how = unix.SHUT_WR
	}
	return os.NewSyscallError("shutdown", unix.Shutdown(fd, how))
}

// Close closes fd.
func Close(fd int) error { return os.NewSyscallError("close", unix.Close(fd)) }

// Read reads what fd has, without waiting: ErrWouldBlock if nothing
// arrived, (0, nil) at the end of the input.
func Read(fd int, p []byte) (int, error) {
	for {
		n, err := unix.Read(fd, p)
		switch err {
		case nil:
			return n, nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, ErrWouldBlock
		}
		return 0, os.NewSyscallError("read", err)
	}
}

// Write writes as much of p as fd takes without waiting; ErrWouldBlock
// (with the bytes written) if it took less than all of it.
func Write(fd int, p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n, err := unix.Write(fd, p[done:])
		switch err {
		case nil:
			done += n
			continue
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return done, ErrWouldBlock
		}
		return done, os.NewSyscallError("write", err)
	}
	return done, nil
}
