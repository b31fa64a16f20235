package memcache

import (
	"bytes"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quicksilver-kv/qs/internal/epoll"
)

// An eventLoop serves connections from one OS thread waiting in epoll
// (Config.EventLoops), as memcached's worker threads do: under load one
// wake-up finds requests on many connections, where a thread per
// connection, or a goroutine woken through Go's network poller, pays a
// wake-up (and a context switch) for every request.
//
// A connection of a loop is in one of two places:
//
//   - parked: waiting in the loop's epoll set. The loop reads what arrived
//     and serves it on its own thread when it is nothing but whole get and
//     gets requests, which never wait; it writes the replies without
//     blocking and the connection stays parked.
//   - handed off: anything else (a write, a request not yet whole, a
//     binary or meta request, replies the socket has no room for) is
//     served by conn.serve on a goroutine of its own, as a connection
//     without a loop is, except that its socket is not in Go's network
//     poller (see loopSock); once it has nothing buffered and nothing to
//     wait for, it parks again.
//
// conn.mu.parked says which; it changes under conn.mu together with the
// socket's membership of the epoll set, so that wake (shutdown, eviction)
// and the loop agree on who closes a connection.
type eventLoop struct {
	s   *Server
	set *epoll.Set

	mu struct {
		sync.Mutex
		conns  map[uint64]*conn // every connection of the loop, parked or not
		nextID uint64
		woken  []*conn // connections to close if they are parked
	}
}

// loopBatch is the most connections one epoll_wait reports.
const loopBatch = 256

// loopSweepEvery bounds how long a parked connection outlives its idle
// timeout.
const loopSweepEvery = time.Second

func newEventLoop(s *Server) (*eventLoop, error) {
	set, err := epoll.New(loopBatch)
	if err != nil {
		return nil, err
	}
	l := &eventLoop{s: s, set: set}
	l.mu.conns = make(map[uint64]*conn)
	return l, nil
}

// loopSock is the socket of a connection of an event loop. Its descriptor
// is the connection's own: the accepted net.Conn is closed once its socket
// is duplicated (epoll.Detach), so that Go's network poller, which would
// otherwise be told of every request of a parked connection too (waking
// one of its threads for nothing), does not see it. A goroutine serving
// the connection reads and writes without blocking and, when the socket
// has nothing to read or no room, waits in poll(2) on its thread (the
// kernel wakes that thread alone when the socket is ready), or, while
// pollWaiters others do, in its loop's epoll set.
type loopSock struct {
	fd int
	lp *eventLoop
	c  *conn
	id uint64
	// ready wakes the goroutine waiting in the loop (waitInLoop): the loop
	// saw its event, or wake or abort ran.
	ready chan struct{}
	// woken and aborted are set by wake and abort, which may run on other
	// goroutines: every read then fails at once, as every write does once
	// aborted.
	woken, aborted atomic.Bool
	// fdMu keeps the descriptor open while shutdown uses it: wake, abort
	// and a forced shutdown may run on other goroutines as the connection
	// closes.
	fdMu struct {
		sync.Mutex
		closed bool
	}
}

func (ls *loopSock) read(p []byte, deadline time.Time) (int, error) {
	for {
		if ls.woken.Load() || ls.aborted.Load() {
			return 0, os.ErrDeadlineExceeded
		}
		n, err := epoll.Read(ls.fd, p)
		switch {
		case err == nil && n == 0 && len(p) > 0:
			return 0, io.EOF
		case err == nil:
			return n, nil
		case err != epoll.ErrWouldBlock:
			return 0, err
		}
		if err := ls.wait(false, deadline); err != nil {
			return 0, err
		}
	}
}

func (ls *loopSock) write(p []byte, deadline time.Time) (int, error) {
	total := 0
	for {
		if ls.aborted.Load() {
			return total, os.ErrDeadlineExceeded
		}
		n, err := epoll.Write(ls.fd, p[total:])
		total += n
		switch {
		case err == nil:
			return total, nil
		case err != epoll.ErrWouldBlock:
			return total, err
		}
		if err := ls.wait(true, deadline); err != nil {
			return total, err
		}
	}
}

