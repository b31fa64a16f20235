package httpapi

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

// Bounds on what one client can hold of the server: a request body must
// arrive within Config.BodyTimeout (else 408 request_timeout and the
// connection is closed), each piece of an answer must be taken by the
// client within Config.WriteTimeout (else the connection is closed), and
// scan and mget answers are streamed once they pass streamThreshold, so a
// client that does not read holds at most that much of the server's
// memory, not the whole answer.

// writePiece is how much of an answer one write deadline covers.
const writePiece = 256 << 10

// streamThreshold is the size up to which scan and mget answers are
// built whole (sent with Content-Length; an error before then is a clean
// error answer); beyond it they are streamed, and an error cuts the
// connection, so a client never mistakes part of an answer for all of it.
const streamThreshold = 1 << 20

// boundedWriter sets a write deadline for each piece of the answer: at
// every Write (an empty one included, so that even an empty answer leaves
// with a deadline of its own), every writePiece bytes within one Write, and
// at a WriteHeader that comes first. What the server flushes after the
// handler returned leaves under the deadline of the last piece, set when
// the handler wrote it.
type boundedWriter struct {
	http.ResponseWriter
	conn writeDeadliner // nil: not a connection (tests' recorders)
	h    *handler       // its WriteTimeout, and the metrics that count timeouts
	set  bool           // a deadline was set for this answer
}

// writeDeadliner is what net/http's response writer offers (and
// http.ResponseController uses) to bound the writes of the connection.
type writeDeadliner interface {
	SetWriteDeadline(time.Time) error
}

// connDeadlines finds the connection's write deadline through writers that
// wrap w, or returns nil.
func connDeadlines(w http.ResponseWriter) writeDeadliner {
	for range 16 { // wrappers are few; a cycle of Unwraps is not followed
		switch t := w.(type) {
		case writeDeadliner:
			return t
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

// arm gives the client a fresh WriteTimeout for the next piece.
func (b *boundedWriter) arm() {
	if b.conn != nil {
		b.conn.SetWriteDeadline(time.Now().Add(b.h.cfg.WriteTimeout))
	}
	b.set = true
}

func (b *boundedWriter) WriteHeader(status int) {
	if !b.set {
		b.arm()
	}
	b.ResponseWriter.WriteHeader(status)
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	n := 0
	for first := true; first || len(p) > 0; first = false {
		k := min(len(p), writePiece)
		b.arm()
		m, err := b.ResponseWriter.Write(p[:k])
		n += m
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				b.h.m.writeTimeouts.Inc()
			}
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// Unwrap lets http.ResponseController reach the connection.
func (b *boundedWriter) Unwrap() http.ResponseWriter { return b.ResponseWriter }

// Flush sends what is buffered, within the write deadline.
func (b *boundedWriter) Flush() {
	b.arm()
	http.NewResponseController(b.ResponseWriter).Flush()
}

// bound sets the deadlines of one request on its connection: the body
// must arrive within BodyTimeout, the answer's first piece be taken within
// WriteTimeout. The returned function, run once the handler returned,
// gives the rest of the answer (what the server flushes after the
// handler) a fresh WriteTimeout, and lifts the body deadline unless the
// body timed out (then the connection is closed, not drained).
func (h *handler) bound(w http.ResponseWriter, r *http.Request) func() {
	rc := http.NewResponseController(w)
	if rc.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout)) != nil {
		return func() {} // not a connection (tests' recorders)
	}
	var body *timedBody
	if r.Body != nil && r.Body != http.NoBody && rc.SetReadDeadline(time.Now().Add(h.cfg.BodyTimeout)) == nil {
		body = &timedBody{ReadCloser: r.Body}
		r.Body = body
	}
	return func() {
		rc.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
		if body != nil && !body.timedOut {
			rc.SetReadDeadline(time.Time{})
		}
	}
}

// timedBody notes whether reading the body hit its deadline.
type timedBody struct {
	io.ReadCloser
	timedOut bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && isTimeout(err) {
		b.timedOut = true
	}
	return n, err
}

// isTimeout reports whether a body read failed on its deadline.
func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// answer builds a scan or mget answer: in memory up to streamThreshold,
// streamed beyond.
type answer struct {
	w       http.ResponseWriter
	m       *Metrics
	applied uint64
	buf     []byte
	sent    int  // bytes sent before buf
	started bool // headers and part of the body are sent
}

// size is the answer's size so far.
func (a *answer) size() int { return a.sent + len(a.buf) }

// flushIfLarge streams what was built once it passes streamThreshold.
func (a *answer) flushIfLarge() error {
	if len(a.buf) < streamThreshold {
		return nil
	}
	if !a.started {
		h := a.w.Header()
		h["Content-Type"] = jsonContentType
		h["Qs-Applied-Index"] = []string{strconv.FormatUint(a.applied, 10)}
		a.w.WriteHeader(http.StatusOK)
		a.started = true
		a.m.answersStreamed.Inc()
	}
	_, err := a.w.Write(a.buf)
	a.sent += len(a.buf)
	a.buf = a.buf[:0]
	return err
}

// finish sends the rest; before streaming started, as one answer with
// its length.
func (a *answer) finish() int {
	if !a.started {
		return writeJSON(a.w, a.applied, a.buf)
	}
	a.w.Write(a.buf)
	return http.StatusOK
}

// abort ends a streamed answer that failed part way: the connection is
// cut so that the client sees an incomplete answer, never a short one.
func (a *answer) abort() {
	a.m.answersCut.Inc()
	panic(http.ErrAbortHandler)
}
