package memcache

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quicksilver-kv/qs/internal/version"
)

// Server serves the memcached text protocol for one Backend on any number of
// listeners.
//
// Lock order: Server.mu before conn.mu. A connection's goroutine never holds
// conn.mu while taking Server.mu.
type Server struct {
	cfg         Config
	lim         limits
	b           Backend
	m           *Metrics // Config.Metrics, or a Metrics of its own
	log         *slog.Logger
	start       time.Time
	versionLine []byte // "VERSION <Version>\r\n"

	// ctx is passed to Backend writes; cancel is called when Shutdown gives
	// up waiting and force-closes connections.
	ctx    context.Context
	cancel context.CancelFunc

	closing atomic.Bool   // set once by Shutdown, under mu
	done    chan struct{} // closed with closing, wakes accept backoff
	wg      sync.WaitGroup

	mu struct {
		sync.Mutex
		listeners map[net.Listener]struct{}
		conns     map[*conn]struct{}
		threads   int // connections on a dedicated thread
		evicting  int // connections in conns closed for room, not yet gone
	}

	// The event loops (Config.EventLoops), started with the first
	// connection; under mu.
	loops       []*eventLoop
	loopsFailed bool // the system refused them: serve without
	// pollSlots holds a token for each goroutine of a loop connection
	// waiting in poll(2) (pollWaiters at most).
	pollSlots chan struct{}

	// niceRefused is set once the system refused a read thread's nice
	// value; niceOnce logs the outcome, refused or in force, once.
	niceRefused atomic.Bool
	niceOnce    sync.Once
	sliceOnce   sync.Once // records readSlice's outcome, in force or refused, once

	// Counters for the stats command, per Server. cmd_get is hits+misses.
	stats struct {
		currConns, totalConns, rejectedConns atomic.Int64
		evictedConns                         atomic.Int64
		getHits, getMisses                   atomic.Uint64
		cmdSet, cmdDelete, deleteHits        atomic.Uint64
	}
}

// New returns a Server for b. Zero fields of cfg take their defaults; New
// panics if cfg is invalid after that (validate configuration when it is
// loaded, with Config.Validate). A nil log discards log records.
func New(cfg Config, b Backend, log *slog.Logger) *Server {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	s := &Server{
		cfg:         cfg,
		lim:         limits{maxKeys: cfg.MaxKeysPerGet, maxValue: cfg.MaxValueBytes},
		b:           b,
		m:           cfg.Metrics,
		log:         log,
		start:       time.Now(),
		versionLine: []byte("VERSION " + sanitize(version.Version, '_', maxErrorText) + "\r\n"),
		done:        make(chan struct{}),
		pollSlots:   make(chan struct{}, pollWaiters),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.mu.listeners = make(map[net.Listener]struct{})
	s.mu.conns = make(map[*conn]struct{})
	return s
}

// goLocked runs f on a goroutine that Shutdown waits for. s.mu must be held
// and the server must not be closing, so that no goroutine starts after
// Shutdown began waiting.
func (s *Server) goLocked(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// Serve accepts connections on ln until Shutdown is called, and then returns
// ErrServerClosed. It may be called for several listeners at once (TCP and
// Unix sockets alike). Serve closes ln when it returns. Any other error is
// the listener's and is returned as is.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.mu.listeners[ln] = struct{}{}
	s.wg.Add(1) // Shutdown also waits for the accept loops to end.
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.mu.listeners, ln)
		s.mu.Unlock()
		ln.Close()
		s.wg.Done()
	}()

	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors and the like: back off and retry,
			// as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("memcache: accept failed", "addr", ln.Addr().String(), "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
			}
			continue
		}
		backoff = 0
		s.accept(nc)
	}
}