// wait waits until the socket has input (or room for output, if write),
// is shut down (wake, abort), or deadline passes (os.ErrDeadlineExceeded;
// the zero time: no deadline). It may return early: the caller tries
// again.
func (ls *loopSock) wait(write bool, deadline time.Time) error {
	ms := -1
	if !deadline.IsZero() {
		d := time.Until(deadline)
		if d <= 0 {
			return os.ErrDeadlineExceeded
		}
		ms = int((d + time.Millisecond - 1) / time.Millisecond)
	}
	select {
	case ls.lp.s.pollSlots <- struct{}{}:
		defer func() { <-ls.lp.s.pollSlots }()
		return epoll.Poll(ls.fd, write, ms)
	default:
		return ls.waitInLoop(write, deadline)
	}
}

// waitInLoop waits as wait does, in the loop's epoll set: the loop
// signals ready when it sees the socket ready (eventLoop.ready).
func (ls *loopSock) waitInLoop(write bool, deadline time.Time) error {
	c := ls.c
	c.mu.Lock()
	var err error
	if write {
		err = ls.lp.set.AddOutput(ls.fd, ls.id)
	} else {
		err = ls.lp.set.Add(ls.fd, ls.id)
	}
	c.mu.waiting = err == nil
	c.mu.Unlock()
	if err != nil {
		return err
	}
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ls.ready:
	case <-timeout:
	}
	c.mu.Lock()
	if c.mu.waiting {
		c.mu.waiting = false
		ls.lp.set.Remove(ls.fd)
	}
	c.mu.Unlock()
	return nil
}

// signal wakes the goroutine in waitInLoop, or the next one to wait there.
func (ls *loopSock) signal() {
	select {
	case ls.ready <- struct{}{}:
	default:
	}
}

// wake makes a read under way, and every later one, fail (it shuts the
// socket down for reading), and has the loop close the connection if it
// is parked.
func (ls *loopSock) wake() {
	ls.woken.Store(true)
	ls.shutdown(true, false)
	ls.signal()
	ls.lp.closeIfParked(ls.c)
}

// abort makes every read and write fail, and shuts the socket down.
func (ls *loopSock) abort() {
	ls.aborted.Store(true)
	ls.shutdown(true, true)
	ls.signal()
}

func (ls *loopSock) dedicated() bool { return false }

// shutdown shuts the socket down for reading, writing or both, unless it
// was closed.
func (ls *loopSock) shutdown(read, write bool) error {
	ls.fdMu.Lock()
	defer ls.fdMu.Unlock()
	if ls.fdMu.closed {
		return net.ErrClosed
	}
	return epoll.Shutdown(ls.fd, read, write)
}

// close closes the socket (once).
func (ls *loopSock) close() {
	ls.fdMu.Lock()
	defer ls.fdMu.Unlock()
	if !ls.fdMu.closed {
		ls.fdMu.closed = true
		epoll.Close(ls.fd)
	}
}

// attachLoopLocked makes c a connection of the loop with the fewest
// connections, starting the loops on first use; it reports false if c
// cannot be served by one (not a socket, or no epoll here). s.mu is held.
func (s *Server) attachLoopLocked(c *conn) bool {
	if _, ok := epoll.FD(c.nc); !ok || !s.startLoopsLocked() {
		return false
	}
	fd, err := epoll.Detach(c.nc)
	if err != nil {
		return false
	}
	l := s.loops[0]
	for _, x := range s.loops[1:] {
		if x.count() < l.count() {
			l = x
		}
	}
	ls := &loopSock{fd: fd, lp: l, c: c, ready: make(chan struct{}, 1)}
	l.mu.Lock()
	l.mu.nextID++
	ls.id = l.mu.nextID
	l.mu.conns[ls.id] = c
	l.mu.Unlock()
	c.sock, c.loop = ls, ls
	return true
}

// startLoopsLocked starts Config.EventLoops loops unless they run, and
// reports whether they do. If the system refuses, connections are served
// without loops (logged once). s.mu is held and the server is not closing.
func (s *Server) startLoopsLocked() bool {
	if s.loops != nil || s.loopsFailed {
		return s.loops != nil
	}
	loops := make([]*eventLoop, 0, s.cfg.EventLoops)
	for range s.cfg.EventLoops {
		l, err := newEventLoop(s)
		if err != nil {
			for _, l := range loops {
				l.set.Close()
			}
			s.loopsFailed = true
			s.log.Info("memcache: connections are served without event loops", "err", err)
			return false
		}
		loops = append(loops, l)
	}
	s.loops = loops
	for _, l := range loops {
		s.goLocked(l.run)
	}
	return true
}

