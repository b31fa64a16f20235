package server

import (
	"context"
	"slices"

	"github.com/quicksilver-kv/qs/internal/cache"
	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/proxy"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
)

// discoversDCPeers reports whether proxy database d takes its L2 peers
// (the other proxies of its data centre) from the overlay: the overlay
// is on, the configuration names no dc_peers (which take precedence),
// the data centre is sharded (shards of at least 2) and d keeps a budget
// for its own shard, which it answers to its peers. Pure.
func discoversDCPeers(d config.Database, shards int, overlay bool) bool {
	return overlay && d.IsProxy() && len(d.DCPeers) == 0 && shards >= 2 && d.ProxyShardCacheBytes > 0
}

// startL2 puts the L2 tier of a proxy with DC peers in front of its pool:
// its misses are asked of the peer owning each key's shard first. Its
// peers are the configured ones or, for a proxy that discovers them, the
// overlay's (followed by followL2 once the server starts). It returns
// nil for a proxy without peers.
func (s *Server) startL2(d config.Database, st *store.Store, pool *proxy.Pool) (*proxy.L2, error) {
	discovered := discoversDCPeers(d, s.cfg.Shards, s.overlay != nil)
	peers := d.DCPeers
	if discovered {
		peers = s.overlay.DCPeers(d.Name, s.cfg.DC)
	} else if len(peers) == 0 {
		return nil, nil
	}
	m, err := cache.NewShardMap(s.cfg.Shards) // checked by Config.Validate
	if err != nil {
		return nil, err
	}
	l2, err := proxy.NewL2(proxy.L2Config{Database: d.Name, DBID: st.DBID(), Peers: peers, Shards: m, NodeName: s.cfg.NodeName,
		Next: pool, Count: st.CountTier, Dial: s.replDial(), AttemptTimeout: d.ProxyL2AttemptTimeout.Duration,
		SidelineMin: d.ProxyL2SidelineMin.Duration, SidelineMax: d.ProxyL2SidelineMax.Duration, Metrics: s.meters.proxy}, s.log)
	if err != nil {
		return nil, err
	}
	st.SetFetcher(l2)
	s.l2s = append(s.l2s, l2)
	if discovered {
		if s.discoveredL2 == nil {
			s.discoveredL2 = map[string]*proxy.L2{}
		}
		s.discoveredL2[d.Name] = l2
	}
	return l2, nil
}

// startShardWarmer starts the warm-up of a proxy's shard budget: a
// proxy with a budget and a shard (shards of at least 2) fetches the
// values of its own shard it does not hold from its pool, paced, until
// the budget is full. Its fetches are quiet: the relays do not publish
// them to the other proxies. A proxy_shard_warm_rate of -1 turns it off.
func (s *Server) startShardWarmer(d config.Database, st *store.Store, pool *proxy.Pool, r *repl.Replica) error {
	if d.ProxyShardCacheBytes <= 0 || s.cfg.Shards < 2 || d.ProxyShardWarmRate < 0 {
		return nil
	}
	w, err := proxy.StartShardWarmer(proxy.WarmConfig{Database: d.Name, Store: st, Next: pool.Quiet(), Rate: d.ProxyShardWarmRate,
		FetchTimeout: d.ProxyFetchTimeout.Duration, Ready: func() bool { return caughtUp(r.State()) }, Metrics: s.meters.proxy}, s.log)
	if err != nil {
		return err
	}
	s.warmers = append(s.warmers, w)
	return nil
}

// caughtUp reports whether a replica streams from its source and has
// applied what the source last reported. Pure.
func caughtUp(rs repl.ReplicaState) bool {
	return rs.Status == repl.StatusStreaming && rs.ServerIndex > 0 && rs.AppliedIndex >= rs.ServerIndex
}

// followL2 keeps the peers of db's L2 tier those the overlay shows in
// this node's data centre until ctx ends.
func (s *Server) followL2(ctx context.Context, db string, l2 *proxy.L2) {
	last := s.overlay.DCPeers(db, s.cfg.DC)
	s.followOverlay(ctx, func() {
		peers := s.overlay.DCPeers(db, s.cfg.DC)
		if slices.Equal(peers, last) {
			return
		}
		s.log.Info("L2 peers changed", "db", db, "peers", peers, "before", last)
		l2.SetPeers(peers)
		last = peers
	})
}

// addL2Status adds the L2 cache to a proxy's "cache" status object: the
// values its peers answered (l2_hits, no longer in remote_fetches), its own shard budget and what it
// answered them, its peers, and where they come from (dc_peers_source:
// "flags" or "discovery"; absent without peers).
func addL2Status(c map[string]any, st *store.Store, l2 *proxy.L2, discovered bool) {
	ps := st.ProxyStats()
	c["shard_values"], c["shard_bytes"], c["shard_budget_bytes"] = ps.ShardValues, ps.ShardBytes, ps.ShardBudget
	c["l2_served"], c["l2_missed"] = ps.ShardServed, ps.ShardMissed
	var hits int64
	peers := []map[string]any{}
	if l2 != nil {
		hits = l2.Hits()
		for _, p := range l2.Status() {
			peers = append(peers, map[string]any{"addr": p.Addr, "name": p.Name, "shard": p.Shard, "up": p.Up, "self": p.Self})
		}
		c["dc_peers_source"] = "flags"
		if discovered {
			c["dc_peers_source"] = "discovery"
		}
	}
	c["l2_hits"], c["dc_peers"] = hits, peers
	c["remote_fetches"] = remoteFetches(ps.Fetched, hits)
}

// remoteFetches is the values a proxy fetched from its relays or
// replicas: those it fetched beyond L1, less those L2 answered (0 at
// least: an L2 hit of a read whose other values could not be fetched is
// counted, the read's fetch is not). Pure.
func remoteFetches(fetched, l2Hits int64) int64 { return max(0, fetched-l2Hits) }
