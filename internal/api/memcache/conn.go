package memcache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// conn is one client connection. Apart from mu, its fields belong to the
// goroutine running serve.
type conn struct {
	s    *Server
	m    *Metrics // s.m, one load closer on the request path
	nc   net.Conn
	sock sock // how nc is read and written
	// loop is sock when the connection belongs to an event loop (loop.go).
	loop *loopSock
	// Nice values of a dedicated thread: the one it started with and the
	// one in force (see prioritize).
	baseNice, nice int

	// Input: buf[r:w] was received and not yet consumed. Request lines and
	// data blocks are handed out as subslices of buf, valid until the next
	// read.
	buf  []byte
	r, w int
	// Output: replies not yet written. Replies are only ever appended whole,
	// so every write ends at a reply boundary.
	out      []byte
	writeErr error

	req    request
	key    []byte // a set's key, copied because reading the data block may move buf
	rawKey []byte // a meta request's key as sent, copied for the same reason
	opaque []byte // a meta request's O token, likewise
	oneKey [1][]byte
	cur    []byte // the value lookup read
	// lookup's result besides cur, and its callback (c.lookupFound).
	curIndex uint64
	curAttrs Attrs
	curFound bool
	foundCur func(key, value []byte, index uint64, a Attrs)
	next     []byte // the value a read-modify-write command writes
	noreply  bool   // the current request asked for no reply
	linger   bool   // close after an error reply: half-close and drain first

	// The current request.
	inRequest bool      // its first byte arrived
	reqStart  time.Time // when it did

	// The get being served. found is c.foundValue, bound once so that a get
	// does not allocate a closure.
	found       func(key, value []byte, index uint64, a Attrs)
	getActive   bool
	getCAS      bool
	getMark     int // len(out) before the get's reply
	getHits     int
	getOverflow bool

	mu struct {
		sync.Mutex
		idle      bool      // blocked waiting for the first byte of a request
		idleSince time.Time // when it began waiting
		evicted   bool      // closed to make room for a new connection
		parked    bool      // waiting in its event loop, which owns it
		// waiting: its goroutine waits in its event loop's epoll set
		// (loopSock.waitInLoop).
		waiting bool
	}
}

// Internal read outcomes that end a connection.
var (
	errIdle           = errors.New("idle timeout")
	errShutdown       = errors.New("server shutting down")
	errRequestTimeout = errors.New("request timeout")
)

// valueOverhead bounds the bytes a VALUE reply adds to its key and value:
// "VALUE ", " 0 ", the length, " <cas>", two CRLFs and the final END.
const valueOverhead = 64

// newConn returns a connection served through sk (nil: the network
// poller).
func newConn(s *Server, nc net.Conn, sk sock) *conn {
	if sk == nil {
		sk = &pollSock{nc: nc}
	}
	c := &conn{
		s:    s,
		m:    s.m,
		nc:   nc,
		sock: sk,
		buf:  make([]byte, initialBufBytes),
		out:  make([]byte, 0, initialBufBytes),
	}
	c.found = c.foundValue
	c.foundCur = c.lookupFound
	return c
}

// serve reads and answers requests until the connection ends, or, for a
// connection of an event loop, until it has nothing buffered and is parked
// in its loop again.
func (c *conn) serve() {
	if c.sock.dedicated() {
		c.takeThread()
	}
	if !c.serveUntilParked() {
		c.finish()
	}
}

