package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/quicksilver-kv/qs/internal/api/httpapi"
	"github.com/quicksilver-kv/qs/internal/api/memcache"
	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/discovery"
	"github.com/quicksilver-kv/qs/internal/gateway"
	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/proxy"
	"github.com/quicksilver-kv/qs/internal/raftroot"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
	"github.com/quicksilver-kv/qs/internal/watch"
	"golang.org/x/net/netutil"
)

// watchMetrics counts the watch hubs and write budget of every Server of
// the process (one, but for tests), served at /metrics.
var watchMetrics = metrics.MustRegister(watch.NewMetrics())

// Server is one qs process.
type Server struct {
	cfg *config.Config
	log *slog.Logger
	// Announce receives one line per listener ("http listening on ADDR").
	announce io.Writer
	// meters are the Metrics the Server counts in (metrics.go).
	meters meters

	dbs   map[string]*service.Database
	order []string
	// watchBudget is shared by the watch hubs of every database: watcher
	// count and write turns are the process's.
	watchBudget *watch.Budget

	http           *http.Server
	httpLn         net.Listener
	httpServed     chan struct{} // closed when http.Serve returned
	httpBusy       connTracker
	mc             []*memcache.Server
	repl           *repl.Server
	replicas       map[string]*repl.Replica
	pools          []*proxy.Pool             // of proxy databases, closed after the replicas stop
	prefetchers    []subscription            // subscriptions of proxies to their relays, closed with the pools
	l2s            []*proxy.L2               // L2 tiers of proxies (their DC peers), closed with the pools
	warmers        []*proxy.ShardWarmer      // shard budget warm-ups of proxies, closed with the pools
	rafts          map[string]*raftroot.Node // see raft.go
	raftNodes      map[string]*raftSlot
	replAddr       net.Addr
	stopBackground context.CancelFunc // ends replicas and watch hubs
	auth           *clusterauth.Auth
	keys           logKeys                     // signed log heads (heads.go)
	insecure       []string                    // internal addresses beyond loopback without authentication (--insecure)
	gate           *gateway.Gateway            // nil: open writes
	reports        *reports                    // the tree and read samples (reports.go)
	overlay        *discovery.Overlay          // nil: no gossip overlay
	agents         map[string]*discovery.Agent // of replicated databases, with the overlay
	discovered     sync.Map                    // name → *discoveredPool: proxies whose pool the overlay gives
	discoveredL2   map[string]*proxy.L2        // proxies whose L2 peers the overlay gives (set before Start)

	// waiting are new replicas that learn their database id from a
	// source during Start (see wait.go).
	waiting    []config.Database
	waitStates map[string]*waitState

	quit chan struct{}
	wg   sync.WaitGroup
	mu   struct {
		sync.Mutex
		serveErr error
	}
}

// New opens every configured database. Nothing listens until Start. The
// Server counts in the process's metrics, served at /metrics.
func New(cfg *config.Config, log *slog.Logger, announce io.Writer) (*Server, error) {
	return newServer(cfg, log, announce, processMeters)
}

// newServer is New counting in ms.
func newServer(cfg *config.Config, log *slog.Logger, announce io.Writer, ms meters) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, meters: ms, announce: announce, dbs: map[string]*service.Database{}, quit: make(chan struct{})}
	s.watchBudget = watch.NewBudget(cfg.WatchLimits(), watchMetrics)
	s.replicas = map[string]*repl.Replica{}
	s.rafts = map[string]*raftroot.Node{}
	s.raftNodes = map[string]*raftSlot{}
	s.reports = newReports(log, ms.server, ms.proxy)
	var err error
	if s.auth, s.insecure, err = loadAuth(cfg, ms.auth); err != nil {
		return nil, err
	}
	if s.keys, err = loadLogKeys(cfg); err != nil {
		return nil, err
	}
	s.warnUnsignedRoots()
	if err := s.openGateway(); err != nil {
		return nil, err
	}
	if err := s.startOverlay(); err != nil {
		return nil, err
	}
	s.waitStates = map[string]*waitState{}
	for _, d := range cfg.Databases {
		wait, err := needsSource(cfg, d)
		if err != nil {
			s.closeStores()
			s.leaveOverlay()
			return nil, err
		}
		if d.IsReplica() {
			// The series exist from the start, at 0 unless waiting.
			ms.server.sourceWaiting.WithLabelValues(d.Name).Set(0)
			ms.server.sourceWaitFailures.WithLabelValues(d.Name)
		}
		if wait {
			s.waiting = append(s.waiting, d)
			s.waitStates[d.Name] = &waitState{}
			continue
		}
		if err := s.openDatabase(d); err != nil {
			s.closeStores()
			s.leaveOverlay()
			return nil, err
		}
	}
	return s, nil
}

