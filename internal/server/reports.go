package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/quicksilver-kv/qs/internal/keyuse"
	"github.com/quicksilver-kv/qs/internal/proxy"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/statuspage"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/tree"
)

// reports wires what flows up the tree: each replica's report of its
// subtree and of the reads sampled below it, received from children by
// the replication server and sent to the source by the replica
// (internal/repl report.go), and what the status page graphs.
type reports struct {
	log      *slog.Logger
	m        *Metrics
	proxy    *proxy.Metrics // the proxies' remote fetches, for the status page
	children *tree.Registry
	dbs      map[string]*service.Database // set before Start, read-only after
}

func newReports(log *slog.Logger, m *Metrics, pm *proxy.Metrics) *reports {
	return &reports{log: log, m: m, proxy: pm, children: tree.NewRegistry(tree.DefaultTTL), dbs: map[string]*service.Database{}}
}

// attach gives db its sampler, history and tree; a root (not a replica)
// also gets the read window where samples of the whole tree end.
func (rp *reports) attach(db *service.Database, replica bool) error {
	s, err := keyuse.NewSampler(keyuse.DefaultRate)
	if err != nil {
		return err
	}
	db.Reads = s
	db.History = statuspage.NewHistory()
	if !replica {
		db.KeyUse = keyuse.NewWindow(time.Now())
	}
	db.Tree = func() tree.Node { return rp.children.Compose(db.Name, self(db), time.Now()) }
	rp.dbs[db.Name] = db
	return nil
}

// self is this node's own line in the tree of db, from its status.
func self(db *service.Database) tree.Node {
	var st map[string]any
	if db.Status != nil {
		st = db.Status()
	}
	return nodeOf(db.Node, db.Store.AppliedIndex(), st)
}

// nodeOf is the tree line of the node named name at applied index
// applied, from its status st (nil: a root without one).
func nodeOf(name string, applied uint64, st map[string]any) tree.Node {
	n := tree.Node{Name: name, Role: "root", AppliedIndex: applied}
	if v, ok := st["role"].(string); ok && v != "" && len(v) <= tree.MaxWord {
		n.Role = v
	}
	if v, ok := st["state"].(string); ok && len(v) <= tree.MaxWord {
		n.State = v
	}
	if v, ok := st["source"].(string); ok && len(v) <= tree.MaxName {
		n.Source = v
	}
	if v, ok := st["lag_seconds"].(float64); ok && v == v {
		// Below 0 (unknown: the log is dated in this node's future) it is
		// reported as it is, never as 0.
		n.LagSeconds = min(max(v, -tree.MaxLagSeconds), tree.MaxLagSeconds)
	}
	if n.Name == "" {
		n.Name = "(unnamed)"
	}
	return n
}

// receive is the replication server's ReportSink.
func (rp *reports) receive(name string, from repl.ProcessID, body []byte) error {
	db, ok := rp.dbs[name]
	if !ok {
		rp.m.reportsInvalid.WithLabelValues("unknown_database").Inc()
		return fmt.Errorf("qs: report for database %q, not served here", name)
	}
	r, err := tree.Decode(body)
	if err != nil {
		rp.m.reportsInvalid.WithLabelValues("invalid").Inc()
		return err
	}
	now := time.Now()
	rp.children.Put(name, from.String(), r.Node, now)
	if len(r.Reads) > 0 {
		if db.KeyUse != nil {
			db.KeyUse.Add(r.Reads, now)
		} else {
			db.Reads.Merge(r.Reads)
		}
	}
	return nil
}

// report is the report a replica of db sends its source.
func (rp *reports) report(db *service.Database) func() []byte {
	return func() []byte {
		n := db.Tree()
		reads, sampled := db.Reads.Drain()
		body, err := tree.Encode(tree.Report{Node: n, Reads: reads, Sampled: sampled})
		if err != nil {
			rp.log.Warn("tree report not made", "db", db.Name, "err", err)
			return nil
		}
		return body
	}
}

// run samples each database every statuspage.Every for the status page,
// moves a root's own read samples into its window, and exports the
// tree's and the samplers' metrics, until ctx ends.
func (rp *reports) run(ctx context.Context, order []string) {
	t := time.NewTicker(statuspage.Every)
	defer t.Stop()
	type exported struct {
		c             keyuse.Counters
		windowDropped uint64
	}
	seen := map[string]exported{}
	for {
		now := time.Now()
		for _, name := range order {
			db, prev := rp.dbs[name], seen[name]
			n := db.Tree()
			rp.m.treeNodes.WithLabelValues(name).Set(float64(tree.Size(&n)))
			db.History.Add(statuspage.Point{T: now.UnixMilli(), AppliedIndex: db.Store.AppliedIndex(), LagSeconds: n.LagSeconds, Counters: readCounters(name, db.Store, rp.proxy)})
			cur := exported{c: db.Reads.Counters()}
			if db.KeyUse != nil {
				reads, _ := db.Reads.Drain()
				db.KeyUse.Add(reads, now)
				ws := db.KeyUse.Stats()
				rp.m.windowKeys.WithLabelValues(name).Set(float64(ws.Keys))
				cur.windowDropped = ws.Dropped
				rp.m.windowDropped.WithLabelValues(name).Add(float64(cur.windowDropped - prev.windowDropped))
			}
			rp.m.readSamples.WithLabelValues(name, "local").Add(float64(cur.c.Sampled - prev.c.Sampled))
			rp.m.readSamples.WithLabelValues(name, "merged").Add(float64(cur.c.Merged - prev.c.Merged))
			rp.m.readSamples.WithLabelValues(name, "dropped").Add(float64(cur.c.Dropped - prev.c.Dropped))
			seen[name] = cur
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// readCounters reads the cache-tier counters of one database for the
// status page: the store's own counters and, for a proxy, its remote
// fetches, counted in pm. (Gathering the whole metrics registry for them,
// every sample, was an eighth of an idle node's CPU.)
func readCounters(name string, st *store.Store, pm *proxy.Metrics) statuspage.Counters {
	c := tierCounters(st.Metrics())
	if st.IsProxy() {
		c.FetchOK, c.FetchFailed = pm.FetchResults(name)
	}
	return c
}

// tierCounters maps a store's counters to the status page's tiers: the
// read cache is the memory tier; a proxy's reads answered from its own
// store (values held, keys known absent) are disk hits, those it fetched
// disk misses. Pure.
func tierCounters(m store.Metrics) statuspage.Counters {
	return statuspage.Counters{
		MemoryHits: m.ReadCacheHits, MemoryMisses: m.ReadCacheMisses,
		DiskHits: m.ProxyHits + m.ProxyNegative, DiskMisses: m.ProxyMisses,
	}
}