// accept serves nc on a new goroutine, or refuses it when MaxConns
// connections are open.
func (s *Server) accept(nc net.Conn) {
	s.mu.Lock()
	c, err := s.registerLocked(nc)
	if err == nil {
		s.goLocked(c.serve)
	}
	s.mu.Unlock()
	if err == nil {
		return
	}
	if errors.Is(err, errTooManyConns) {
		s.m.errorsByKind[kindTooManyConns].Inc()
		s.stats.rejectedConns.Add(1)
		s.log.Debug("memcache: too many connections", "remote", remoteAddr(nc), "max", s.cfg.MaxConns)
		// A new socket's send buffer is empty: this write does not block.
		nc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		nc.Write([]byte("SERVER_ERROR too many connections\r\n"))
	}
	nc.Close()
}

var errTooManyConns = errors.New("qs: memcache: too many connections")

// register records nc as a connection of s; the caller runs its serve.
func (s *Server) register(nc net.Conn) (*conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.registerLocked(nc)
}

func (s *Server) registerLocked(nc net.Conn) (*conn, error) {
	if s.closing.Load() {
		return nil, ErrServerClosed
	}
	if len(s.mu.conns)-s.mu.evicting >= s.cfg.MaxConns && !s.evictIdlestLocked() {
		return nil, errTooManyConns
	}
	var sk sock
	loops := s.cfg.EventLoops > 0
	if !loops && s.mu.threads < s.cfg.Threads {
		if ts, ok := newThreadSock(nc); ok {
			sk = ts
			s.mu.threads++
			s.m.threadConnections.Inc()
		}
	}
	c := newConn(s, nc, sk)
	if loops && s.attachLoopLocked(c) {
		s.m.loopConnections.Inc()
	}
	s.mu.conns[c] = struct{}{}
	s.stats.currConns.Add(1)
	s.stats.totalConns.Add(1)
	s.m.connectionsOpen.Inc()
	s.m.connectionsTotal.Inc()
	return c, nil
}

// evictIdlestLocked closes the connection that has waited longest for a
// request, to make room for a new one. It reports false if every
// connection is inside a request.
func (s *Server) evictIdlestLocked() bool {
	for range 3 { // the idlest may start a request while it is chosen
		var idlest *conn
		var since time.Time
		for c := range s.mu.conns {
			if t, ok := c.idleSince(); ok && (idlest == nil || t.Before(since)) {
				idlest, since = c, t
			}
		}
		if idlest == nil {
			return false
		}
		if idlest.evictIfIdle() {
			s.mu.evicting++
			s.stats.evictedConns.Add(1)
			s.m.idleEvictionsTotal.Inc()
			s.log.Debug("memcache: idle connection closed for a new one", "remote", remoteAddr(idlest.nc), "idle_since", since)
			return true
		}
	}
	return false
}

// unregister forgets c; it is called once, after c's socket was closed.
func (s *Server) unregister(c *conn) {
	s.mu.Lock()
	if c.wasEvicted() {
		s.mu.evicting--
	}
	delete(s.mu.conns, c)
	if c.sock.dedicated() {
		s.mu.threads--
		s.m.threadConnections.Dec()
	}
	s.mu.Unlock()
	if c.loop != nil {
		c.loop.lp.release(c)
		s.m.loopConnections.Dec()
	}
	s.stats.currConns.Add(-1)
	s.m.connectionsOpen.Dec()
}

// Shutdown stops the server gracefully: it closes the listeners (Serve
// returns ErrServerClosed), closes connections waiting for a request, lets
// requests in flight finish (connections close after their current request)
// and waits for every goroutine of the server to end. If ctx ends first,
// remaining connections are closed, the context of backend writes in flight
// is canceled, and Shutdown returns ctx.Err() once their goroutines are gone.
// Shutdown may be called more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closing.Swap(true) {
		close(s.done)
	}
	for ln := range s.mu.listeners {
		ln.Close()
	}
	for c := range s.mu.conns {
		c.wakeIfIdle()
	}
	for _, l := range s.loops {
		l.set.Wake() // closes its parked connections; ends once it has none
	}
	s.mu.Unlock()

	waited := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(waited)
	}()
	select {
	case <-waited:
		s.cancel()
		return nil
	case <-ctx.Done():
	}
	s.cancel()
	s.mu.Lock()
	for c := range s.mu.conns {
		// abort ends a blocking call on a dedicated thread, and a wait in
		// an event loop; the connection's goroutine or loop closes its
		// descriptor (nc is closed already for a connection of a loop).
		c.sock.abort()
		c.nc.Close()
	}
	s.mu.Unlock()
	<-waited
	return ctx.Err()
}

