package server

import (
	"github.com/quicksilver-kv/qs/internal/cache"
	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/proxy"
	"github.com/quicksilver-kv/qs/internal/store"
)

// startL2 puts the L2 tier of a proxy with DC peers in front of its pool:
// its misses are asked of the peer owning each key's shard first. It
// returns nil for a proxy without peers.
func (s *Server) startL2(d config.Database, st *store.Store, pool *proxy.Pool) (*proxy.L2, error) {
	if len(d.DCPeers) == 0 {
		return nil, nil
	}
	m, err := cache.NewShardMap(s.cfg.Shards) // checked by Config.Validate
	if err != nil {
		return nil, err
	}
	l2, err := proxy.NewL2(proxy.L2Config{Database: d.Name, DBID: st.DBID(), Peers: d.DCPeers, Shards: m, NodeName: s.cfg.NodeName,
		Next: pool, Count: st.CountTier, Dial: s.replDial()}, s.log)
	if err != nil {
		return nil, err
	}
	st.SetFetcher(l2)
	s.l2s = append(s.l2s, l2)
	return l2, nil
}

// addL2Status adds the L2 cache to a proxy's "cache" status object: the
// values its peers answered (l2_hits), its own shard budget and what it
// answered them, and its peers.
func addL2Status(c map[string]any, st *store.Store, l2 *proxy.L2) {
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
	}
	c["l2_hits"], c["dc_peers"] = hits, peers
}