// Database implements service.Catalog.
func (s *Server) Database(name string) (*service.Database, bool) {
	d, ok := s.dbs[name]
	return d, ok
}

// DatabaseNames implements httpapi.Lister: the databases in configuration
// order.
func (s *Server) DatabaseNames() []string { return s.order }

// Start opens (or inherits) every listener, announces them and starts
// serving. It returns once everything listens.
func (s *Server) Start() error { return s.StartContext(context.Background()) }

// StartContext is Start, but a new replica waiting for its sources (see
// wait.go) gives up when ctx ends. Until every database is open, HTTP
// answers /healthz with 503 and a waiting database's status with "state":
// "waiting"; the other listeners open once every database is open.
func (s *Server) StartContext(ctx context.Context) error {
	inherited, err := inheritedListeners()
	if err != nil {
		return err
	}
	ls := &listenerSet{inherited: inherited}
	defer ls.closeUnused()

	var front *swapHandler
	if s.cfg.HTTP != "" {
		ln, err := ls.listen("http", "tcp", s.cfg.HTTP)
		if err != nil {
			return err
		}
		limit := &httpapi.ConnLimit{Max: s.cfg.MaxHTTPConns, Metrics: httpMetrics}
		front = &swapHandler{}
		front.set(httpapi.New(httpConfig(), s, s.log))
		if len(s.waiting) > 0 {
			front.set(s.waitingHandler())
		}
		s.http = &http.Server{
			Handler:           limit.Wrap(front),
			ReadHeaderTimeout: s.cfg.HTTPReadHeaderTimeout.Duration,
			IdleTimeout:       s.cfg.HTTPIdleTimeout.Duration,
			ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
			ConnState: func(c net.Conn, st http.ConnState) {
				s.httpBusy.track(c, st)
				limit.ConnState(c, st)
			},
		}
		s.announcef("http listening on %s\n", ln.Addr())
		s.httpLn = netutil.LimitListener(ln, s.cfg.MaxHTTPConns+httpapi.ConnReserve)
		s.httpServed = make(chan struct{})
		s.goFunc(func() {
			defer close(s.httpServed)
			s.serveErr("http", s.http.Serve(s.httpLn))
		})
	}
	if len(s.waiting) > 0 {
		if err := s.awaitSources(ctx); err != nil {
			return err
		}
		// Every database is open: the API answers before the other
		// listeners are announced.
		if front != nil {
			front.set(httpapi.New(httpConfig(), s, s.log))
		}
	}
	for _, d := range s.cfg.Databases {
		db := s.dbs[d.Name]
		if len(d.Memcache) == 0 && len(d.Unix) == 0 {
			continue
		}
		mcfg := memcache.DefaultConfig()
		mcfg.Threads = s.cfg.MemcacheThreads
		mcfg.EventLoops = s.cfg.MemcacheEventLoops
		mcfg.ReadNice = s.cfg.MemcacheReadNice
		mcfg.Metrics = memcacheMetrics
		mc := memcache.New(mcfg, memcacheBackend{db: db, flushAll: d.MemcacheFlushAll}, s.log.With("db", d.Name))
		s.mc = append(s.mc, mc)
		for _, addr := range d.Memcache {
			ln, err := ls.listen("memcache-"+d.Name, "tcp", addr)
			if err != nil {
				return err
			}
			s.announcef("memcache listening on %s db=%s\n", ln.Addr(), d.Name)
			s.goFunc(func() { s.serveErr("memcache", mc.Serve(ln)) })
		}
		for _, path := range d.Unix {
			ln, err := ls.listen("unix-"+d.Name, "unix", path)
			if err != nil {
				return err
			}
			s.announcef("unix listening on %s db=%s\n", path, d.Name)
			s.goFunc(func() { s.serveErr("memcache unix", mc.Serve(ln)) })
		}
	}
	if s.cfg.Repl != "off" {
		ln, err := ls.listen("repl", "tcp", s.cfg.Repl)
		if err != nil {
			return err
		}
		rate := s.cfg.BootstrapRate
		if rate < 0 {
			rate = 0 // no limit
		}
		maxChildren := 0 // without the overlay, sources are configured: no cap
		if s.overlay != nil {
			maxChildren = s.cfg.MaxChildren
		}
		rs, err := repl.NewServer(repl.ServerConfig{BootstrapRate: rate, SnapshotKeep: s.cfg.SnapshotKeep.Duration, Reports: s.reports.receive,
			MaxChildren: maxChildren, AcceptChild: s.acceptChild, Relay: s.isRelay, Heads: s.heads, NodeName: s.cfg.NodeName, RootHTTP: s.rootHTTP,
			Path: s.pathSource, Metrics: replMetrics}, func(name string) (*store.Store, bool) {
			d, ok := s.dbs[name]
			if !ok {
				return nil, false
			}
			return d.Store, true
		}, s.log)
		if err != nil {
			ln.Close()
			return err
		}
		s.repl = rs
		s.announcef("repl listening on %s\n", ln.Addr())
		s.replAddr = ln.Addr()
		tln := s.auth.Listener(ln, "repl", s.cfg.MaxReplConns)
		s.goFunc(func() { s.serveErr("repl", rs.Serve(tln)) })
	}
	for _, d := range s.cfg.Databases {
		if d.Raft.Enabled() {
			ln, err := ls.listen("raft-"+d.Name, "tcp", d.Raft.Listen)
			if err != nil {
				return err
			}
			if err := s.startRaft(d, s.dbs[d.Name], ln); err != nil {
				ln.Close()
				return err
			}
		}
	}
	replCtx, stopBackground := context.WithCancel(context.Background())
	s.stopBackground = stopBackground
	s.goFunc(func() {
		if err := s.watchBudget.Run(replCtx); err != nil {
			s.log.Warn("watch write budget runs at a fixed rate (watch_write_rate)", "err", err)
		}
	})
	if s.overlay != nil {
		s.announcef("gossip listening on %s\n", s.overlay.Addr())
		s.goFunc(func() { s.advertise(replCtx) })
		s.goFunc(func() { s.overlay.Rejoin(replCtx, s.cfg.Join) })
	}
	for _, name := range s.order {
		if r, ok := s.replicas[name]; ok {
			s.goFunc(func() { r.Run(replCtx) })
			if a := s.agents[name]; a != nil {
				s.goFunc(func() { a.Run(replCtx, replicaView{r}) })
			}
			if dp, ok := s.discovered.Load(name); ok {
				s.goFunc(func() { s.followPool(replCtx, dp.(*discoveredPool)) })
			}
			if l2 := s.discoveredL2[name]; l2 != nil {
				s.goFunc(func() { s.followL2(replCtx, name, l2) })
			}
		}
		hub := s.dbs[name].Watch
		s.goFunc(func() { hub.Run(replCtx) })
	}
	if s.gate != nil {
		s.goFunc(func() { s.gate.Run(replCtx) })
	}
	s.goFunc(func() { s.reports.run(replCtx, s.order) })
	for _, d := range s.cfg.Databases {
		if hb := d.Heartbeat.Duration; hb > 0 && !d.IsReplica() && !d.Raft.Enabled() && !d.Bridged {
			db := s.dbs[d.Name]
			s.goFunc(func() { s.heartbeatLoop(db, hb) })
		}
		if slot := s.raftNodes[d.Name]; slot != nil {
			db := s.dbs[d.Name]
			s.goFunc(func() { s.runClusterTree(replCtx, db, slot) })
		}
		if !d.IsReplica() {
			db, leads := s.dbs[d.Name], leadsFor(s.raftNodes[d.Name])
			s.goFunc(func() { s.expiryLoop(db, leads) })
		}
	}
	s.warnInsecure()
	return nil
}

