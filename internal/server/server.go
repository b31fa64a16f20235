package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/quicksilver-kv/qs/internal/api/httpapi"
	"github.com/quicksilver-kv/qs/internal/api/memcache"
	"github.com/quicksilver-kv/qs/internal/cache"
	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/discovery"
	"github.com/quicksilver-kv/qs/internal/gateway"
	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/metrics/storecollector"
	"github.com/quicksilver-kv/qs/internal/proxy"
	"github.com/quicksilver-kv/qs/internal/raftroot"
	"github.com/quicksilver-kv/qs/internal/repl"
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

	dbs   map[string]*httpapi.Database
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
	s := &Server{cfg: cfg, log: log, meters: ms, announce: announce, dbs: map[string]*httpapi.Database{}, quit: make(chan struct{})}
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

// openDatabase opens one database and gives it its role: root (accepts
// writes, writes heartbeats) or replica (follows its upstream).
func (s *Server) openDatabase(d config.Database) error {
	o, err := s.cfg.StoreOptions(d)
	if err != nil {
		return err
	}
	o.Logger = s.log
	if d.Raft.Enabled() && o.DBID.IsZero() {
		if _, err := os.Stat(o.Dir); errors.Is(err, os.ErrNotExist) {
			peers, err := config.ParsePeers(d.Raft.Peers)
			if err != nil {
				return err
			}
			if o.DBID, err = raftDBID(d, peers, s.auth.Dialer(clusterauth.RaftClaim(d.Raft.NodeID))); err != nil {
				return fmt.Errorf("new raft member %s: %w (set db_id in the configuration to start without asking a peer)", d.Name, err)
			}
		}
	}
	if d.IsReplica() && !d.IsStatic() && o.DBID.IsZero() {
		// A new replica that finds its sources through the overlay takes
		// the root's database id from a member (one with configured
		// sources learns it while it waits for them, see wait.go).
		if _, err := os.Stat(o.Dir); errors.Is(err, os.ErrNotExist) {
			if o.DBID, err = s.learnDBIDFromOverlay(d.Name); err != nil {
				return fmt.Errorf("new replica %s: %w (set db_id in the configuration to start without asking a source)", d.Name, err)
			}
		}
	}
	st, err := store.Open(o)
	if err != nil {
		return err
	}
	storecollector.Stores.Add(st)
	hub := watch.NewHub(st, watch.Config{Budget: s.watchBudget, Metrics: watchMetrics}, s.log.With("db", d.Name))
	db := &httpapi.Database{Name: d.Name, Node: s.cfg.NodeName, Store: st, Watch: hub, Gate: s.gate}
	s.dbs[d.Name] = db
	s.order = append(s.order, d.Name)
	if err := s.reports.attach(db, d.IsReplica()); err != nil {
		return err
	}
	if d.Raft.Enabled() {
		slot := &raftSlot{}
		s.raftNodes[d.Name] = slot
		db.Propose, db.Members = slot.Write, slot
		s.attachCluster(db, slot)
	}
	if d.Bridged {
		s.openBridged(d, db)
		s.log.Info("database open", "db", d.Name, "role", d.RoleName(), "db_id", st.DBID().String(), "applied_index", st.AppliedIndex(), "dir", o.Dir)
		return nil
	}
	if !d.IsReplica() {
		db.CanWrite = func() error { return nil }
		db.Status = func() map[string]any { return map[string]any{"role": "root", "history": historyStatus(st)} }
		if slot := s.raftNodes[d.Name]; slot != nil {
			db.Status = slot.status
		}
		db.Status = s.withTreeStatus(d, db.Status)
		s.log.Info("database open", "db", d.Name, "role", "root", "db_id", st.DBID().String(), "applied_index", st.AppliedIndex(), "dir", o.Dir)
		return nil
	}
	sources := append(append([]string{}, d.Upstream...), d.Secondary...)
	rcfg := repl.ReplicaConfig{Database: d.Name, Sources: sources, IdleTimeout: d.ReplIdleTimeout.Duration,
		Dial: s.replDial(), BootstrapLock: s.cfg.BootstrapLock, BootstrapMinEntries: bootstrapMinEntries(d),
		Report: s.reports.report(db), Verifier: s.keys.verifier, BeforeApply: failpointForwarded(st), Metrics: replMetrics}
	if agent := s.newAgent(d, st); agent != nil && !d.IsStatic() {
		rcfg.Finder = agent // configured sources take precedence
	}
	r, err := repl.NewReplica(rcfg, st, s.log.With("db", d.Name))
	if err != nil {
		return err
	}
	s.replicas[d.Name] = r
	var pool *proxy.Pool
	var pf subscription
	var dp *discoveredPool
	var l2 *proxy.L2
	if d.IsProxy() {
		// A proxy with relays fetches through them; its replicas and
		// sources are asked only when no relay answers.
		members, fallback := d.Replicas, sources
		if len(d.Relays) > 0 {
			members, fallback = d.Relays, append(append([]string(nil), d.Replicas...), sources...)
		}
		discovered := s.discoversPool(d)
		pool, err = proxy.New(proxy.Config{Database: d.Name, DBID: st.DBID(), Replicas: members, Fallback: fallback, Dial: s.replDial(),
			AttemptTimeout: d.ProxyAttemptTimeout.Duration, MinFetchRate: d.ProxyMinFetchRate, Dynamic: discovered, Metrics: s.meters.proxy}, s.log)
		if err != nil {
			return err
		}
		if discovered {
			// Neither relays nor replicas configured: the overlay's.
			var ps *prefetchSet
			if d.ProxyTransientBytes > 0 || d.ProxyShardCacheBytes > 0 {
				// Subscribed to the relays elected now (refreshPool).
				ps = newPrefetchSet(func(relay string) subscription {
					return repl.StartPrefetch(repl.PrefetchConfig{Database: d.Name, DBID: st.DBID(), Relays: []string{relay}, Dial: s.replDial(), Metrics: replMetrics}, st, s.log)
				})
				pf = ps
				s.prefetchers = append(s.prefetchers, ps)
			}
			dp = s.newDiscoveredPool(d, st.DBID(), pool, sources, ps)
		}
		st.SetFetcher(pool)
		s.pools = append(s.pools, pool)
		if l2, err = s.startL2(d, st, pool); err != nil {
			return err
		}
		if err := s.startShardWarmer(d, st, pool, r); err != nil {
			return err
		}
		if len(d.Relays) > 0 && (d.ProxyTransientBytes > 0 || d.ProxyShardCacheBytes > 0) {
			// Prefetched values are held by the transient tier and the
			// shard budget: a proxy with neither has nowhere to keep
			// them, and does not subscribe.
			pf = repl.StartPrefetch(repl.PrefetchConfig{Database: d.Name, DBID: st.DBID(), Relays: d.Relays, Dial: s.replDial(), Metrics: replMetrics}, st, s.log)
			s.prefetchers = append(s.prefetchers, pf)
		}
	}
	db.CanWrite = func() error { return s.notRoot(d, r) }
	db.Status = func() map[string]any {
		rs := r.State()
		m := map[string]any{
			"role":        d.RoleName(),
			"upstream":    d.Upstream,
			"secondary":   d.Secondary,
			"state":       rs.Status.String(),
			"source":      rs.Source,
			"lag_seconds": rs.Lag.Seconds(),
			"root_http":   rootHTTPStatus(rs.RootHTTP),
		}
		if t := st.AppliedTime(); !t.IsZero() {
			m["last_heartbeat"] = t.UTC().Format(time.RFC3339Nano)
		} else {
			m["last_heartbeat"] = nil
		}
		if rs.LastError != nil {
			m["last_error"] = rs.LastError.Error()
		}
		if s.keys.verifier != nil {
			m["signed_index"] = rs.SignedIndex
		}
		m["bootstraps"] = rs.Bootstraps
		m["bootstrap"] = bootstrapStatus(rs.Bootstrap)
		if pool != nil {
			m["proxy"] = proxyStatus(st, pool, d.Replicas)
			m["cache"] = cacheStatus(st, d, pf)
			addL2Status(m["cache"].(map[string]any), st, l2, s.discoveredL2[d.Name] != nil)
			if s.cfg.Shards > 0 {
				m["cache"].(map[string]any)["shard"] = shardStatus(s.cfg.NodeName, s.cfg.Shards)
			}
			poolSource(m, dp)
		} else {
			m["history"] = historyStatus(st)
		}
		return m
	}
	db.Status = s.withTreeStatus(d, db.Status)
	s.log.Info("database open", "db", d.Name, "role", d.RoleName(), "upstream", sources, "db_id", st.DBID().String(), "applied_index", st.AppliedIndex(), "dir", o.Dir)
	return nil
}