// serveUntilParked is serve's loop; it reports true if the connection was
// parked in its event loop (which then owns it), false if it must be
// finished.
func (c *conn) serveUntilParked() bool {
	for {
		if c.s.closing.Load() {
			// Between requests: pipelined ones not yet started are
			// dropped. This also covers a set given up at a forced
			// shutdown (its context is canceled only once closing is
			// set): the store may still read that value from c.buf, so
			// nothing more may be read into it or moved within it.
			return false
		}
		c.inRequest = false
		if c.r < c.w {
			c.beginRequest(time.Now())
		} else {
			c.r, c.w = 0, 0
			if len(c.buf) > retainBufBytes {
				c.buf = make([]byte, initialBufBytes)
			}
			if c.loop != nil {
				// Wait in the loop, not on this goroutine, unless the
				// next request comes soon (see handoffLinger).
				if c.flush() != nil {
					return false
				}
				switch err := c.lingerRead(); {
				case errors.Is(err, os.ErrDeadlineExceeded):
					if testHookBeforePark != nil {
						testHookBeforePark(c)
					}
					return c.loop.lp.park(c)
				case err != nil:
					c.readFailed(err)
					return false
				}
			}
		}
		for c.r == c.w {
			if err := c.fill(); err != nil {
				c.readFailed(err)
				return false
			}
		}
		if c.buf[c.r] == binReqMagic {
			if !c.binary() {
				return false
			}
		} else {
			line, err := c.readLine()
			if err != nil {
				c.readFailed(err)
				return false
			}
			if !c.handle(line) {
				return false
			}
		}
		if len(c.out) >= flushBytes && c.flush() != nil {
			return false
		}
	}
}

// finish writes what is pending, closes the socket and forgets c.
func (c *conn) finish() {
	c.flush()
	if c.linger && c.writeErr == nil {
		c.drain()
	}
	c.closeSocket()
	c.s.unregister(c)
}

// closeSocket closes the connection's socket: its event loop's descriptor
// if it has one (nc is closed already), or nc.
func (c *conn) closeSocket() {
	if c.loop != nil {
		c.loop.close()
		return
	}
	c.nc.Close()
}

// closeWrite half-closes the socket; false if it cannot.
func (c *conn) closeWrite() bool {
	if c.loop != nil {
		return c.loop.shutdown(false, true) == nil
	}
	cw, ok := c.nc.(interface{ CloseWrite() error })
	return ok && cw.CloseWrite() == nil
}

// drain half-closes the socket and reads what the client still sends for a
// short while, so that a reset does not destroy the error reply just sent.
func (c *conn) drain() {
	if c.s.ctx.Err() != nil || !c.closeWrite() {
		return
	}
	deadline := time.Now().Add(lingerTimeout)
	buf := c.buf[:cap(c.buf)]
	for total := 0; total < lingerBytes; {
		n, err := c.sock.read(buf, deadline)
		total += n
		if err != nil {
			return
		}
	}
}

func (c *conn) beginRequest(now time.Time) {
	c.inRequest = true
	c.reqStart = now
}

// handle serves one request line; it reports whether to keep the
// connection open.
func (c *conn) handle(line []byte) bool {
	return c.dispatch(parseRequest(line, c.s.lim, &c.req))
}

// dispatch serves the request parsed into c.req (perr: why it was
// refused); it reports whether to keep the connection open.
func (c *conn) dispatch(perr *protoError) bool {
	req := &c.req
	if c.s.cfg.ReadNice != 0 && c.sock.dedicated() {
		c.prioritize(req.cmd, perr == nil)
	}
	c.noreply = req.noreply
	keep := true
	if perr != nil {
		keep = c.refuse(perr)
	} else {
		switch req.cmd {
		case cmdGet, cmdGets:
			c.get(req.keys, req.cmd == cmdGets)
		case cmdGat, cmdGats:
			keep = c.gat(req)
		case cmdSet, cmdAdd, cmdReplace, cmdAppend, cmdPrepend, cmdCas:
			keep = c.storage(req)
		case cmdDelete:
			keep = c.delete(req.key)
		case cmdIncr, cmdDecr, cmdTouch:
			keep = c.keyCommand(req)
		case cmdFlushAll:
			keep = c.flushAll()
		case cmdVersion:
			c.out = append(c.out, c.s.versionLine...)
		case cmdStats:
			c.out = c.s.statLines(c.out)
		case cmdNoop:
			c.out = append(c.out, "MN\r\n"...)
		case cmdMetaGet, cmdMetaSet, cmdMetaDelete, cmdMetaArith:
			keep = c.meta(req)
		case cmdQuit:
			keep = false
		}
	}
	c.m.requestsByCmd[req.cmd].Inc()
	c.m.secondsByCmd[req.cmd].Observe(time.Since(c.reqStart).Seconds())
	c.noreply = false
	return keep
}

