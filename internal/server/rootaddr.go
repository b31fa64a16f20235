package server

import (
	"github.com/quicksilver-kv/qs/internal/config"
	"github.com/quicksilver-kv/qs/internal/repl"
	"github.com/quicksilver-kv/qs/internal/store"
)

// rootHTTP are the HTTP addresses where the writes of database db are
// accepted, as this node knows them, for its replication clients: at a
// root its own (at an HA root member, the leader's first: any member
// takes writes, the leader without forwarding them); at a replica or a
// proxy those its source told it; none at a bridged root (its writes come
// from its bridge) or while they are not known.
func (s *Server) rootHTTP(db string) []string {
	for _, d := range s.cfg.Databases {
		if d.Name != db {
			continue
		}
		switch {
		case d.Bridged:
			return nil
		case d.IsReplica():
			if r := s.replicas[db]; r != nil {
				return r.State().RootHTTP
			}
			return nil
		}
		var addrs []string
		if slot := s.raftNodes[db]; slot != nil {
			addrs = append(addrs, s.leaderHTTP(slot))
		}
		return repl.RootAddrs(append(addrs, s.httpAdvertised()))
	}
	return nil
}

// notRoot is the refusal of a write to replica or proxy database d, which
// r keeps replicating: it names the root's HTTP address when a source
// told it.
func (s *Server) notRoot(d config.Database, r *repl.Replica) error {
	st := r.State()
	from := st.Source
	if from == "" {
		from = "no source yet"
	}
	return &store.NotRootError{Database: d.Name, Root: st.RootHTTP,
		Detail: "database " + d.Name + " is a " + d.RoleName() + " on this node (it replicates from " + from + ")"}
}

// rootHTTPStatus is the "root_http" of a replica's status: the root's
// HTTP addresses its source told it, an empty list while none did.
func rootHTTPStatus(addrs []string) []string {
	if addrs == nil {
		return []string{}
	}
	return addrs
}