// bootstrapMinEntries: a new proxy replays the log rather than download
// the whole dataset (it bootstraps only if its source lacks the log).
func bootstrapMinEntries(d config.Database) int64 {
	if d.IsProxy() && d.BootstrapMinEntries == 0 {
		return -1
	}
	return d.BootstrapMinEntries
}

// historyStatus is the "history" object of a full node's status.
func historyStatus(st *store.Store) map[string]any {
	h, err := st.History()
	if err != nil {
		return nil
	}
	return map[string]any{"enabled": h.Enabled, "horizon_index": h.Horizon, "bytes": h.Bytes, "versions": h.Entries}
}

// proxyStatus is the "proxy" object of a proxy's status: its cache and its
// replicas.
func proxyStatus(st *store.Store, pool *proxy.Pool, replicas []string) map[string]any {
	ps := st.ProxyStats()
	var members []map[string]any
	for _, m := range pool.Status() {
		members = append(members, map[string]any{"addr": m.Addr, "fallback": m.Fallback, "up": m.Up,
			"applied_index": m.AppliedIndex, "latency_seconds": m.LatencySeconds, "failures": m.Failures})
	}
	return map[string]any{"cached_values": ps.CachedValues, "cached_bytes": ps.CachedBytes, "cache_budget_bytes": ps.CacheBytes,
		"window_entries": ps.Window, "disk_soft_limited": ps.SoftLimited, "disk_hard_limited": ps.HardLimited, "replicas": members}
}