// refuse answers a request the parser refused and skips its data block, or
// closes the connection when the stream cannot be followed any more.
func (c *conn) refuse(pe *protoError) bool {
	c.m.errorsByKind[pe.kind].Inc()
	c.debug("memcache: request refused", "cmd", c.req.cmd.String(), "reply", pe.msg)
	n := c.req.dataLen
	if pe.close || (n >= 0 && n+2 > c.s.cfg.MaxSwallowBytes) {
		c.noreply = false // the client must learn why the connection ends
		c.linger = true
		c.replyLine(pe.msg)
		return false
	}
	c.replyLine(pe.msg)
	if n >= 0 {
		if err := c.discard(n + 2); err != nil {
			c.readFailed(err)
			return false
		}
	}
	return true
}

// get serves get and gets. The whole reply is built in c.out and cut away
// again if the read fails, so a failed read never sends part of its values.
func (c *conn) get(keys [][]byte, cas bool) {
	c.getActive, c.getCAS, c.getMark, c.getHits, c.getOverflow = true, cas, len(c.out), 0, false
	_, err := c.s.b.Get(keys, c.found)
	c.getActive = false
	if err != nil {
		c.out = c.out[:c.getMark]
		c.backendFailed(err)
		return
	}
	if c.getOverflow {
		c.out = c.out[:c.getMark]
		c.m.errorsByKind[kindReplyTooLarge].Inc()
		c.replyLine("SERVER_ERROR reply too large: ask for fewer keys per request")
		return
	}
	hits := uint64(min(c.getHits, len(keys)))
	misses := uint64(len(keys)) - hits
	c.s.stats.getHits.Add(hits)
	c.s.stats.getMisses.Add(misses)
	c.m.getHitsTotal.Add(float64(hits))
	c.m.getMissesTotal.Add(float64(misses))
	c.out = append(c.out, "END\r\n"...)
}

// foundValue is the Backend's found callback: it appends one VALUE reply.
func (c *conn) foundValue(key, value []byte, index uint64, a Attrs) {
	if !c.getActive {
		return // called after Get returned: a Backend bug, ignored
	}
	c.getHits++
	if c.getOverflow {
		return
	}
	if len(c.out)-c.getMark+len(key)+len(value)+valueOverhead > c.s.cfg.MaxReplyBytes {
		c.getOverflow = true
		return
	}
	out := append(c.out, "VALUE "...)
	out = append(out, key...)
	out = append(out, ' ')
	out = strconv.AppendUint(out, uint64(a.Flags), 10)
	out = append(out, ' ')
	out = strconv.AppendInt(out, int64(len(value)), 10)
	if c.getCAS {
		out = append(out, ' ')
		out = strconv.AppendUint(out, index, 10)
	}
	out = append(out, "\r\n"...)
	out = append(out, value...)
	c.out = append(out, "\r\n"...)
}

func (c *conn) backendFailed(err error) {
	kind, line := backendFailure(err)
	c.m.errorsByKind[kind].Inc()
	level := slog.LevelDebug
	if kind == kindBackendCorrupt {
		level = slog.LevelError
	}
	if c.s.log.Enabled(context.Background(), level) {
		c.s.log.Log(context.Background(), level, "memcache: backend error",
			"cmd", c.req.cmd.String(), "remote", remoteAddr(c.nc), "err", err)
	}
	c.replyLine(line)
}

// readFailed accounts for a read that ended the connection.
func (c *conn) readFailed(err error) {
	if pe, ok := err.(*protoError); ok { // line too long
		c.m.errorsByKind[pe.kind].Inc()
		c.debug("memcache: request refused", "reply", pe.msg)
		c.noreply = false
		c.linger = true
		c.replyLine(pe.msg)
		return
	}
	if err == errRequestTimeout {
		c.m.errorsByKind[kindTimeout].Inc()
	}
	c.debug("memcache: connection closed", "reason", err.Error())
}

func (c *conn) debug(msg string, args ...any) {
	if c.s.log.Enabled(context.Background(), slog.LevelDebug) {
		c.s.log.Debug(msg, append(args, "remote", remoteAddr(c.nc))...)
	}
}

