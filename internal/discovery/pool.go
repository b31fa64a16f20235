package discovery

import (
	"cmp"
	"slices"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

// DefaultPoolReplicas is how many full replicas a proxy that finds its
// pool through the overlay keeps: the nearest ones.
const DefaultPoolReplicas = 3

// FullReplicas are the members holding the whole dataset of database db
// with id id (its roots and replicas; not its proxies) that have a
// replication address, this member excluded: those not suspect first,
// the nearest by estimated RTT first, those without an estimate after
// them, the name breaking ties; at most n. Suspect members come last
// rather than not at all: suspicion is this member's own probes going
// unanswered (a lossy path, a busy host), and a proxy whose every
// replica is suspect still has somewhere to fetch from. Pure.
func FullReplicas(members []Member, db string, id store.DBID, n int) []Endpoint {
	type cand struct {
		Endpoint
		rtt     time.Duration
		suspect bool
	}
	var cs []cand
	for _, m := range members {
		if m.Self || m.Meta.Repl == "" {
			continue
		}
		for _, d := range m.Meta.DBs {
			if d.Name == db && d.ID == id && !d.Role.IsProxy() {
				cs = append(cs, cand{Endpoint{Name: m.Name, Repl: m.Meta.Repl}, m.RTT, m.Suspect})
				break
			}
		}
	}
	slices.SortFunc(cs, func(a, b cand) int {
		if a.suspect != b.suspect {
			if a.suspect {
				return 1
			}
			return -1
		}
		if (a.rtt < 0) != (b.rtt < 0) {
			if a.rtt < 0 {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.rtt, b.rtt), cmp.Compare(a.Name, b.Name))
	})
	var out []Endpoint
	for _, c := range cs[:min(max(n, 0), len(cs))] {
		out = append(out, c.Endpoint)
	}
	return out
}

// PoolMembers is whom a proxy that names neither relays nor replicas
// fetches its misses from.
type PoolMembers struct {
	// Preferred are asked first; Fallback only when no preferred member
	// can answer (such requests are counted).
	Preferred, Fallback []string
	// Relay: this member is one of its data centre's relays.
	Relay bool
}

// ChoosePool is the pool of the member marked Self in members, a proxy
// of database db (id id) in data centre dc, with perDC relays elected per
// data centre and up to n full replicas: a proxy prefers the relays of
// its data centre (not itself) and falls back to the nearest full
// replicas; an elected relay fetches from those replicas directly, and
// never from another relay (two relays asking each other would go round
// until the reader's deadline). With no relay alive, a proxy has only
// its fall-backs. Pure.
func ChoosePool(members []Member, db string, id store.DBID, dc string, perDC, n int) PoolMembers {
	v := ViewDC(members, db, dc, perDC)
	replicas := repls(FullReplicas(members, db, id, n))
	if v.Relay {
		return PoolMembers{Preferred: replicas, Relay: true}
	}
	return PoolMembers{Preferred: repls(v.Relays), Fallback: replicas}
}

// Pool is ChoosePool over the members seen now, with Config.RelaysPerDC
// relays per data centre and n replicas. It sets the dc_relays and relay
// gauges of db, as DC does.
func (o *Overlay) Pool(db string, id store.DBID, dc string, n int) PoolMembers {
	members := o.Members()
	p := ChoosePool(members, db, id, dc, o.cfg.relaysPerDC(), n)
	relays := len(ViewDC(members, db, dc, o.cfg.relaysPerDC()).Relays)
	if p.Relay {
		relays++
	}
	o.m.setDC(db, relays, p.Relay)
	return p
}
