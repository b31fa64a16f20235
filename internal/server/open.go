package server

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/metrics/storecollector"
	"github.com/quicksilver-kv/qs/internal/proxy"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/watch"
)

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
	db := &service.Database{Name: d.Name, Node: s.cfg.NodeName, Store: st, Watch: hub, Gate: s.gate}
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
		db.Refuse = func() error { return nil }
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
	db.Refuse = func() error { return s.notRoot(d, r) }
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