// replyLine appends line and its terminator unless the request asked for
// no reply.
func (c *conn) replyLine(line string) {
	if c.noreply {
		return
	}
	c.out = append(c.out, line...)
	c.out = append(c.out, "\r\n"...)
}

// flush writes the pending replies. After a failed write the connection is
// dead and every later flush fails.
func (c *conn) flush() error {
	if c.writeErr != nil || len(c.out) == 0 {
		return c.writeErr
	}
	_, err := c.sock.write(c.out, time.Now().Add(c.s.cfg.WriteTimeout))
	if cap(c.out) > retainBufBytes {
		c.out = make([]byte, 0, initialBufBytes)
	} else {
		c.out = c.out[:0]
	}
	if err != nil {
		c.writeErr = err
		if errors.Is(err, os.ErrDeadlineExceeded) {
			c.m.errorsByKind[kindTimeout].Inc()
		}
	}
	return err
}

// readLine returns the next request line without its terminator ("\r\n" or
// "\n"), or errLineTooLong.
func (c *conn) readLine() ([]byte, error) {
	limit := c.s.cfg.MaxLineBytes
	scanned := 0 // bytes after c.r known to hold no '\n'
	for {
		if i := bytes.IndexByte(c.buf[c.r+scanned:c.w], '\n'); i >= 0 {
			end := c.r + scanned + i
			if end+1-c.r > limit {
				return nil, errLineTooLong
			}
			line := c.buf[c.r:end]
			c.r = end + 1
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			return line, nil
		}
		scanned = c.w - c.r
		if scanned >= limit {
			return nil, errLineTooLong
		}
		if c.w == len(c.buf) {
			c.makeRoom(limit)
		}
		if err := c.fill(); err != nil {
			return nil, err
		}
	}
}

// makeRoom moves the unread input to the front of buf and, if buf is still
// full, grows it towards limit (which exceeds the unread input).
func (c *conn) makeRoom(limit int) {
	if c.r > 0 {
		c.w = copy(c.buf, c.buf[c.r:c.w])
		c.r = 0
	}
	if c.w < len(c.buf) {
		return
	}
	nb := make([]byte, min(2*len(c.buf), limit))
	copy(nb, c.buf[:c.w])
	c.buf = nb
}

// readFull returns the next n bytes of input.
func (c *conn) readFull(n int) ([]byte, error) {
	if len(c.buf)-c.r < n {
		if c.r > 0 {
			c.w = copy(c.buf, c.buf[c.r:c.w])
			c.r = 0
		}
		if len(c.buf) < n {
			// Room for the next request line too, so that a client
			// sending blocks of this size does not make every request
			// move its block to the front of the buffer.
			nb := make([]byte, n+initialBufBytes)
			copy(nb, c.buf[:c.w])
			c.buf = nb
		}
	}
	for c.w-c.r < n {
		if err := c.fill(); err != nil {
			return nil, err
		}
	}
	p := c.buf[c.r : c.r+n]
	c.r += n
	return p, nil
}

// discard skips the next n bytes of input.
func (c *conn) discard(n int) error {
	for {
		k := min(n, c.w-c.r)
		c.r += k
		n -= k
		if n == 0 {
			return nil
		}
		c.r, c.w = 0, 0
		if err := c.fill(); err != nil {
			return err
		}
	}
}

// fill writes the pending replies, then reads more input into buf[w:],
// which must not be empty. Waiting for the first byte of a request is
// bounded by IdleTimeout and interrupted by Shutdown; the rest of a request
// must arrive within RequestTimeout of its first byte.
func (c *conn) fill() error {
	if err := c.flush(); err != nil {
		return err
	}
	if !c.inRequest {
		if !c.setIdle(true) {
			return errShutdown // or evicted
		}
		n, err := c.sock.read(c.buf[c.w:], time.Now().Add(c.s.cfg.IdleTimeout))
		c.setIdle(false)
		if n > 0 {
			c.w += n
			c.beginRequest(time.Now())
			return nil
		}
		switch {
		case err == nil:
			return nil
		case c.s.closing.Load():
			return errShutdown // woken by Shutdown: a deadline or, on a dedicated thread, EOF
		case errors.Is(err, os.ErrDeadlineExceeded):
			return errIdle
		default:
			return err
		}
	}
	n, err := c.sock.read(c.buf[c.w:], c.reqStart.Add(c.s.cfg.RequestTimeout))
	c.w += n
	switch {
	case n > 0 || err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errRequestTimeout
	case err == io.EOF:
		return io.ErrUnexpectedEOF
	default:
		return err
	}
}

