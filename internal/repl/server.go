package repl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
	"golang.org/x/time/rate"
)

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("qs: replication server closed")

// ServerConfig configures a replication server. The zero value of every
// field means its default, filled in by EnsureDefaults.
type ServerConfig struct {
	// ProcessID identifies this process. Default DefaultProcessID.
	ProcessID ProcessID
	// MaxBatchEntries is the most entries in one Entries message.
	// Default 1000.
	MaxBatchEntries int
	// MaxBatchBytes is the entry body size after which an Entries message
	// is sent (one entry may exceed it). Default 4 MiB; at most MaxPayload/2.
	MaxBatchBytes int
	// ProgressInterval is how often an idle stream sends Progress.
	// Default 1s.
	ProgressInterval time.Duration
	// HandshakeTimeout bounds reading the Hello. Default 10s.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds each write of up to 256 KiB of a message (a
	// client that reads nothing for this long is dropped). Default 30s.
	WriteTimeout time.Duration
	// BootstrapRate caps the bytes per second of snapshot files sent, all
	// bootstraps together, so bootstrapping replicas cannot starve the
	// disk or the network of this server. 0: unlimited.
	BootstrapRate int64
	// SnapshotKeep is how long a snapshot is reused for new bootstraps and
	// kept after its last use so interrupted ones can resume. Default 10m.
	SnapshotKeep time.Duration
	// ChunkBytes is the size of the snapshot file chunks. Default 512 KiB.
	ChunkBytes int
	// FetchIdleTimeout closes a fetch connection that sent no request
	// for this long. Default 10m.
	FetchIdleTimeout time.Duration
	// AcceptChild, when set, is asked before the log stream of database
	// db to the replica of process client is accepted; a RefusedError
	// refuses it with its code (a replica that finds its sources through
	// the overlay takes no new child while it has no source itself, nor
	// one of its own ancestors). Default: accept.
	AcceptChild func(db string, client ProcessID) *RefusedError
	// Relay, when set, names the proxy databases this server is the
	// relay of: it answers their fetch connections (for the proxies of its
	// data centre) from its own cache, fetching the rest from its
	// replicas. Other proxy databases refuse fetches. Default: none.
	Relay func(db string) bool
	// MaxChildren caps the replicas streaming the log of one database
	// from this server at once (its children in the tree); one more is
	// refused "full". Connections that only watch the newest entries,
	// stop at an index, fetch values or bootstrap do not count. 0: no cap.
	MaxChildren int
	// Reports takes the reports of stream clients (report.go). Nil: they
	// are read and dropped.
	Reports ReportSink
	// ReportMinInterval: a client's report sooner than this after its
	// previous one is dropped. Default 500ms (clients report every 1s).
	ReportMinInterval time.Duration
	// Heads gives the signed heads sent with the log of database db to
	// clients of HeadVersion or later (heads.go). Nil: none are sent.
	Heads func(db string) HeadSource
	// NodeName is this node's name in its data centre, sent to the
	// clients of L2 connections (protocol_shard.go): it decides which
	// shard of the data centre's L2 cache the node owns. Empty: L2
	// connections are refused.
	NodeName string
	// RootHTTP gives the HTTP addresses where the writes of database db
	// are accepted, as this node knows them now, sent to stream clients
	// of RootVersion or later (protocol_root.go). Nil: none are sent.
	RootHTTP func(db string) []string
	// Metrics counts what the server does; the process gives all its
	// servers and replicas the one it registered. Default: a private
	// NewMetrics(), registered nowhere.
	Metrics *Metrics
}

