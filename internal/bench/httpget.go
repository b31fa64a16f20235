package bench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
)

// The readlat reader can read through the qs HTTP API instead of memcached
// (--readlat-via http), on the same kind of connection: one request at a
// time on a keep-alive HTTP/1.1 connection, parsed by hand so that the
// reader allocates nothing per request and runs on its own thread like the
// memcached reader. Only what `GET /v1/{db}/keys/{key}` answers is
// understood: a status line, headers with Content-Length, and the body.

// maxHTTPBody is the largest answer body read: a value (at most
// maxValueSize) or an error message.
const maxHTTPBody = 1 << 20

// httpGetRequest is the request for key of database db.
func httpGetRequest(host, db, key string) []byte {
	return []byte("GET /v1/" + url.PathEscape(db) + "/keys/" + url.PathEscape(key) + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
}

// httpGetOne sends req (from httpGetRequest) and reads the answer: the
// value (valid until the next call) and true for 200, false for 404.
func (c *mcConn) httpGetOne(req []byte) (value []byte, found bool, err error) {
	if _, err := c.w.Write(req); err != nil {
		c.broken = true
		return nil, false, err
	}
	if err := c.w.Flush(); err != nil {
		c.broken = true
		return nil, false, err
	}
	status, n, err := c.readHTTPHead()
	if err == nil {
		value, err = c.readBody(n)
	}
	if err != nil {
		c.broken = true
		return nil, false, err
	}
	switch status {
	case 200:
		return value, true, nil
	case 404:
		return nil, false, nil
	}
	return nil, false, &HTTPError{Status: status, Body: string(value[:min(len(value), 200)])}
}

// readHTTPHead reads a status line and headers, and returns the status
// and the body's length.
func (c *mcConn) readHTTPHead() (status, length int, err error) {
	line, err := c.readLine()
	if err != nil {
		return 0, 0, err
	}
	rest, ok := bytes.CutPrefix(line, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 3 {
		return 0, 0, protoErr("not an HTTP/1.1 status line", line)
	}
	v, ok := parseUint(rest[:3], 16)
	if !ok {
		return 0, 0, protoErr("bad HTTP status", line)
	}
	status, length = int(v), -1
	for {
		line, err := c.readLine()
		if err != nil {
			return 0, 0, err
		}
		if len(line) == 0 {
			break
		}
		name, val, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, 0, protoErr("bad HTTP header", line)
		}
		val = bytes.TrimSpace(val)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.Atoi(string(val))
			if err != nil || n < 0 {
				return 0, 0, protoErr("bad Content-Length", line)
			}
			if n > maxHTTPBody {
				return 0, 0, protoErr("Content-Length over the limit of "+strconv.Itoa(maxHTTPBody), line)
			}
			length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, 0, protoErr("chunked answers are not read", line)
		}
	}
	if length < 0 {
		return 0, 0, fmt.Errorf("%w: HTTP answer without Content-Length", ErrProtocol)
	}
	return status, length, nil
}

// readBody reads a body of n bytes.
func (c *mcConn) readBody(n int) ([]byte, error) {
	if cap(c.val) < n {
		c.val = make([]byte, n)
	}
	b := c.val[:n]
	if _, err := io.ReadFull(c.r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}