func (l *eventLoop) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.conns)
}

// release forgets c, which has been closed.
func (l *eventLoop) release(c *conn) {
	l.mu.Lock()
	delete(l.mu.conns, c.loop.id)
	last := len(l.mu.conns) == 0
	l.mu.Unlock()
	if last && l.s.closing.Load() {
		l.set.Wake() // the loop may end
	}
}

// closeIfParked has the loop close c if it is parked (shutdown or
// eviction); c.mu is held.
func (l *eventLoop) closeIfParked(c *conn) {
	l.mu.Lock()
	l.mu.woken = append(l.mu.woken, c)
	l.mu.Unlock()
	l.set.Wake()
}

// run is the loop's thread. It ends once the server is closing and every
// connection of the loop is gone.
func (l *eventLoop) run() {
	runtime.LockOSThread() // for good: the thread ends with the loop
	if err := setThreadSlice(readSlice); err != nil {
		l.s.refuseSlice(err)
	} else {
		l.s.sliceSet()
	}
	defer l.set.Close()
	ids := make([]uint64, 0, loopBatch)
	lastSweep := time.Now()
	for {
		var woken bool
		var err error
		ids, woken, err = l.set.Wait(ids[:0], loopSweepEvery)
		if err != nil {
			// Not expected of a valid epoll set; keep serving, slowly.
			l.s.log.Error("memcache: event loop wait failed", "err", err)
			time.Sleep(10 * time.Millisecond)
		}
		for _, id := range ids {
			l.mu.Lock()
			c := l.mu.conns[id]
			l.mu.Unlock()
			if c != nil {
				l.ready(c)
			}
		}
		closing := l.s.closing.Load()
		if woken || closing {
			l.closeWoken(closing)
		}
		if now := time.Now(); now.Sub(lastSweep) >= loopSweepEvery {
			lastSweep = now
			l.closeIdle(now)
		}
		if closing && l.count() == 0 {
			return
		}
	}
}

// ready serves c, which has input (or was closed by its peer).
func (l *eventLoop) ready(c *conn) {
	c.mu.Lock()
	if !c.mu.parked {
		if c.mu.waiting { // its goroutine waits in the loop for this
			c.mu.waiting = false
			l.set.Remove(c.loop.fd)
			c.loop.signal()
		}
		c.mu.Unlock() // or an event from before it was handed off
		return
	}
	if c.mu.evicted || l.s.closing.Load() {
		c.mu.Unlock()
		l.closeParked(c)
		return
	}
	// c stays idle, and can be evicted, until serveParked reads a request:
	// an event with nothing to read leaves it waiting since it did.
	c.mu.Unlock()

	switch c.serveParked() {
	case stayParked:
		c.mu.Lock()
		gone := c.mu.evicted || l.s.closing.Load()
		if !gone && !c.mu.idle { // it served requests and waits again
			c.mu.idle = true
			c.mu.idleSince = time.Now()
		}
		c.mu.Unlock()
		if gone {
			l.closeParked(c)
		}
	case handOff:
		l.s.m.loopHandoffsTotal.Inc()
		c.mu.Lock()
		c.mu.parked = false
		l.set.Remove(c.loop.fd)
		c.mu.Unlock()
		// The loop's own goroutine is counted in s.wg, so this Add cannot
		// race with Shutdown's Wait seeing zero.
		l.s.wg.Add(1)
		go func() {
			defer l.s.wg.Done()
			c.serve()
		}()
	case closeConn:
		l.closeParked(c)
	}
}

// closeParked closes c, which the loop owns.
func (l *eventLoop) closeParked(c *conn) {
	c.mu.Lock()
	c.mu.parked, c.mu.idle = false, false
	l.set.Remove(c.loop.fd)
	c.mu.Unlock()
	c.finish()
}

// closeWoken closes the parked connections that Shutdown or an eviction
// woke, or, when the server is closing, every parked one.
func (l *eventLoop) closeWoken(all bool) {
	l.mu.Lock()
	var cs []*conn
	if all {
		for _, c := range l.mu.conns {
			cs = append(cs, c)
		}
	} else {
		cs = l.mu.woken
	}
	l.mu.woken = nil
	l.mu.Unlock()
	for _, c := range cs {
		c.mu.Lock()
		take := c.mu.parked && (c.mu.evicted || l.s.closing.Load())
		c.mu.Unlock()
		if take {
			l.closeParked(c)
		}
	}
}