// EnsureDefaults fills zero fields with their defaults and returns c.
func (c *ServerConfig) EnsureDefaults() *ServerConfig {
	if c.ProcessID.IsZero() {
		c.ProcessID = DefaultProcessID
	}
	if c.MaxBatchEntries == 0 {
		c.MaxBatchEntries = 1000
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = 4 << 20
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = time.Second
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.SnapshotKeep == 0 {
		c.SnapshotKeep = 10 * time.Minute
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = 512 << 10
	}
	if c.FetchIdleTimeout == 0 {
		c.FetchIdleTimeout = 10 * time.Minute
	}
	if c.ReportMinInterval == 0 {
		c.ReportMinInterval = 500 * time.Millisecond
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	return c
}

// Validate reports the first invalid field.
func (c *ServerConfig) Validate() error {
	switch {
	case c.MaxBatchEntries < 1:
		return fmt.Errorf("repl: MaxBatchEntries %d below 1", c.MaxBatchEntries)
	case c.MaxBatchBytes < 1 || c.MaxBatchBytes > MaxPayload/2:
		return fmt.Errorf("repl: MaxBatchBytes %d out of range 1..%d", c.MaxBatchBytes, MaxPayload/2)
	case c.ProgressInterval < time.Millisecond:
		return fmt.Errorf("repl: ProgressInterval %v below 1ms", c.ProgressInterval)
	case c.HandshakeTimeout < time.Millisecond:
		return fmt.Errorf("repl: HandshakeTimeout %v below 1ms", c.HandshakeTimeout)
	case c.WriteTimeout < time.Millisecond:
		return fmt.Errorf("repl: WriteTimeout %v below 1ms", c.WriteTimeout)
	case c.BootstrapRate < 0:
		return fmt.Errorf("repl: BootstrapRate %d is negative", c.BootstrapRate)
	case c.SnapshotKeep < time.Second:
		return fmt.Errorf("repl: SnapshotKeep %v below 1s", c.SnapshotKeep)
	case c.ChunkBytes < 1 || c.ChunkBytes > MaxPayload/2:
		return fmt.Errorf("repl: ChunkBytes %d out of range 1..%d", c.ChunkBytes, MaxPayload/2)
	case c.FetchIdleTimeout < time.Millisecond:
		return fmt.Errorf("repl: FetchIdleTimeout %v below 1ms", c.FetchIdleTimeout)
	case c.MaxChildren < 0:
		return fmt.Errorf("repl: MaxChildren %d is negative", c.MaxChildren)
	case len(c.NodeName) > MaxNodeName:
		return fmt.Errorf("repl: NodeName of %d bytes over %d", len(c.NodeName), MaxNodeName)
	}
	return nil
}

// Server serves the replication stream of the stores lookup finds.
type Server struct {
	cfg    ServerConfig
	lookup func(db string) (*store.Store, bool)
	log    *slog.Logger

	snaps *snapshotCache
	// sealRelays: the sealed bootstraps relayed now (seal_relay.go).
	sealRelays sealRelays
	// prefetch carries what a relay resolves to its subscribers.
	prefetch prefetchHub
	// limit paces snapshot bytes; nil when BootstrapRate is 0.
	limit *rate.Limiter

	ctx    context.Context // cancelled by Shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the server starts

	mu struct {
		sync.Mutex
		closed    bool
		listeners map[net.Listener]struct{}
		conns     map[net.Conn]struct{}
		children  map[string]int // log streams to replicas, by database
	}
}

// NewServer returns a server; cfg must be valid after EnsureDefaults.
func NewServer(cfg ServerConfig, lookup func(db string) (*store.Store, bool), log *slog.Logger) (*Server, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, lookup: lookup, log: log.With("component", "repl-server")}
	s.snaps = newSnapshotCache(cfg.SnapshotKeep, cfg.Metrics, s.log)
	s.prefetch.m = cfg.Metrics
	if cfg.BootstrapRate > 0 {
		s.limit = rate.NewLimiter(rate.Limit(cfg.BootstrapRate), max(cfg.ChunkBytes, int(min(cfg.BootstrapRate, MaxPayload/2))))
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.snaps.gc()
			case <-s.ctx.Done():
				return
			}
		}
	}()
	s.mu.listeners = make(map[net.Listener]struct{})
	s.mu.conns = make(map[net.Conn]struct{})
	s.mu.children = make(map[string]int)
	return s, nil
}