func (s *Server) announcef(format string, args ...any) {
	if s.announce != nil {
		fmt.Fprintf(s.announce, format, args...)
	}
}

func (s *Server) goFunc(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

func (s *Server) serveErr(what string, err error) {
	if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return
	}
	select {
	case <-s.quit:
		return
	default:
	}
	s.log.Error("listener failed", "listener", what, "err", err)
	s.mu.Lock()
	if s.mu.serveErr == nil {
		s.mu.serveErr = fmt.Errorf("%s: %w", what, err)
	}
	s.mu.Unlock()
}

// heartbeatLoop writes a heartbeat entry whenever the database has had no
// entry for the interval, so replicas can tell lag from silence.
func (s *Server) heartbeatLoop(db *service.Database, every time.Duration) {
	t := time.NewTicker(every / 2)
	defer t.Stop()
	// A full disk fails every attempt, twice an interval: say so once a
	// minute.
	failures := repeatLog{interval: time.Minute}
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		if db.CanWrite() != nil || time.Since(db.Store.AppliedTime()) < every {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		switch _, err := db.Store.Heartbeat(ctx); {
		case err == nil:
			failures.ok(s.log, "heartbeat written again", "db", db.Name)
		case !errors.Is(err, store.ErrClosed):
			failures.failed(s.log, time.Now(), "heartbeat not written", err, "db", db.Name)
		}
		cancel()
	}
}

// Err returns the first listener failure, if any.
func (s *Server) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.serveErr
}

func storeBatch(op wal.Op) store.Batch { return store.Batch{Ops: []wal.Op{op}} }
