package server

import (
	"github.com/quicksilver-kv/qs/internal/config"
)

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