// Children is how many replicas stream database db from this server now.
func (s *Server) Children(db string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.children[db]
}

// isChild reports whether a Hello opens a replica's log stream: the
// connections that make a node a child of this one in the tree.
func isChild(h *Hello) bool {
	return !h.NewestOnly && !h.Fetch && !h.Prefetch && !h.Shard && !h.Bootstrap && h.StopIndex == 0
}

// takeChild reserves a child slot for db; false if the server is full.
func (s *Server) takeChild(db string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.MaxChildren > 0 && s.mu.children[db] >= s.cfg.MaxChildren {
		return false
	}
	s.mu.children[db]++
	return true
}

func (s *Server) releaseChild(db string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.children[db]--; s.mu.children[db] <= 0 {
		delete(s.mu.children, db)
	}
}

// ProcessID is the server's process id.
func (s *Server) ProcessID() ProcessID { return s.cfg.ProcessID }

// goTracked starts fn as a goroutine: every goroutine of the server starts here, so
// Shutdown can wait for all of them. It refuses once the server is closed.
func (s *Server) goTracked(fn func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn()
	}()
	return true
}

// Serve accepts connections on ln until Shutdown; it returns
// ErrServerClosed then, or the accept error that stopped it.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.mu.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.mu.listeners, ln)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.mu.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "delay", delay)
				select {
				case <-time.After(delay):
				case <-s.ctx.Done():
					return ErrServerClosed
				}
				continue
			}
			return fmt.Errorf("repl: accept: %w", err)
		}
		delay = 0
		if !s.track(c) {
			c.Close()
			return ErrServerClosed
		}
		if !s.goTracked(func() { s.handle(c) }) {
			s.untrack(c)
			c.Close()
			return ErrServerClosed
		}
	}
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return false
	}
	s.mu.conns[c] = struct{}{}
	s.cfg.Metrics.serverConns.Inc()
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.mu.conns[c]; ok {
		delete(s.mu.conns, c)
		s.cfg.Metrics.serverConns.Dec()
	}
}

// Shutdown stops accepting, closes every stream and waits for the server's
// goroutines, or for ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.cancel()
	s.mu.Lock()
	s.mu.closed = true
	for ln := range s.mu.listeners {
		ln.Close()
	}
	for c := range s.mu.conns {
		c.Close()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		s.snaps.removeAll()
		return nil
	case <-ctx.Done():
		return fmt.Errorf("repl: shutdown: %w", ctx.Err())
	}
}

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

