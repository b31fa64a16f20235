package repl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	"golang.org/x/time/rate"
)

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("qs: replication server closed")

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
	// tails: the newest batch a stream read from each database's log.
	tails tailBatches
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
