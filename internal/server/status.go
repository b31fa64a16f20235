package server

import (
	"time"

	"github.com/quicksilver-kv/qs/internal/cache"
	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/proxy"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
)

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
		"window_entries": ps.Window, "disk_soft_limited": ps.SoftLimited, "disk_hard_limited": ps.HardLimited, "cache_full": ps.Full, "replicas": members}
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