// stream sends entries from next on, and Progress when idle, until ctx
// ends, a write fails or StopIndex is sent. With a head source, each batch
// is followed by the signed head of its last entry when there is one (a
// replica forwarding heads sends only entries a head covers), and each
// Progress by the signed head of the applied index. A child replica
// (cutThrough) also gets the entries this node's replica verified and is
// making durable (relay.go); other clients get only durable ones.
func (cn *conn) stream(ctx context.Context, st *store.Store, next, stop uint64, heads HeadSource, cutThrough bool) error {
	cfg := cn.s.cfg
	idle := time.NewTimer(cfg.ProgressInterval)
	defer idle.Stop()
	// The newest head this node holds for its applied index, at once: a
	// child that restarted, or this node after a restart (its saved head),
	// need not wait for the next idle Progress to have one.
	if err := cn.root.send(cn); err != nil {
		return err
	}
	if h, err := appliedSignedHead(heads, st); err != nil {
		return err
	} else if h != nil {
		if err := cn.send(h); err != nil {
			return err
		}
	}
	for {
		if stop > 0 && next > stop {
			return cn.send(&Done{LastIndex: stop})
		}
		// Both before reading, so no commit and no relayed batch is missed.
		changed := st.Changed()
		var rl *relay
		var relayed <-chan struct{}
		if cutThrough {
			if rl = relayOf(st); rl != nil {
				relayed = rl.changed()
			}
		}
		// Past the applied index the relay has what there is, without a
		// read of the store; the log has what the relay no longer holds.
		var entries []wal.Entry
		if rl != nil && next > st.AppliedIndex() {
			entries = rl.read(next, cfg.MaxBatchEntries, cfg.MaxBatchBytes)
		}
		early := len(entries) > 0
		if !early {
			var err error
			entries, err = st.ReadLog(next, cfg.MaxBatchEntries, cfg.MaxBatchBytes)
			if errors.Is(err, store.ErrLogTruncated) {
				// Retention overtook a slow client.
				cn.refuse(RefuseLogTruncated, "%v: bootstrap from a snapshot", err)
				return err
			}
			if err != nil {
				return fmt.Errorf("read log at %d: %w", next, err)
			}
			if len(entries) == 0 && rl != nil {
				entries = rl.read(next, cfg.MaxBatchEntries, cfg.MaxBatchBytes)
				early = len(entries) > 0
			}
		}
		if stop > 0 {
			for len(entries) > 0 && entries[len(entries)-1].Index > stop {
				entries = entries[:len(entries)-1]
			}
		}
		var head *Head
		entries, head = batchHead(heads, st.DBID(), entries)
		if len(entries) > 0 {
			if err := cn.send(&Entries{Entries: entries}); err != nil {
				return err
			}
			if head != nil {
				if err := cn.send(head); err != nil {
					return err
				}
			}
			cfg.Metrics.entriesSent.Add(float64(len(entries)))
			next = entries[len(entries)-1].Index + 1
			if early {
				rl.sent(next - 1)
				cfg.Metrics.entriesRelayed.Add(float64(len(entries)))
			}
			resetTimer(idle, cfg.ProgressInterval)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		select {
		case <-changed:
		case <-relayed:
		case <-idle.C:
			p := &Progress{AppliedIndex: st.AppliedIndex()}
			if t := st.AppliedTime(); !t.IsZero() {
				p.AppliedTime = t.UnixNano()
			}
			if err := cn.send(p); err != nil {
				return err
			}
			if err := cn.root.send(cn); err != nil {
				return err
			}
			if h, err := appliedSignedHead(heads, st); err != nil {
				return err
			} else if h != nil {
				if err := cn.send(h); err != nil {
					return err
				}
			}
			idle.Reset(cfg.ProgressInterval)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// batchHead trims a batch to what heads covers and returns the signed head
// of its last entry, if any: the root signs it; a replica forwarding heads
// ends the batch at the first head it holds at or after the batch's start
// (nothing if it holds none yet).
func batchHead(heads HeadSource, db store.DBID, entries []wal.Entry) ([]wal.Entry, *Head) {
	if len(entries) == 0 {
		return entries, nil
	}
	last := &entries[len(entries)-1]
	switch {
	case heads.Signer != nil:
		return entries, &Head{heads.Signer.Sign(db, last.Index, last.Hash)}
	case heads.Book != nil:
		h, ok := heads.Book.Covering(entries[0].Index)
		if !ok {
			return nil, nil
		}
		if h.Index < last.Index {
			entries = entries[:h.Index-entries[0].Index+1]
		}
		if h.Index == entries[len(entries)-1].Index {
			return entries, &Head{h}
		}
		return entries, nil
	}
	return entries, nil
}

// appliedSignedHead is the signed head of st's applied index, if heads
// has one.
func appliedSignedHead(heads HeadSource, st *store.Store) (*Head, error) {
	switch {
	case heads.Signer != nil:
		h, err := st.Head()
		if err != nil || h.Index == 0 {
			return nil, err
		}
		return &Head{heads.Signer.Sign(st.DBID(), h.Index, h.Hash)}, nil
	case heads.Book != nil:
		if h, ok := heads.Book.Latest(); ok && h.Index <= st.AppliedIndex() {
			return &Head{h}, nil
		}
	}
	return nil, nil
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	t.Reset(d)
}
