package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// The memcache client below is deliberately tiny: one buffered connection,
// one request in flight (or one pipelined burst while loading), no pooling,
// no allocation per request on the read path. What it measures is the
// server plus loopback TCP, and its own cost is plain to see.

// ErrProtocol means the server's reply did not follow the memcached text
// protocol. The connection is out of sync and is closed.
var ErrProtocol = errors.New("bench: malformed memcache reply")

// ReplyError is an error or refusal the server sent instead of the
// expected reply: ERROR, CLIENT_ERROR, SERVER_ERROR, NOT_STORED, EXISTS,
// NOT_FOUND.
type ReplyError struct {
	Kind string // "error", "client_error", "server_error", "not_stored", "exists", "not_found"
	Line string // the reply line, without CRLF
}

func (e *ReplyError) Error() string { return "memcache reply " + strconv.Quote(e.Line) }

// dialTimeout bounds connecting to a target.
var dialTimeout = 5 * time.Second

const (
	// maxReplyValue is the largest value a reply may announce before the
	// client treats the reply as garbage rather than allocate for it.
	maxReplyValue = 64 << 20
	// mcBufSize is the size of the read and write buffers; a reply line
	// longer than this is a protocol error.
	mcBufSize = 64 << 10
)

// mcConn is one memcached text-protocol connection (the readlat reader
// reading through HTTP uses one too: httpget.go). Not safe for
// concurrent use. After any method returns an error, broken says whether
// the connection may be out of sync; if so it must be closed.
type mcConn struct {
	conn   net.Conn
	r      *bufio.Reader
	w      *bufio.Writer
	val    []byte // value buffer, reused
	num    []byte // scratch for number formatting
	broken bool
}

func dialMC(ctx context.Context, addr string) (*mcConn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return newMCConn(c), nil
}

func newMCConn(c net.Conn) *mcConn {
	return &mcConn{
		conn: c,
		r:    bufio.NewReaderSize(c, mcBufSize),
		w:    bufio.NewWriterSize(c, mcBufSize),
	}
}

func (c *mcConn) Close() error { return c.conn.Close() }

// get sends one "get" for keys and calls fn for every value returned, with
// the index in keys of the key it belongs to. value is valid only during
// the call. It returns the number of values received. Keys must be valid
// memcache keys (no spaces or control characters, at most 250 bytes).
//
// The reply must be a sequence of VALUE blocks for requested keys, in
// request order as memcached sends them, followed by END.
func (c *mcConn) get(keys []string, fn func(i int, value []byte)) (int, error) {
	c.w.WriteString("get")
	for _, k := range keys {
		c.w.WriteByte(' ')
		c.w.WriteString(k)
	}
	c.w.WriteString("\r\n")
	if err := c.w.Flush(); err != nil {
		c.broken = true
		return 0, err
	}
	hits, next := 0, 0
	for {
		line, err := c.readLine()
		if err != nil {
			c.broken = true
			return hits, err
		}
		if string(line) == "END" {
			return hits, nil
		}
		rest, ok := bytes.CutPrefix(line, []byte("VALUE "))
		if !ok {
			// An error line in place of the whole reply ends it, as
			// memcached sends it; after values, the rest of the reply
			// cannot be trusted: start over on a new connection.
			err := replyError(line)
			if err == nil {
				err = protoErr("unexpected line in get reply", line)
			}
			c.broken = hits > 0 || errors.Is(err, ErrProtocol)
			return hits, err
		}
		key, n, err := parseValueLine(rest)
		if err != nil {
			c.broken = true
			return hits, err
		}
		i := findKey(keys, key, next)
		if i < 0 || hits == len(keys) {
			c.broken = true
			return hits, protoErr("VALUE for a key that was not requested", line)
		}
		next = i + 1
		v, err := c.readData(n)
		if err != nil {
			c.broken = true
			return hits, err
		}
		hits++
		fn(i, v)
	}
}

// getOne gets a single key. value is valid until the next call.
func (c *mcConn) getOne(key string) (value []byte, found bool, err error) {
	c.w.WriteString("get ")
	c.w.WriteString(key)
	c.w.WriteString("\r\n")
	if err := c.w.Flush(); err != nil {
		c.broken = true
		return nil, false, err
	}
	line, err := c.readLine()
	if err != nil {
		c.broken = true
		return nil, false, err
	}
	if string(line) == "END" {
		return nil, false, nil
	}
	rest, ok := bytes.CutPrefix(line, []byte("VALUE "))
	if !ok {
		// An error line in place of the reply ends it.
		if err := replyError(line); err != nil {
			return nil, false, err
		}
		c.broken = true
		return nil, false, protoErr("unexpected line in get reply", line)
	}
	k, n, err := parseValueLine(rest)
	if err == nil && string(k) != key {
		err = protoErr("VALUE for a key that was not requested", line)
	}
	if err == nil {
		value, err = c.readData(n)
	}
	if err == nil {
		line, err = c.readLine()
		if err == nil && string(line) != "END" {
			err = protoErr("want END after the value", line)
		}
	}
	if err != nil {
		c.broken = true
		return nil, false, err
	}
	return value, true, nil
}

// set stores value under key and waits for the reply. A refusal the
// server answers cleanly (SERVER_ERROR, NOT_STORED, ...) leaves the
// connection usable.
func (c *mcConn) set(key string, value []byte) error {
	c.writeSet(key, value)
	if err := c.w.Flush(); err != nil {
		c.broken = true
		return err
	}
	return c.readStored()
}