// cacheStatus is the "cache" object of a proxy's status: its tiers, and
// what they served since the process started.
func cacheStatus(st *store.Store, d config.Database, pf subscription) map[string]any {
	ps := st.ProxyStats()
	var prefetched int64 // values received from the relays and held
	if pf != nil {
		prefetched = pf.Stats().Admitted
	}
	return map[string]any{"l1_hits": ps.Hits, "remote_fetches": ps.Fetched, "disk_admissions": ps.Admitted,
		"transient_values": ps.TransientValues, "transient_bytes": ps.TransientBytes, "transient_budget_bytes": ps.TransientBudget,
		"prefetched": prefetched, "relay": d.Relay, "relays": d.Relays}
}

// shardStatus is the "shard" of a proxy's cache status: the physical
// shard of its data centre that its node name maps to, and their count.
func shardStatus(node string, shards int) map[string]any {
	m, err := cache.NewShardMap(shards)
	if err != nil { // refused by Config.Validate
		return nil
	}
	return map[string]any{"index": m.OfNode(node), "count": m.Count()}
}

// bootstrapStatus is the "bootstrap" object of a replica's status: null
// if it never bootstrapped since the process started.
func bootstrapStatus(b repl.BootstrapProgress) map[string]any {
	if b.Started.IsZero() {
		return nil
	}
	m := map[string]any{
		"active":        b.Active,
		"waiting":       b.Waiting,
		"source":        b.Source,
		"snapshot":      b.Snapshot,
		"index":         b.Index,
		"bytes_done":    b.BytesDone,
		"bytes_total":   b.BytesTotal,
		"files_done":    b.FilesDone,
		"files_total":   b.FilesTotal,
		"resumed_bytes": b.Resumed,
		"started":       b.Started.UTC().Format(time.RFC3339Nano),
		"finished":      nil,
	}
	if !b.Finished.IsZero() {
		m["finished"] = b.Finished.UTC().Format(time.RFC3339Nano)
	}
	return m
}

// Database implements httpapi.Catalog.
func (s *Server) Database(name string) (*httpapi.Database, bool) {
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
			Metrics: replMetrics}, func(name string) (*store.Store, bool) {
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
func (s *Server) heartbeatLoop(db *httpapi.Database, every time.Duration) {
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

// Shutdown stops accepting, lets requests in flight finish (bounded by
// ctx), stops every goroutine and closes the databases.
func (s *Server) Shutdown(ctx context.Context) error {
	close(s.quit)
	var errs []error
	if s.stopBackground != nil {
		s.stopBackground()
	}
	// Leave the overlay first: the others stop choosing this node at once.
	s.leaveOverlay()
	if s.repl != nil {
		if err := s.repl.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("repl shutdown: %w", err))
		}
	}
	if s.http != nil {
		// Stop accepting first and let Serve return, so that a connection
		// accepted at this very moment is tracked before Shutdown looks
		// for active connections (otherwise it can be dropped unanswered).
		s.httpLn.Close()
		<-s.httpServed
		// net/http drops a request it reads after Shutdown began, even on
		// a connection accepted before: let accepted connections get their
		// answer first (bounded by ctx and the read-header timeout).
		s.httpBusy.waitQuiet(ctx)
		if err := s.http.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
			s.http.Close()
		}
	}
	for _, mc := range s.mc {
		if err := mc.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("memcache shutdown: %w", err))
		}
	}
	s.wg.Wait()
	errs = append(errs, s.stopRaft(), s.closeStores())
	return errors.Join(errs...)
}

