package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/quicksilver-kv/qs/internal/clusterauth"
	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/discovery"
	"github.com/quicksilver-kv/qs/internal/metrics"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
)

// discoveryMetrics counts for the overlay and agents of every Server of
// the process (one, but for tests), served at /metrics.
var discoveryMetrics = metrics.MustRegister(discovery.NewMetrics())

// startOverlay joins the gossip overlay when the configuration names a
// gossip address. It runs before the databases open: a new replica that
// discovers its sources learns its database id through it.
func (s *Server) startOverlay() error {
	if s.cfg.Gossip == "" {
		return nil
	}
	var key []byte
	var more [][]byte
	if s.cfg.ClusterKey != "" {
		ks, err := clusterauth.LoadKeys(s.cfg.ClusterKey)
		if err != nil {
			return err
		}
		key, more = gossipKeys(ks)
	}
	o, err := discovery.Start(discovery.Config{NodeName: s.cfg.NodeName, Bind: s.cfg.Gossip, Join: s.cfg.Join,
		Key: key, MoreKeys: more, Insecure: s.cfg.Insecure, RelaysPerDC: s.cfg.RelaysPerDC, Log: s.log,
		GossipInterval: s.cfg.GossipInterval.Duration, ProbeInterval: s.cfg.ProbeInterval.Duration,
		Metrics: discoveryMetrics},
		discovery.Meta{Process: repl.DefaultProcessID, DC: s.cfg.DC})
	if err != nil {
		return err
	}
	s.overlay = o
	s.agents = map[string]*discovery.Agent{}
	return nil
}

// gossipKeys are the overlay keys derived from the cluster keys ks: the
// first seals, all open.
func gossipKeys(ks []clusterauth.Key) (primary []byte, more [][]byte) {
	for _, k := range ks[1:] {
		more = append(more, k.GossipKey())
	}
	return ks[0].GossipKey(), more
}