// setMany pipelines sets of keys[i] = values[i]: it writes them all, then
// reads every reply. It returns the first error.
func (c *mcConn) setMany(keys []string, values [][]byte) error {
	for i := range keys {
		c.writeSet(keys[i], values[i])
	}
	if err := c.w.Flush(); err != nil {
		c.broken = true
		return err
	}
	var first error
	for range keys {
		err := c.readStored()
		if c.broken {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

func (c *mcConn) writeSet(key string, value []byte) {
	c.w.WriteString("set ")
	c.w.WriteString(key)
	c.w.WriteString(" 0 0 ")
	c.num = strconv.AppendInt(c.num[:0], int64(len(value)), 10)
	c.w.Write(c.num)
	c.w.WriteString("\r\n")
	c.w.Write(value)
	c.w.WriteString("\r\n")
}

func (c *mcConn) readStored() error {
	line, err := c.readLine()
	if err != nil {
		c.broken = true
		return err
	}
	if string(line) == "STORED" {
		return nil
	}
	if err := replyError(line); err != nil {
		var re *ReplyError
		if errors.As(err, &re) && (re.Kind == "error" || re.Kind == "client_error") {
			// The server may not have consumed the data block.
			c.broken = true
		}
		return err
	}
	c.broken = true
	return protoErr("unexpected reply to set", line)
}

// version returns the server's answer to "version".
func (c *mcConn) version() (string, error) {
	c.w.WriteString("version\r\n")
	if err := c.w.Flush(); err != nil {
		c.broken = true
		return "", err
	}
	line, err := c.readLine()
	if err != nil {
		c.broken = true
		return "", err
	}
	if v, ok := bytes.CutPrefix(line, []byte("VERSION ")); ok {
		return string(v), nil
	}
	if err := replyError(line); err != nil {
		return "", err
	}
	c.broken = true
	return "", protoErr("unexpected reply to version", line)
}

// readLine returns the next line without its CRLF. The line is valid until
// the next read.
func (c *mcConn) readLine() ([]byte, error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: reply line longer than %d bytes", ErrProtocol, mcBufSize)
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, protoErr("reply line not terminated by CRLF", line)
	}
	return line[:len(line)-2], nil
}

// readData reads a data block of n bytes and its CRLF.
func (c *mcConn) readData(n int) ([]byte, error) {
	if cap(c.val) < n+2 {
		c.val = make([]byte, n+2)
	}
	b := c.val[:n+2]
	if _, err := io.ReadFull(c.r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if b[n] != '\r' || b[n+1] != '\n' {
		return nil, fmt.Errorf("%w: data block of %d bytes not followed by CRLF", ErrProtocol, n)
	}
	return b[:n], nil
}

// parseValueLine parses "<key> <flags> <bytes> [<cas>]", the part of a
// VALUE line after "VALUE ".
func parseValueLine(line []byte) (key []byte, n int, err error) {
	b := line
	f := [5][]byte{}
	nf := 0
	for len(b) > 0 && nf < len(f) {
		i := bytes.IndexByte(b, ' ')
		if i < 0 {
			f[nf], b = b, nil
		} else {
			f[nf], b = b[:i], b[i+1:]
		}
		if len(f[nf]) == 0 {
			return nil, 0, protoErr("empty field in VALUE line", line)
		}
		nf++
	}
	if len(b) > 0 || nf < 3 || nf > 4 {
		return nil, 0, protoErr("VALUE line needs key, flags, bytes and an optional cas", line)
	}
	if _, ok := parseUint(f[1], 32); !ok {
		return nil, 0, protoErr("bad flags in VALUE line", f[1])
	}
	size, ok := parseUint(f[2], 32)
	if !ok || size > maxReplyValue {
		return nil, 0, protoErr("bad byte count in VALUE line", f[2])
	}
	if nf == 4 {
		if _, ok := parseUint(f[3], 64); !ok {
			return nil, 0, protoErr("bad cas in VALUE line", f[3])
		}
	}
	return f[0], int(size), nil
}

// parseUint parses a decimal number of at most bits bits: digits only, no
// sign, no spaces.
func parseUint(b []byte, bits int) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		d := uint64(ch - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	if bits < 64 && n >= 1<<bits {
		return 0, false
	}
	return n, true
}

// findKey returns the index of key in keys, looking from start onwards
// first (replies come in request order), then from the beginning; -1 if
// absent.
func findKey(keys []string, key []byte, start int) int {
	for i := start; i < len(keys); i++ {
		if keys[i] == string(key) {
			return i
		}
	}
	for i := 0; i < start && i < len(keys); i++ {
		if keys[i] == string(key) {
			return i
		}
	}
	return -1
}

// replyError returns the ReplyError for an error or refusal line, or nil.
func replyError(line []byte) error {
	kinds := [...]struct{ prefix, kind string }{
		{"SERVER_ERROR", "server_error"},
		{"CLIENT_ERROR", "client_error"},
		{"ERROR", "error"},
		{"NOT_STORED", "not_stored"},
		{"EXISTS", "exists"},
		{"NOT_FOUND", "not_found"},
	}
	for _, k := range kinds {
		if rest, ok := bytes.CutPrefix(line, []byte(k.prefix)); ok && (len(rest) == 0 || rest[0] == ' ') {
			return &ReplyError{Kind: k.kind, Line: string(line)}
		}
	}
	return nil
}

func protoErr(what string, line []byte) error {
	const max = 80
	if len(line) > max {
		line = line[:max]
	}
	return fmt.Errorf("%w: %s: %q", ErrProtocol, what, line)
}