func (s *Server) leaveOverlay() {
	if s.overlay == nil {
		return
	}
	if err := s.overlay.Leave(time.Second); err != nil {
		s.log.Warn("left the gossip overlay without telling every member", "err", err)
	}
}

// withTreeStatus adds a database's place in the tree to its status:
// "children" (replicas streaming from this node now) and "depth" (0 at a
// root; null while a replica's position is unknown).
func (s *Server) withTreeStatus(d config.Database, status func() map[string]any) func() map[string]any {
	return func() map[string]any {
		m := status()
		m["children"] = s.children(d.Name)
		m["depth"] = s.depth(d)
		return m
	}
}

func (s *Server) closePools() {
	for _, p := range s.prefetchers {
		p.Close()
	}
	s.prefetchers = nil
	for _, w := range s.warmers {
		w.Close()
	}
	s.warmers = nil
	for _, l := range s.l2s {
		l.Close()
	}
	s.l2s = nil
	for _, p := range s.pools {
		p.Close()
	}
	s.pools = nil
}

// Err returns the first listener failure, if any.
func (s *Server) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.serveErr
}

func (s *Server) closeStores() error {
	s.closePools()
	var errs []error
	for _, name := range s.order {
		storecollector.Stores.Remove(s.dbs[name].Store)
		if err := s.dbs[name].Store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func storeBatch(op wal.Op) store.Batch { return store.Batch{Ops: []wal.Op{op}} }

// connTracker counts HTTP connections that are new (accepted, no request
// read yet) or active (serving a request).
type connTracker struct {
	mu   sync.Mutex
	busy map[net.Conn]bool
}

func (t *connTracker) track(c net.Conn, st http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.busy == nil {
		t.busy = map[net.Conn]bool{}
	}
	if st == http.StateNew || st == http.StateActive {
		t.busy[c] = true
	} else {
		delete(t.busy, c)
	}
}

func (t *connTracker) waitQuiet(ctx context.Context) {
	for {
		t.mu.Lock()
		n := len(t.busy)
		t.mu.Unlock()
		if n == 0 || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// isRelay reports whether database db is a proxy configured as the relay
// of its data centre (it answers the fetches of the proxies that name
// it), or one its data centre's proxies elected relay now (electedRelay).
func (s *Server) isRelay(db string) bool {
	for _, d := range s.cfg.Databases {
		if d.Name == db {
			return d.IsProxy() && (d.Relay || s.electedRelay(d))
		}
	}
	return false
}

// electedRelay reports whether proxy database d is an elected relay of
// its data centre that answers now. A proxy whose pool comes from the
// overlay answers once its pool asks the replicas (discoveredRelay). A
// proxy whose pool is fixed to replicas by flags (--replicas, no
// --relays) is elected like any other proxy with a replication address
// and answers as soon as it is: it fetches for the others from its
// replicas, as an elected relay does. A proxy whose pool names relays is
// never elected (it advertises role relay-client, advertisedRole) and
// never answers as an elected one: it would ask those relays, and two
// proxies naming each other would ask each other in turn.
func (s *Server) electedRelay(d config.Database) bool {
	if s.overlay == nil {
		return false
	}
	if s.discoversPool(d) {
		return s.discoveredRelay(d.Name)
	}
	return answersElected(d) && s.overlay.DC(d.Name, s.cfg.DC).Relay
}

// answersElected reports whether proxy database d, whose pool is fixed by
// its configuration, answers other proxies' fetches when elected relay:
// only if its pool asks replicas, never relays. Pure.
func answersElected(d config.Database) bool {
	return d.IsProxy() && len(d.Relays) == 0 && len(d.Replicas) > 0
}
