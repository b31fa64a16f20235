package repl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// conn is one client stream, owned by its handle goroutine.
type conn struct {
	s   *Server
	c   net.Conn
	w   *bufio.Writer
	log *slog.Logger
	buf []byte
	// child is the database whose child slot this stream holds; "" if none.
	child string
	// root sends the root's addresses on a stream; nil if it sends none.
	root *rootSender
	// path sends this node's path on a stream; nil if it sends none.
	path *pathSender
}

// writePiece is how much of a message one write deadline covers.
const writePiece = 256 << 10

// send writes m. WriteTimeout bounds each piece of writePiece bytes, not
// the message: a large message crosses a slow link in as many timeouts as
// it needs while bytes move, and a client that stops reading is dropped
// after one.
func (cn *conn) send(m Message) error {
	var err error
	if cn.buf, err = AppendFrame(cn.buf[:0], m); err != nil {
		return err
	}
	for b := cn.buf; len(b) > 0; {
		n := min(len(b), writePiece)
		if err := cn.c.SetWriteDeadline(time.Now().Add(cn.s.cfg.WriteTimeout)); err != nil {
			return err
		}
		if _, err := cn.w.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	if cap(cn.buf) > 1<<20 {
		cn.buf = nil // do not pin a large batch buffer on an idle stream
	}
	if err := cn.c.SetWriteDeadline(time.Now().Add(cn.s.cfg.WriteTimeout)); err != nil {
		return err
	}
	return cn.w.Flush()
}

func (cn *conn) refuse(code RefuseCode, format string, args ...any) {
	reason := fmt.Sprintf(format, args...)
	cn.s.cfg.Metrics.refusals.WithLabelValues(code.String()).Inc()
	cn.log.Warn("refused replication client", "code", code.String(), "reason", reason)
	if err := cn.send(&Refuse{Code: code, Reason: reason}); err != nil {
		cn.log.Debug("cannot send refusal", "err", err)
	}
}

func (s *Server) handle(c net.Conn) {
	defer s.untrack(c)
	defer c.Close()
	cn := &conn{s: s, c: c, w: bufio.NewWriterSize(c, 64<<10), log: s.log.With("remote", c.RemoteAddr().String())}
	defer func() {
		if cn.child != "" {
			s.releaseChild(cn.child)
		}
	}()
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()

	c.SetReadDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	r := bufio.NewReader(c)
	m, err := ReadHello(r)
	if err != nil {
		if errors.Is(err, ErrMalformed) || errors.Is(err, ErrChecksum) {
			s.cfg.Metrics.refusals.WithLabelValues(RefuseBadHello.String()).Inc()
		}
		cn.log.Info("replication handshake failed", "err", err)
		return
	}
	hello, ok := m.(*Hello)
	if !ok {
		cn.refuse(RefuseBadHello, "first message is %s, want hello", m.Type())
		return
	}
	st, next, ok := cn.accept(hello)
	if !ok {
		return
	}
	if hello.Fetch {
		cn.log = cn.log.With("db", hello.Database, "client", hello.ProcessID.String())
		cn.serveFetch(ctx, r, st, hello)
		return
	}
	if hello.Prefetch {
		cn.log = cn.log.With("db", hello.Database, "client", hello.ProcessID.String())
		cn.servePrefetch(ctx, r, st, hello)
		return
	}
	if hello.Shard {
		cn.log = cn.log.With("db", hello.Database, "client", hello.ProcessID.String())
		if err := cn.send(&Node{Name: s.cfg.NodeName}); err != nil {
			return
		}
		cn.serveFetch(ctx, r, st, hello)
		return
	}
	// The client sends nothing after its Hello: anything it sends, or its
	// hanging up, ends the stream at once rather than at the next write.
	c.SetReadDeadline(time.Time{})
	// The reader has its own logger: cn.log belongs to this goroutine.
	log := cn.log.With("db", hello.Database, "client", hello.ProcessID.String())
	if !s.goTracked(func() {
		defer cancel()
		if hello.Version >= ReportVersion && !hello.Bootstrap {
			cn.readReports(r, hello, log)
			return
		}
		var b [1]byte
		if _, err := r.Read(b[:]); err == nil {
			log.Info("replication client sent data after hello; closing")
		}
	}) {
		return
	}
	cn.log = log
	if hello.Bootstrap {
		if err := cn.bootstrap(ctx, st, hello); err != nil && ctx.Err() == nil {
			cn.log.Info("bootstrap transfer ended", "err", err)
		}
		return
	}
	cn.log.Info("replication client connected", "from", next, "stop", hello.StopIndex)
	var heads HeadSource
	if hello.Version >= HeadVersion && s.cfg.Heads != nil {
		heads = s.cfg.Heads(hello.Database)
	}
	if hello.Version >= RootVersion && s.cfg.RootHTTP != nil {
		cn.root = &rootSender{addrs: func() []string { return s.cfg.RootHTTP(hello.Database) }}
	}
	if hello.Version >= PathVersion && s.cfg.Path != nil {
		if src := s.cfg.Path(hello.Database); src != nil {
			cn.path = &pathSender{src: src}
		}
	}
	if err := cn.stream(ctx, st, next, hello.StopIndex, heads, isChild(hello)); err != nil && ctx.Err() == nil {
		cn.log.Info("replication stream ended", "err", err)
	}
}

// accept validates the Hello and sends Welcome or Refuse. It returns the
// store and the first index to send.
func (cn *conn) accept(h *Hello) (*store.Store, uint64, bool) {
	s := cn.s
	if h.Version < MinProtocolVersion || h.Version > ProtocolVersion {
		cn.refuse(RefuseVersion, "protocol version %d not supported (server speaks %d..%d)", h.Version, MinProtocolVersion, ProtocolVersion)
		return nil, 0, false
	}
	if h.ProcessID == s.cfg.ProcessID {
		cn.refuse(RefuseSelf, "client process id %s is this server's own: a node cannot replicate from itself", h.ProcessID)
		return nil, 0, false
	}
	if s.ctx.Err() != nil {
		cn.refuse(RefuseShuttingDown, "server is shutting down")
		return nil, 0, false
	}
	st, ok := s.lookup(h.Database)
	if !ok {
		cn.refuse(RefuseUnknownDatabase, "no database %q on this server", h.Database)
		return nil, 0, false
	}
	if !h.DBID.IsZero() && h.DBID != st.DBID() {
		cn.refuse(RefuseWrongDBID, "database %q has id %s, client expects %s", h.Database, st.DBID(), h.DBID)
		return nil, 0, false
	}
	if st.IsProxy() && (h.Bootstrap || (h.Fetch && (s.cfg.Relay == nil || !s.cfg.Relay(h.Database)))) {
		cn.refuse(RefuseProxy, "database %q is a proxy here: it holds only part of the values; ask a full replica", h.Database)
		return nil, 0, false
	}
	if h.Prefetch && (s.cfg.Relay == nil || !s.cfg.Relay(h.Database)) {
		cn.refuse(RefuseBadRequest, "database %q has no prefetch stream here: this node is not one of its relays", h.Database)
		return nil, 0, false
	}
	if h.Shard && (!st.IsProxy() || s.cfg.NodeName == "") {
		cn.refuse(RefuseBadRequest, "database %q has no L2 shard here: this node is not a proxy with a node name", h.Database)
		return nil, 0, false
	}
	if (h.Fetch || h.Prefetch || h.Shard) && h.Version < FetchVersion {
		cn.refuse(RefuseVersion, "fetch connections need protocol version %d, client sent %d", FetchVersion, h.Version)
		return nil, 0, false
	}
	if h.Bootstrap {
		return st, 0, true // bootstrap sends its own Welcome
	}
	if isChild(h) {
		if s.cfg.AcceptChild != nil {
			if r := s.cfg.AcceptChild(h.Database, h.ProcessID); r != nil {
				cn.refuse(r.Code, "%s", r.Reason)
				return nil, 0, false
			}
		}
		if !s.takeChild(h.Database) {
			cn.refuse(RefuseFull, "database %q already streams to %d replicas here (max_children): choose another source", h.Database, s.cfg.MaxChildren)
			return nil, 0, false
		}
		cn.child = h.Database
	}
	lr, err := st.LogRange()
	if err != nil {
		cn.log.Error("cannot read log range", "db", h.Database, "err", err)
		return nil, 0, false
	}
	next := h.LastIndex + 1
	switch {
	case h.NewestOnly, h.Fetch, h.Prefetch, h.Shard:
		next = lr.Last + 1
	case h.LastIndex > lr.Last:
		cn.refuse(RefuseAhead, "client applied index %d is beyond this server's durable %d: ask again once it caught up", h.LastIndex, lr.Last)
		return nil, 0, false
	case next < lr.First:
		cn.refuse(RefuseLogTruncated, "client needs entry %d but the retained log starts at %d: bootstrap from a snapshot", next, lr.First)
		return nil, 0, false
	}
	w := &Welcome{Version: h.Version, ProcessID: s.cfg.ProcessID, DBID: st.DBID(),
		AppliedIndex: lr.Last, AppliedTime: st.AppliedTime().UnixNano(), LogFirst: lr.First, NextIndex: next}
	if st.AppliedTime().IsZero() {
		w.AppliedTime = 0
	}
	if err := cn.send(w); err != nil {
		cn.log.Info("cannot send welcome", "err", err)
		return nil, 0, false
	}
	return st, next, true
}