// closeIdle closes the parked connections that waited longer than
// Config.IdleTimeout for a request.
func (l *eventLoop) closeIdle(now time.Time) {
	l.mu.Lock()
	var cs []*conn
	for _, c := range l.mu.conns {
		cs = append(cs, c)
	}
	l.mu.Unlock()
	for _, c := range cs {
		c.mu.Lock()
		take := c.mu.parked && c.mu.idle && now.Sub(c.mu.idleSince) >= l.s.cfg.IdleTimeout
		c.mu.Unlock()
		if take {
			c.debug("memcache: connection closed", "reason", errIdle.Error())
			l.closeParked(c)
		}
	}
}

// park puts c, which has nothing buffered and is idle (see lingerRead),
// back in its loop; it keeps waiting since it began to (c.mu.idleSince).
// It reports false if c must be closed instead (the server is closing, c
// was evicted, or the socket cannot be watched).
func (l *eventLoop) park(c *conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.evicted || l.s.closing.Load() {
		c.mu.idle = false
		return false
	}
	if err := l.set.Add(c.loop.fd, c.loop.id); err != nil {
		c.debug("memcache: connection closed", "reason", err.Error())
		c.mu.idle = false
		return false
	}
	c.mu.parked = true
	return true
}

// What the loop does with a connection after serving what it read.
type parkedNext int

const (
	stayParked parkedNext = iota
	handOff
	closeConn
)

// serveParked reads what arrived for a parked connection and serves the
// whole get and gets requests at its front on the loop's thread; see
// eventLoop.
func (c *conn) serveParked() parkedNext {
	c.r, c.w = 0, 0
	if len(c.buf) > retainBufBytes {
		c.buf = make([]byte, initialBufBytes)
	}
	n, err := epoll.Read(c.loop.fd, c.buf)
	switch {
	case err == epoll.ErrWouldBlock:
		return stayParked
	case err != nil:
		c.debug("memcache: connection closed", "reason", err.Error())
		return closeConn
	case n == 0: // the client closed
		return closeConn
	}
	c.w = n
	c.setIdle(false)
	for c.r < c.w {
		c.beginRequest(time.Now())
		if c.buf[c.r] == binReqMagic {
			return handOff
		}
		i := bytes.IndexByte(c.buf[c.r:c.w], '\n')
		if i < 0 || i+1 > c.s.cfg.MaxLineBytes {
			return handOff // not whole yet, or too long: conn.serve says so
		}
		line := c.buf[c.r : c.r+i]
		if k := len(line); k > 0 && line[k-1] == '\r' {
			line = line[:k-1]
		}
		if !isGetLine(line) {
			return handOff
		}
		perr := parseRequest(line, c.s.lim, &c.req)
		if perr != nil || (c.req.cmd != cmdGet && c.req.cmd != cmdGets) {
			return handOff
		}
		c.r += i + 1
		c.dispatch(nil)
		if len(c.out) >= flushBytes && !c.flushNow() {
			return handOff
		}
	}
	c.inRequest = false
	if !c.flushNow() {
		return handOff
	}
	if c.writeErr != nil {
		return closeConn
	}
	return stayParked
}

// isGetLine reports whether line starts with get or gets and a space.
func isGetLine(line []byte) bool {
	return bytes.HasPrefix(line, []byte("get ")) || bytes.HasPrefix(line, []byte("gets "))
}

// flushNow writes what the socket takes of the pending replies without
// waiting. It reports false if some are left (they are written by
// conn.serve) or the write failed (c.writeErr).
func (c *conn) flushNow() bool {
	if c.writeErr != nil || len(c.out) == 0 {
		return true
	}
	n, err := epoll.Write(c.loop.fd, c.out)
	c.out = c.out[:copy(c.out, c.out[n:])]
	if err == epoll.ErrWouldBlock {
		return false
	}
	if err != nil {
		c.writeErr = err
		return true
	}
	if cap(c.out) > retainBufBytes {
		c.out = make([]byte, 0, initialBufBytes)
	}
	return true
}
