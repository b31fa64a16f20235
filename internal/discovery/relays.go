package discovery

import (
	"cmp"
	"slices"
)

// DefaultRelaysPerDC is how many relays each data centre elects when the
// configuration does not say.
const DefaultRelaysPerDC = 2

// RelayMember is a proxy of one database as the relay election sees it.
type RelayMember struct {
	Name string
	DC   string
	// Repl is its replication address; a member without one cannot serve
	// and is not elected.
	Repl string
	// Relay: it advertises itself a relay now (it was elected in the last
	// election it ran, or it is configured as one).
	Relay bool
	// Suspect: this member suspects it dead (it missed this member's
	// direct probes; see suspicion.go).
	Suspect bool
	// Client: its relays are fixed by its configuration
	// (RoleRelayClient); it is never elected.
	Client bool
}

// RelayRank is a member's place in the relay election of its data centre:
// the lowest ranks are elected first. It is a stable hash of the name, so
// every member computes the same ranks.
func RelayRank(name string) uint64 { return NodeID(name) }

// compareRank orders names by RelayRank (the name breaks a tie of hashes).
func compareRank(a, b string) int {
	return cmp.Or(cmp.Compare(RelayRank(a), RelayRank(b)), cmp.Compare(a, b))
}

// ElectRelays elects up to perDC relays in each data centre among members
// (the proxies of one database): members that are relays now keep their
// seats (so a proxy that joins later does not displace a serving relay),
// the lowest ranked of them if there are more than perDC (two sides of a
// healed partition); the seats left go to the lowest-ranked other
// proxies. A client of fixed relays is never elected: it would fetch for
// the others from its own relays. A relay keeps its seat while it is only suspect: it loses it
// when the overlay declares it dead and drops it from the list, so a
// relay that misses a few probes on a busy host does not make the seats
// move twice. Members without a replication address, and suspect members
// that are not relays, are skipped. The answer maps each data centre to
// its relays' names, lowest rank first. It is a pure function of its
// input, whatever its order: every member that sees the same list elects
// the same relays.
func ElectRelays(members []RelayMember, perDC int) map[string][]string {
	out := map[string][]string{}
	if perDC <= 0 {
		return out
	}
	byDC := map[string][]RelayMember{}
	for _, m := range members {
		if m.Suspect && !m.Relay || m.Repl == "" || m.Name == "" || m.Client {
			continue
		}
		byDC[m.DC] = append(byDC[m.DC], m)
	}
	for dc, ms := range byDC {
		// Relays now first, then by rank (the name breaks a tie of hashes).
		slices.SortFunc(ms, func(a, b RelayMember) int {
			if a.Relay != b.Relay {
				if a.Relay {
					return -1
				}
				return 1
			}
			return compareRank(a.Name, b.Name)
		})
		var names []string
		for _, m := range ms[:min(perDC, len(ms))] {
			names = append(names, m.Name)
		}
		slices.SortFunc(names, compareRank)
		out[dc] = names
	}
	return out
}

// Endpoint is a member's name and replication address.
type Endpoint struct {
	Name string
	Repl string
}

// DCView is what one member learns of its data centre for one database.
type DCView struct {
	// Relays are the data centre's elected relays that are not suspect,
	// this member excluded, lowest rank first.
	Relays []Endpoint
	// Peers are the data centre's other proxies of the database (relays
	// included) that are not suspect, lowest rank first.
	Peers []Endpoint
	// Relay: this member is one of the data centre's relays.
	Relay bool
}

// relayMembers picks the proxies (relays included) of database db.
func relayMembers(members []Member, db string) []RelayMember {
	var out []RelayMember
	for _, m := range members {
		for _, d := range m.Meta.DBs {
			if d.Name == db && d.Role.IsProxy() {
				out = append(out, RelayMember{Name: m.Name, DC: m.Meta.DC, Repl: m.Meta.Repl, Relay: d.Role == RoleRelay, Suspect: m.Suspect,
					Client: !d.Role.RelayCandidate()})
			}
		}
	}
	return out
}

// ViewDC is what the member marked Self in members sees of data centre
// dc for database db, with perDC relays elected per data centre. Pure.
func ViewDC(members []Member, db, dc string, perDC int) DCView {
	var v DCView
	self := ""
	byName := map[string]RelayMember{}
	rm := relayMembers(members, db)
	for _, m := range members {
		if m.Self {
			self = m.Name
		}
	}
	for _, m := range rm {
		byName[m.Name] = m
	}
	for _, name := range ElectRelays(rm, perDC)[dc] {
		switch m := byName[name]; {
		case name == self:
			v.Relay = true
		case !m.Suspect:
			v.Relays = append(v.Relays, Endpoint{Name: name, Repl: m.Repl})
		}
	}
	slices.SortFunc(rm, func(a, b RelayMember) int { return compareRank(a.Name, b.Name) })
	for _, m := range rm {
		if m.DC == dc && m.Name != self && !m.Suspect && m.Repl != "" {
			v.Peers = append(v.Peers, Endpoint{Name: m.Name, Repl: m.Repl})
		}
	}
	return v
}

// DC is what this member sees of data centre dc for database db: its
// relays (elected among its proxies, Config.RelaysPerDC of them) and its
// other proxies. A proxy without configured relays or peers uses these,
// and reads them again when Changed fires. It also sets the dc_relays
// and relay gauges of db.
func (o *Overlay) DC(db, dc string) DCView {
	v := ViewDC(o.Members(), db, dc, o.cfg.relaysPerDC())
	n := len(v.Relays)
	if v.Relay {
		n++
	}
	o.m.setDC(db, n, v.Relay)
	return v
}

// DCRelays are the replication addresses of the relays of data centre dc
// for database db, this member excluded, lowest rank first.
func (o *Overlay) DCRelays(db, dc string) []string { return repls(o.DC(db, dc).Relays) }

// DCPeers are the replication addresses of the other proxies of database
// db in data centre dc that are not suspect, lowest rank first. Unlike DC
// it sets no gauge: a proxy whose relays are configured may still take
// its peers from here.
func (o *Overlay) DCPeers(db, dc string) []string {
	return repls(ViewDC(o.Members(), db, dc, o.cfg.relaysPerDC()).Peers)
}

func repls(es []Endpoint) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Repl)
	}
	return out
}

// DCProxies is one data centre's proxies of a database, as listed by
// Proxies: names, lowest rank first.
type DCProxies struct {
	Relays  []string
	Proxies []string // every proxy not suspect, relays included
}

// Proxies lists, for database db, each data centre that has proxies of
// it: its elected relays and all its proxies, as this member sees them.
func (o *Overlay) Proxies(db string) map[string]DCProxies {
	rm := relayMembers(o.Members(), db)
	out := map[string]DCProxies{}
	for dc, relays := range ElectRelays(rm, o.cfg.relaysPerDC()) {
		out[dc] = DCProxies{Relays: relays}
	}
	slices.SortFunc(rm, func(a, b RelayMember) int { return compareRank(a.Name, b.Name) })
	for _, m := range rm {
		if !m.Suspect {
			p := out[m.DC]
			p.Proxies = append(p.Proxies, m.Name)
			out[m.DC] = p
		}
	}
	return out
}