// lingerRead waits up to handoffLinger for the next request of a
// connection of an event loop that is served on a goroutine, and reads it
// into buf. It returns os.ErrDeadlineExceeded if none came: the connection
// is then left idle, still waiting for a request since lingerRead began,
// so that it can be evicted at every moment of its way back to the loop
// (the caller parks it, and park refuses a connection evicted meanwhile).
// It returns errShutdown if the server is closing or the connection was
// evicted meanwhile.
func (c *conn) lingerRead() error {
	if !c.setIdle(true) {
		return errShutdown // or evicted
	}
	n, err := c.sock.read(c.buf[c.w:], time.Now().Add(handoffLinger))
	if n > 0 {
		c.setIdle(false)
		c.w += n
		c.beginRequest(time.Now())
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.s.closing.Load() || c.mu.evicted:
		err = errShutdown
	case err == nil || errors.Is(err, os.ErrDeadlineExceeded):
		return os.ErrDeadlineExceeded // still idle
	}
	c.mu.idle = false
	return err
}

// testHookBeforePark, when set by a test, runs when a connection of an
// event loop that waited handoffLinger for a request in vain is about to
// park.
var testHookBeforePark func(c *conn)

// setIdle records whether the connection waits for a new request. Going
// idle fails once the server is shutting down. See wakeIfIdle for the
// other half.
func (c *conn) setIdle(idle bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if idle && (c.s.closing.Load() || c.mu.evicted) {
		return false
	}
	c.mu.idle = idle
	if idle {
		c.mu.idleSince = time.Now()
	}
	return true
}

// wakeIfIdle interrupts the read of an idle connection so that it notices
// the shutdown. A connection inside a request is left alone: it checks for
// shutdown before it goes idle again.
func (c *conn) wakeIfIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.idle {
		c.sock.wake()
	}
}

// evictIfIdle wakes c to close it if it waits for a request; it reports
// whether it did. c.s.mu is held.
func (c *conn) evictIfIdle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.mu.idle || c.mu.evicted {
		return false
	}
	c.mu.evicted = true
	c.sock.wake()
	return true
}

// idleSince returns when c began waiting for a request, and false if it
// is inside one (or already evicted).
func (c *conn) idleSince() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.idleSince, c.mu.idle && !c.mu.evicted
}

func (c *conn) wasEvicted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.evicted
}

// takeThread locks the goroutine to its thread for good (the thread ends
// with the goroutine, so what is set here never outlives the connection)
// and asks for short scheduling slices: see readSlice.
func (c *conn) takeThread() {
	runtime.LockOSThread()
	c.baseNice = threadNice()
	c.nice = c.baseNice
	if err := setThreadSlice(readSlice); err != nil {
		c.s.refuseSlice(err)
	} else {
		c.s.sliceSet()
	}
}

// prioritize gives a dedicated thread the nice value for the request it
// is about to serve: Config.ReadNice for a get or gets, its starting value
// for anything else, so that a connection that writes never outranks the
// commit it waits for. The nice value is changed only when it must be,
// one system call when a connection turns from reads to writes or back.
func (c *conn) prioritize(cmd command, parsed bool) {
	want := c.baseNice
	if parsed && (cmd == cmdGet || cmd == cmdGets) {
		want = min(c.baseNice, c.s.cfg.ReadNice)
	}
	if want == c.nice || c.s.niceRefused.Load() {
		return
	}
	if err := setThreadNice(want); err != nil {
		c.s.refuseNice(err)
		return
	}
	c.nice = want
	if want != c.baseNice {
		c.s.niceAllowed()
	}
}