// learnDBIDFromOverlay waits (up to 30s) for members that serve database
// name, and asks them for its id.
func (s *Server) learnDBIDFromOverlay(name string) (store.DBID, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		var sources []string
		for _, m := range s.overlay.Members() {
			for _, d := range m.Meta.DBs {
				if d.Name == name && !m.Self && m.Meta.Repl != "" && !d.Role.IsProxy() {
					sources = append(sources, m.Meta.Repl)
				}
			}
		}
		if len(sources) > 0 {
			id, err := repl.LearnDBID(ctx, sources, name, repl.DefaultProcessID, s.replDial())
			if err == nil || ctx.Err() != nil {
				return id, err
			}
			s.log.Warn("database id not learnt yet", "db", name, "err", err)
		}
		if len(sources) == 0 && len(s.cfg.Join) > 0 {
			// Perhaps no seed answered the first join: ask them again.
			if err := s.overlay.Join(s.cfg.Join); err != nil {
				s.log.Debug("gossip seeds not reached yet", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return store.DBID{}, errors.New("no member of the gossip overlay serves it within 30s")
		case <-time.After(time.Second):
		}
	}
}

// newAgent makes the discovery agent of a replicated database, when the
// overlay is on; nil otherwise.
func (s *Server) newAgent(d config.Database, st *store.Store) *discovery.Agent {
	if s.overlay == nil {
		return nil
	}
	role := discovery.RoleReplica
	if d.IsProxy() {
		role = discovery.RoleProxy
	}
	a := discovery.NewAgent(discovery.AgentConfig{Database: d.Name, ID: st.DBID(), Role: role, Static: d.IsStatic()}, s.overlay, s.log)
	s.agents[d.Name] = a
	return a
}

// advertise keeps this member's advertisement current until the server
// stops. The applied index is refreshed at most every
// discovery.AppliedRefresh (it only tells stalled sources apart); any
// other change goes out at once.
func (s *Server) advertise(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var lastApplied time.Time
	var prev discovery.Meta
	for {
		m := s.localMeta()
		if time.Since(lastApplied) < discovery.AppliedRefresh(s.overlay.Size()) {
			// Keep the applied indexes advertised last.
			for i := range m.DBs {
				if i < len(prev.DBs) && prev.DBs[i].Name == m.DBs[i].Name {
					m.DBs[i].Applied = prev.DBs[i].Applied
				}
			}
		} else {
			lastApplied = time.Now()
		}
		if err := s.overlay.SetLocal(m); err != nil {
			s.log.Warn("gossip advertisement not sent", "err", err)
		}
		prev = m
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// localMeta is what this member advertises now.
func (s *Server) localMeta() discovery.Meta {
	m := discovery.Meta{Process: repl.DefaultProcessID, DC: s.cfg.DC}
	if s.httpLn != nil {
		m.HTTP = s.httpLn.Addr().String()
	}
	if s.replAddr != nil {
		m.Repl = s.replAddr.String()
	}
	for _, d := range s.cfg.Databases {
		db := s.dbs[d.Name]
		dm := discovery.DBMeta{Name: d.Name, ID: db.Store.DBID(), Applied: db.Store.AppliedIndex(), MaxChildren: s.cfg.MaxChildren}
		if s.repl != nil {
			dm.Children = s.repl.Children(d.Name)
		}
		dm.Role = advertisedRole(d, func() bool { return s.overlay.DC(d.Name, s.cfg.DC).Relay })
		if a := s.agents[d.Name]; a != nil {
			if depth, path := a.Position(); depth > 0 {
				dm.Depth, dm.Path = depth, path
			}
		}
		m.DBs = append(m.DBs, dm)
	}
	return m
}

// advertisedRole is the role database d advertises in the overlay;
// elected tells whether the proxies of its data centre elected it relay
// (asked only of a proxy that may be elected). A proxy that names its
// relays (--relays) is their client and advertises so: the election
// never picks it, as it would fetch for the others from its own relays.
// An elected proxy advertises role relay, which is what keeps its seat
// (discovery.ElectRelays).
func advertisedRole(d config.Database, elected func() bool) discovery.Role {
	switch {
	case !d.IsReplica():
		return discovery.RoleRoot
	case d.IsProxy() && len(d.Relays) > 0:
		return discovery.RoleRelayClient
	case d.IsProxy() && elected():
		return discovery.RoleRelay
	case d.IsProxy():
		return discovery.RoleProxy
	}
	return discovery.RoleReplica
}

// depth is a database's depth in the tree for its status: 0 at a root,
// null while a replica's position is unknown.
func (s *Server) depth(d config.Database) any {
	if !d.IsReplica() {
		return 0
	}
	if a := s.agents[d.Name]; a != nil {
		if depth, _ := a.Position(); depth > 0 {
			return depth
		}
	}
	return nil
}

// children is how many replicas stream a database from this node now.
func (s *Server) children(name string) int {
	if s.repl == nil {
		return 0
	}
	return s.repl.Children(name)
}

// acceptChild refuses a new child of a database that finds its sources
// through the overlay while it has no source itself ("detached"), or when
// the child is one of its ancestors ("cycle"). The child is recognised by
// the process id its member advertises.
func (s *Server) acceptChild(db string, client repl.ProcessID) *repl.RefusedError {
	a := s.agents[db]
	if a == nil {
		return nil
	}
	name := ""
	for _, m := range s.overlay.Members() {
		if m.Meta.Process == client {
			name = m.Name
		}
	}
	err := a.AcceptChild(name)
	switch {
	case errors.Is(err, discovery.ErrDetached):
		return &repl.RefusedError{Code: repl.RefuseDetached, Reason: err.Error() + ": choose another source"}
	case errors.Is(err, discovery.ErrCycle):
		return &repl.RefusedError{Code: repl.RefuseCycle, Reason: err.Error() + ": choose another source"}
	}
	return nil
}

// replicaView shows a repl.Replica to its discovery agent.
type replicaView struct{ r *repl.Replica }

func (v replicaView) Source() (string, bool) {
	st := v.r.State()
	return st.Source, st.Status == repl.StatusStreaming || st.Status == repl.StatusCatchingUp
}
func (v replicaView) Applied() uint64    { return v.r.State().AppliedIndex }
func (v replicaView) Lag() time.Duration { return v.r.State().Lag }
func (v replicaView) Reconnect()         { v.r.Reconnect() }
func (v replicaView) SourcePath() []uint64 {
	p, _ := v.r.SourcePath()
	return p
}

// Members lists the gossip overlay for GET /v1/members; false when this
// node is not a member.
func (s *Server) Members() (any, bool) {
	if s.overlay == nil {
		return nil, false
	}
	members := s.overlay.Members()
	names := map[uint64]string{}
	for _, m := range members {
		names[discovery.NodeID(m.Name)] = m.Name
	}
	var out []map[string]any
	for _, m := range members {
		var rtt any
		if m.RTT >= 0 {
			rtt = m.RTT.Seconds()
		}
		var dbs []map[string]any
		for _, d := range m.Meta.DBs {
			var parent any
			if len(d.Path) > 0 {
				if n, ok := names[d.Path[0]]; ok {
					parent = n
				} else {
					parent = fmt.Sprintf("%016x", d.Path[0]) // gone from the overlay
				}
			}
			dbs = append(dbs, map[string]any{"name": d.Name, "db_id": d.ID.String(), "role": d.Role.String(),
				"applied_index": d.Applied, "depth": d.Depth, "children": d.Children, "max_children": d.MaxChildren, "parent": parent})
		}
		out = append(out, map[string]any{"name": m.Name, "self": m.Self, "suspect": m.Suspect, "gossip": m.Gossip, "dc": m.Meta.DC,
			"http": m.Meta.HTTP, "repl": m.Meta.Repl, "rtt_seconds": rtt, "databases": dbs})
	}
	// Per database and data centre: the elected relays and the proxies.
	dcs := []map[string]any{}
	for _, d := range s.cfg.Databases {
		byDC := s.overlay.Proxies(d.Name)
		for _, dc := range slices.Sorted(maps.Keys(byDC)) {
			p := byDC[dc]
			dcs = append(dcs, map[string]any{"database": d.Name, "dc": dc, "relays": p.Relays, "proxies": p.Proxies})
		}
	}
	return map[string]any{"self": s.cfg.NodeName, "members": out, "relays_per_dc": s.cfg.RelaysPerDC, "dcs": dcs}, true
}

// pathSource is what database db sends its children as its path in the
// tree (repl.PathSource): a root only its own node id, a replica its own
// then its source's. Nil when this node is in no overlay (its children
// judge ancestry from gossip alone, and it has no node id there).
func (s *Server) pathSource(db string) repl.PathSource {
	if s.overlay == nil {
		return nil
	}
	self := discovery.NodeID(s.overlay.Name())
	for _, d := range s.cfg.Databases {
		switch {
		case d.Name != db:
		case !d.IsReplica():
			return repl.FixedPath(self)
		case s.replicas[db] != nil:
			return repl.ReplicaPath(self, s.replicas[db])
		}
	}
	return nil
}
