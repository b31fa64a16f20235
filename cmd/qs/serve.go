package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"
	"time"

	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/ctrim"
	"github.com/quicksilver-kv/qs/internal/gcfloor"
	"github.com/quicksilver-kv/qs/internal/server"
	"github.com/quicksilver-kv/qs/internal/store"
)

func init() {
	register("serve", "run a server (with no flags: a root for database \"default\" in ./qs-data)", cmdServe)
}

func cmdServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var (
		cfgFile  = fs.String("config", "", "TOML configuration file (several databases and every other setting)")
		data     = fs.String("data", "", "data directory (default ./qs-data)")
		httpAddr = fs.String("http", "", "HTTP API address (default 127.0.0.1:7380)")
		mcAddr   = fs.String("memcache", "", "memcached protocol TCP address(es) of the first database, comma-separated (default 127.0.0.1:7311)")
		unixPath = fs.String("unix", "", "memcached protocol Unix socket path(s) of the first database, comma-separated")
		logLevel = fs.String("log-level", "", "debug, info, warn or error (default info)")
		nodeName = fs.String("node-name", "", "name of this node in status pages and member lists (default the host name)")
		replAddr = fs.String("repl", "", "replication listener address, from which replicas follow this node (default 127.0.0.1:7390; off to disable)")
		upstream = fs.String("upstream", "", "make the first database a replica of these replication addresses, comma-separated, tried in order")
		second   = fs.String("secondary", "", "replication addresses to fall back to when no upstream can serve, comma-separated")
		bridged  = fs.String("bridged", "", "make the first database a bridged root with this database id (the source's): it takes entries only from qs bridge qs, and no other writes")
		role     = fs.String("role", "", "role of the first database when it has an upstream: replica (the whole dataset, default) or proxy (keeps recent and recently read values, fetches the others from --replicas)")
		replicas = fs.String("replicas", "", "proxy: replication addresses of full replicas to fetch missing values from, comma-separated")
		relay    = fs.Bool("relay", false, "proxy: be a relay of this data centre: answer the fetches of the proxies that name this node in --relays (needs --replicas)")
		relays   = fs.String("relays", "", "proxy: replication addresses of the relays of this data centre, comma-separated: misses are fetched through them, from --replicas only when no relay answers")
		cacheB   = fs.Int64("cache-bytes", 0, "proxy: budget of stored values in bytes, the sliding window included (default 1 GiB)")
		transB   = fs.Int64("transient-bytes", 0, "proxy: in-memory tier in bytes in front of the cache: fetched values are written to the cache only when read again while held there (default 0: none)")
		dcPeers  = fs.String("dc-peers", "", "proxy: replication addresses of the proxies of this data centre, comma-separated (L2 cache): a miss is asked of the peer owning its key's shard (--shards, by --node-name) before the relays and replicas")
		shardB   = fs.Int64("shard-cache-bytes", 0, "proxy: in-memory budget in bytes of the values of this node's own shard, answered to its --dc-peers (default 0: none)")
		l2Try    = fs.Duration("l2-attempt-timeout", 0, "proxy with --dc-peers: time one request to the owner of a key's shard may take before the peer is sidelined and the miss fetched from the relays or replicas (default 100ms; 1ms to 10s)")
		l2Side   = fs.Duration("l2-sideline", 0, "proxy with --dc-peers: time a failed peer is left out, doubled at each failure in a row (default 200ms; 1ms to 1m)")
		l2SideMx = fs.Duration("l2-sideline-max", 0, "proxy with --dc-peers: the most a failed peer is left out (default 10s; --l2-sideline to 1h)")
		warmRate = fs.Int("shard-warm-rate", 0, "proxy with --shard-cache-bytes and --shards: values a second fetched in the background to fill the shard budget with its shard's values (default 5000; -1: off)")
		window   = fs.Int64("window", 0, "proxy: sliding window in log entries whose values are never evicted (default 10000)")
		nodeID   = fs.Uint64("node-id", 0, "make the first database a member of a replicated (Raft) root with this member id (≥ 1); needs --raft and --raft-peers")
		raftAddr = fs.String("raft", "", "Raft transport address of this member (host:port)")
		raftPeer = fs.String("raft-peers", "", "initial members of the replicated root: id=host:port,... (this member included, the same list on every member)")
		raftJoin = fs.Bool("raft-join", false, "join an existing replicated root as a new member (add it first with qs raft add)")
		gossip   = fs.String("gossip", "", "gossip overlay address (UDP and TCP), through which replicas find their sources; needs --cluster-key off loopback")
		join     = fs.String("join", "", "gossip addresses of overlay members to join, comma-separated; without --upstream the first database becomes a replica that finds its sources itself (--role proxy: a proxy)")
		dc       = fs.String("dc", "", "data centre of this node, shown in the overlay's member list")
		shards   = fs.Int("shards", 0, "physical shards of this node's data centre (a power of two, at most 1024): a proxy owns the shard of its --node-name, shown in its status")
		maxKids  = fs.Int("max-children", 0, "with the overlay: replicas that may stream each database from this node at once; one more is refused \"full\" (default 16)")
		relaysDC = fs.Int("relays-per-dc", 0, "with the overlay: relays the proxies of each database elect in each data centre (default 2)")
		clusterK = fs.String("cluster-key", "", "cluster key file (made by qs cert key): authenticates every replication and Raft connection, both ways")
		insecure = fs.Bool("insecure", false, "let the replication and Raft listeners listen beyond loopback without a cluster key or mutual TLS (anyone who reaches them can read everything and, on Raft, write)")
		ballast  = fs.Int64("ballast-bytes", 0, "size of the file each database keeps to free if the disk fills up (default 64 MiB; -1: none)")
		prodFile = fs.String("producers", "", "producers file: bearer tokens, prefixes and quotas of the writers (reloaded on SIGHUP and when it changes); none: open writes, for development only")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg := &config.Config{}
	if *cfgFile != "" {
		var err error
		if cfg, err = config.Load(*cfgFile); err != nil {
			return err
		}
	}
	cfg.EnsureDefaults()
	if *data != "" {
		cfg.Data = *data
	}
	if *httpAddr != "" {
		cfg.HTTP = *httpAddr
	}
	if *mcAddr != "" {
		cfg.Databases[0].Memcache = splitList(*mcAddr)
	}
	if *unixPath != "" {
		cfg.Databases[0].Unix = splitList(*unixPath)
	}
	if *nodeName != "" {
		cfg.NodeName = *nodeName
	}
	if *logLevel != "" {
		cfg.LogLevel = *logLevel
	}
	if *replAddr != "" {
		cfg.Repl = *replAddr
	}
	if *upstream != "" {
		cfg.Databases[0].Upstream = splitList(*upstream)
	}
	if *second != "" {
		cfg.Databases[0].Secondary = splitList(*second)
	}
	if *prodFile != "" {
		cfg.ProducersFile = *prodFile
	}
	if *gossip != "" {
		cfg.Gossip = *gossip
	}
	if *join != "" {
		cfg.Join = splitList(*join)
		if d := &cfg.Databases[0]; !d.IsStatic() && !d.Raft.Enabled() && *upstream == "" && *second == "" {
			d.Discover = true
		}
	}
	if *dc != "" {
		cfg.DC = *dc
	}
	if *shards != 0 {
		cfg.Shards = *shards
	}
	if *maxKids != 0 {
		cfg.MaxChildren = *maxKids
	}
	if *relaysDC != 0 {
		cfg.RelaysPerDC = *relaysDC
	}
	if *clusterK != "" {
		cfg.ClusterKey = *clusterK
	}
	cfg.Insecure = cfg.Insecure || *insecure
	if *ballast != 0 {
		for i := range cfg.Databases {
			cfg.Databases[i].BallastBytes = *ballast
		}
	}
	if *bridged != "" {
		cfg.Databases[0].Bridged, cfg.Databases[0].DBID = true, *bridged
	}
	if *role != "" {
		cfg.Databases[0].Role = *role
	}
	if *replicas != "" {
		cfg.Databases[0].Replicas = splitList(*replicas)
	}
	if *relay {
		cfg.Databases[0].Relay = true
	}
	if *relays != "" {
		cfg.Databases[0].Relays = splitList(*relays)
	}
	if *cacheB != 0 {
		cfg.Databases[0].ProxyCacheBytes = *cacheB
	}
	if *window != 0 {
		cfg.Databases[0].ProxyWindow = *window
	}
	if *transB != 0 {
		cfg.Databases[0].ProxyTransientBytes = *transB
	}
	if *dcPeers != "" {
		cfg.Databases[0].DCPeers = splitList(*dcPeers)
	}
	if *shardB != 0 {
		cfg.Databases[0].ProxyShardCacheBytes = *shardB
	}
	if *warmRate != 0 {
		cfg.Databases[0].ProxyShardWarmRate = *warmRate
	}
	if *l2Try != 0 {
		cfg.Databases[0].ProxyL2AttemptTimeout.Duration = *l2Try
	}
	if *l2Side != 0 {
		cfg.Databases[0].ProxyL2SidelineMin.Duration = *l2Side
	}
	if *l2SideMx != 0 {
		cfg.Databases[0].ProxyL2SidelineMax.Duration = *l2SideMx
	}
	if r := &cfg.Databases[0].Raft; *nodeID != 0 || *raftAddr != "" || *raftPeer != "" || *raftJoin {
		if *nodeID != 0 {
			r.NodeID = *nodeID
		}
		if *raftAddr != "" {
			r.Listen = *raftAddr
		}
		if *raftPeer != "" {
			r.Peers = splitList(*raftPeer)
		}
		r.Join = r.Join || *raftJoin
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := newLogger(cfg.LogLevel)
	if path := os.Getenv("QS_CPUPROFILE"); path != "" {
		// For performance work: a CPU profile of the whole run.
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	procs := setServeProcs()
	log.Debug("scheduler", "gomaxprocs", procs)
	// Fewer, rarer collections while the Go heap is small (see
	// internal/gcfloor); GOGC in the environment turns this off.
	gcCtx, stopGC := context.WithCancel(context.Background())
	gcDone := make(chan struct{})
	go func() { defer close(gcDone); gcfloor.Run(gcCtx, store.GoHeapEngineBytes) }()
	defer func() { stopGC(); <-gcDone }()
	// With cgo, the engine's memory comes from the C allocator, which
	// keeps freed pages resident until trimmed (internal/ctrim).
	trimCtx, stopTrim := context.WithCancel(context.Background())
	trimDone := make(chan struct{})
	go func() { defer close(trimDone); ctrim.Run(trimCtx) }()
	defer func() { stopTrim(); <-trimDone }()
	if path := os.Getenv("QS_TRACE"); path != "" {
		// For performance work: a runtime execution trace of the whole run
		// (go tool trace; -pprof=sched shows where goroutines waited to run).
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}
	if path := os.Getenv("QS_ALLOCPROFILE"); path != "" {
		// For performance work: where the whole run allocated, written at exit.
		defer writeAllocProfile(path, log)
	}

	srv, err := server.New(cfg, log, os.Stdout)
	if err != nil {
		return err
	}
	// sig is registered before Start, so a signal that arrives while it
	// runs is not lost: Start then returns (a new replica may be waiting
	// for its sources, which the signal stops) and the loop below sees it.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sig)
	startCtx, stopStart := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err = srv.StartContext(startCtx)
	stopped := startCtx.Err() != nil
	stopStart()
	if err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout.Duration)
		defer cancel()
		srv.Shutdown(ctx)
		if stopped {
			log.Info("shutting down", "reason", err)
			return nil
		}
		return err
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var runErr error
wait:
	for {
		select {
		case s := <-sig:
			if s == syscall.SIGHUP {
				reloadProducers(srv, log)
				if err := srv.ReloadKeys(); err != nil {
					log.Error("SIGHUP: keys and certificates not reloaded; those in force stay", "err", err)
				}
				continue
			}
			log.Info("shutting down", "signal", s.String())
			break wait
		case <-tick.C:
			if runErr = srv.Err(); runErr != nil {
				break wait
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout.Duration)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// reloadProducers answers SIGHUP: the producers file is read again now.
func reloadProducers(srv *server.Server, log *slog.Logger) {
	changed, err := srv.ReloadProducers()
	switch {
	case errors.Is(err, server.ErrNoProducersFile):
		log.Warn("SIGHUP ignored", "err", err)
	case err != nil:
		log.Error("SIGHUP: producers file not reloaded; the previous producers stay in force", "err", err)
	case !changed:
		log.Info("SIGHUP: producers file unchanged")
	}
}

func writeAllocProfile(path string, log *slog.Logger) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		log.Error("alloc profile not written", "path", path, "err", err)
	}
}