// statLines appends the reply to the stats command to out.
func (s *Server) statLines(out []byte) []byte {
	for _, kv := range s.statPairs() {
		out = append(out, "STAT "...)
		out = append(out, kv[0]...)
		out = append(out, ' ')
		out = append(out, kv[1]...)
		out = append(out, "\r\n"...)
	}
	return append(out, "END\r\n"...)
}

// statPairs returns the statistics the stats command reports, as names
// and values safe to send.
func (s *Server) statPairs() [][2]string {
	var pairs [][2]string
	stat := func(name string, value string) { pairs = append(pairs, [2]string{name, value}) }
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	now := time.Now()
	hits, misses := s.stats.getHits.Load(), s.stats.getMisses.Load()
	stat("pid", strconv.Itoa(os.Getpid()))
	stat("uptime", i(int64(now.Sub(s.start)/time.Second)))
	stat("time", i(now.Unix()))
	stat("version", string(s.versionLine[len("VERSION "):len(s.versionLine)-2]))
	stat("curr_connections", i(s.stats.currConns.Load()))
	stat("total_connections", i(s.stats.totalConns.Load()))
	stat("rejected_connections", i(s.stats.rejectedConns.Load()))
	stat("max_connections", strconv.Itoa(s.cfg.MaxConns))
	stat("idle_kicks", i(s.stats.evictedConns.Load()))
	stat("cmd_get", u(hits+misses))
	stat("get_hits", u(hits))
	stat("get_misses", u(misses))
	stat("cmd_set", u(s.stats.cmdSet.Load()))
	deletes, deleteHits := s.stats.cmdDelete.Load(), s.stats.deleteHits.Load()
	stat("delete_hits", u(deleteHits))
	stat("delete_misses", u(deletes-deleteHits))
	for _, kv := range s.b.Stats() {
		name := strings.ReplaceAll(sanitize(kv[0], '_', maxKeyLen), " ", "_")
		if name == "" {
			continue
		}
		stat(name, sanitize(kv[1], ' ', maxErrorText))
	}
	return pairs
}

func remoteAddr(nc net.Conn) string {
	if a := nc.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}

// niceAllowed records that a read thread runs at Config.ReadNice.
func (s *Server) niceAllowed() {
	s.niceOnce.Do(func() {
		s.m.readNice.Set(float64(s.cfg.ReadNice))
		s.log.Info("memcache: threads serving reads run at a raised priority", "nice", s.cfg.ReadNice)
	})
}

// refuseNice records that the system refused Config.ReadNice: reads then
// run at the process's priority.
func (s *Server) refuseNice(err error) {
	s.niceRefused.Store(true)
	s.niceOnce.Do(func() {
		s.log.Info("memcache: threads serving reads keep the process's priority: raising it needs CAP_SYS_NICE or a nice limit (LimitNICE); see docs/operations.md",
			"memcache_read_nice", s.cfg.ReadNice, "err", err)
	})
}

// sliceSet records that a dedicated thread runs with readSlice.
func (s *Server) sliceSet() {
	s.sliceOnce.Do(func() { s.m.readSliceSeconds.Set(readSlice.Seconds()) })
}

// refuseSlice records that the system refused readSlice for a thread.
func (s *Server) refuseSlice(err error) {
	s.sliceOnce.Do(func() {
		s.log.Info("memcache: dedicated threads keep the kernel's default scheduling slice", "err", err)
	})
}
