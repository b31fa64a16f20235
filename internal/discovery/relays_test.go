package discovery

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// byRank returns names sorted by RelayRank, lowest first.
func byRank(names ...string) []string {
	out := slices.Clone(names)
	slices.SortFunc(out, func(a, b string) int {
		ra, rb := RelayRank(a), RelayRank(b)
		switch {
		case ra < rb:
			return -1
		case ra > rb:
			return 1
		}
		return 0
	})
	return out
}

func proxies(dc string, names ...string) []RelayMember {
	var out []RelayMember
	for _, n := range names {
		out = append(out, RelayMember{Name: n, DC: dc, Repl: n + ":7390"})
	}
	return out
}

func TestElectRelays(t *testing.T) {
	ams := byRank("p1", "p2", "p3", "p4", "p5")
	fra := byRank("q1", "q2", "q3")
	all := append(proxies("ams", ams...), proxies("fra", fra...)...)

	t.Run("lowest ranks per data centre", func(t *testing.T) {
		got := ElectRelays(all, 2)
		want := map[string][]string{"ams": ams[:2], "fra": fra[:2]}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
	t.Run("fewer proxies than seats", func(t *testing.T) {
		if got := ElectRelays(proxies("fra", fra...), 5)["fra"]; !reflect.DeepEqual(got, fra) {
			t.Fatalf("got %v, want all of %v", got, fra)
		}
	})
	t.Run("no seats", func(t *testing.T) {
		if got := ElectRelays(all, 0); len(got) != 0 {
			t.Fatalf("0 seats elected %v", got)
		}
	})
	t.Run("suspect and unreachable members skipped", func(t *testing.T) {
		ms := proxies("ams", ams...)
		ms[0].Suspect = true
		ms[1].Repl = ""
		if got := ElectRelays(ms, 2)["ams"]; !reflect.DeepEqual(got, ams[2:4]) {
			t.Fatalf("got %v, want %v", got, ams[2:4])
		}
	})
	t.Run("a suspect relay keeps its seat", func(t *testing.T) {
		ms := proxies("ams", ams...)
		ms[4].Relay, ms[4].Suspect = true, true
		if got := ElectRelays(ms, 2)["ams"]; !reflect.DeepEqual(got, byRank(ams[0], ams[4])) {
			t.Fatalf("got %v, want %v", got, byRank(ams[0], ams[4]))
		}
	})
	t.Run("clients of fixed relays never elected", func(t *testing.T) {
		ms := proxies("ams", ams...)
		ms[0].Client, ms[1].Client = true, true
		if got := ElectRelays(ms, 2)["ams"]; !reflect.DeepEqual(got, ams[2:4]) {
			t.Fatalf("got %v, want %v", got, ams[2:4])
		}
		for i := range ms {
			ms[i].Client = true
		}
		if got := ElectRelays(ms, 2)["ams"]; len(got) != 0 {
			t.Fatalf("only clients of fixed relays, elected %v", got)
		}
	})
	t.Run("the same answer in any order", func(t *testing.T) {
		want := ElectRelays(all, 2)
		r := rand.New(rand.NewPCG(1, 2))
		for range 50 {
			ms := slices.Clone(all)
			r.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
			if got := ElectRelays(ms, 2); !reflect.DeepEqual(got, want) {
				t.Fatalf("order %v elected %v, want %v", ms, got, want)
			}
		}
	})
	t.Run("serving relays keep their seats", func(t *testing.T) {
		ms := proxies("ams", ams...)
		ms[3].Relay, ms[4].Relay = true, true // the highest ranks serve now
		if got := ElectRelays(ms, 2)["ams"]; !reflect.DeepEqual(got, ams[3:5]) {
			t.Fatalf("got %v, want the serving %v", got, ams[3:5])
		}
		ms = slices.Delete(ms, 4, 5) // one is declared dead: the lowest rank takes its seat
		if got := ElectRelays(ms, 2)["ams"]; !reflect.DeepEqual(got, byRank(ams[0], ams[3])) {
			t.Fatalf("got %v, want %v", got, byRank(ams[0], ams[3]))
		}
	})
	t.Run("more relays than seats", func(t *testing.T) {
		ms := proxies("ams", ams...)
		for i := range ms {
			ms[i].Relay = true
		}
		if got := ElectRelays(ms, 2)["ams"]; !reflect.DeepEqual(got, ams[:2]) {
			t.Fatalf("got %v, want %v", got, ams[:2])
		}
	})
}

// TestElectionSettles runs the election as the members do (each relay
// advertises itself one, from the last election it ran) through joins, a
// suspect relay, a dead one and its return from the other side of a
// partition: the seats move only when a relay is lost, never because
// another proxy arrives or a relay misses probes.
func TestElectionSettles(t *testing.T) {
	members := map[string]*RelayMember{}
	round := func() map[string][]string {
		var list []RelayMember
		for _, name := range slices.Sorted(mapKeys(members)) {
			list = append(list, *members[name])
		}
		got := ElectRelays(list, 2)
		for _, m := range members {
			if !m.Suspect {
				m.Relay = slices.Contains(got[m.DC], m.Name)
			}
		}
		return got
	}
	settle := func() []string {
		t.Helper()
		prev := round()
		for range 5 {
			if next := round(); !reflect.DeepEqual(next, prev) {
				t.Fatalf("election moved without a change: %v then %v", prev, next)
			}
		}
		return prev["ams"]
	}
	add := func(names ...string) {
		for _, n := range names {
			members[n] = &RelayMember{Name: n, DC: "ams", Repl: n + ":7390"}
		}
	}

	add("a", "b", "c")
	first := settle()
	if !reflect.DeepEqual(first, byRank("a", "b", "c")[:2]) {
		t.Fatalf("first election %v", first)
	}
	// Forty proxies join, many ranked lower than the relays: no change.
	for i := range 40 {
		add(fmt.Sprintf("n%02d", i))
	}
	if got := settle(); !reflect.DeepEqual(got, first) {
		t.Fatalf("joins moved the relays from %v to %v", first, got)
	}
	// One relay is suspect: it keeps its seat.
	lost := first[0]
	members[lost].Suspect = true
	if got := settle(); !reflect.DeepEqual(got, first) {
		t.Fatalf("with %s suspect: %v, want still %v", lost, got, first)
	}
	// It is declared dead: its seat goes to the lowest-ranked other
	// proxy, the other relay keeps its own.
	gone := members[lost]
	delete(members, lost)
	second := settle()
	if !slices.Contains(second, first[1]) || slices.Contains(second, lost) || len(second) != 2 {
		t.Fatalf("with %s suspect: %v", lost, second)
	}
	// It was alive on the other side of a partition, still advertising
	// itself a relay: three claim two seats, the two lowest ranks keep
	// them, and it stays so.
	gone.Suspect = false
	members[lost] = gone
	if got, want := settle(), byRank(append(second, lost)...)[:2]; !reflect.DeepEqual(got, want) {
		t.Fatalf("after %s came back: %v, want %v", lost, got, want)
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestViewDC: a member sees its data centre's relays and peers of one
// database, itself excluded, and whether it is a relay itself.
func TestViewDC(t *testing.T) {
	member := func(name, dc string, role Role, self bool) Member {
		return Member{Name: name, Self: self, Meta: Meta{DC: dc, Repl: name + ":7390", DBs: []DBMeta{{Name: "db", Role: role}}}}
	}
	names := byRank("a", "b", "c", "d")
	ms := []Member{
		member(names[0], "ams", RoleProxy, false),
		member(names[1], "ams", RoleProxy, true),
		member(names[2], "ams", RoleProxy, false),
		member(names[3], "ams", RoleReplica, false), // not a proxy
		member("far", "fra", RoleRelay, false),
		member("root", "", RoleRoot, false),
	}
	ms[2].Suspect = true

	v := ViewDC(ms, "db", "ams", 2)
	want := DCView{Relays: []Endpoint{{names[0], names[0] + ":7390"}}, Peers: []Endpoint{{names[0], names[0] + ":7390"}}, Relay: true}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("ams: %+v, want %+v", v, want)
	}
	if v := ViewDC(ms, "db", "fra", 2); len(v.Relays) != 1 || v.Relays[0].Name != "far" || v.Relay {
		t.Fatalf("fra: %+v", v)
	}
	if v := ViewDC(ms, "other", "ams", 2); len(v.Relays)+len(v.Peers) != 0 || v.Relay {
		t.Fatalf("a database nobody serves: %+v", v)
	}
	if v := ViewDC(ms, "db", "ams", 1); v.Relay || len(v.Relays) != 1 || v.Relays[0].Name != names[0] {
		t.Fatalf("one seat: %+v", v)
	}
	// A client of fixed relays is never elected, but is a peer.
	ms[0].Meta.DBs[0].Role = RoleRelayClient
	want = DCView{Peers: []Endpoint{{names[0], names[0] + ":7390"}}, Relay: true}
	if v := ViewDC(ms, "db", "ams", 1); !reflect.DeepEqual(v, want) {
		t.Fatalf("a client of fixed relays ranked first: %+v, want %+v", v, want)
	}
	// A suspect relay keeps its seat but is not offered for use.
	ms[0].Meta.DBs[0].Role, ms[0].Suspect = RoleRelay, true
	if v := ViewDC(ms, "db", "ams", 1); v.Relay || len(v.Relays) != 0 || len(v.Peers) != 0 {
		t.Fatalf("suspect relay: %+v", v)
	}
}

// relayNode is a proxy in TestRelaysThroughOverlay: it advertises role
// relay while its own election says so, as a server does.
type relayNode struct {
	name, dc string
	o        *Overlay
	stop     context.CancelFunc
	done     chan struct{}
	crashed  bool
}

func startRelayNode(t *testing.T, name, dc string, seeds ...string) *relayNode {
	t.Helper()
	o, err := Start(Config{NodeName: name, Bind: "127.0.0.1:0", Join: seeds, ProbeInterval: 500 * time.Millisecond, Log: testLog(t)},
		Meta{DC: dc, Repl: replAddr(name), DBs: []DBMeta{{Name: "db", ID: simDB, Role: RoleProxy}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &relayNode{name: name, dc: dc, o: o, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			role := RoleProxy
			if o.DC("db", dc).Relay {
				role = RoleRelay
			}
			o.SetLocal(Meta{DC: dc, Repl: replAddr(name), DBs: []DBMeta{{Name: "db", ID: simDB, Role: role}}})
			select {
			case <-o.Changed():
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		if !n.crashed {
			n.stop()
			<-n.done
			o.Leave(time.Second)
		}
	})
	return n
}

// crash stops the node's loop and its gossip without a goodbye.
func (n *relayNode) crash() {
	n.crashed = true
	n.stop()
	<-n.done
	n.o.crash()
}

// agreedRelays waits until every node in nodes (all of data centre dc)
// sees the same relays of dc, each of which advertises role relay, and
// returns them.
func agreedRelays(t *testing.T, nodes []*relayNode, dc string, want int) []string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var first []string
		agree := true
		for i, n := range nodes {
			v := n.o.DC("db", dc)
			var got []string
			for _, e := range v.Relays {
				got = append(got, e.Name)
			}
			if v.Relay {
				got = append(got, n.name)
			}
			slices.SortFunc(got, compareRank)
			if len(v.Peers) != len(nodes)-1 {
				agree = false // still learning the members
			}
			if i == 0 {
				first = got
			} else if !reflect.DeepEqual(got, first) {
				agree = false
			}
		}
		if agree && len(first) == want {
			advertised := 0
			for _, m := range nodes[0].o.Members() {
				if slices.Contains(first, m.Name) && m.Meta.DBs[0].Role == RoleRelay {
					advertised++
				}
			}
			if advertised == want {
				return first
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no agreement on %d relays of %s after 60s; first node sees %v", want, dc, first)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRelaysThroughOverlay: proxies in two data centres elect two relays
// each through real gossip, all agreeing; a relay that crashes is
// replaced (the other keeps its seat) and the change is notified; a
// proxy that joins later does not displace a serving relay.
func TestRelaysThroughOverlay(t *testing.T) {
	seed := startRelayNode(t, "p1", "ams")
	ams := []*relayNode{seed}
	for _, name := range []string{"p2", "p3", "p4"} {
		ams = append(ams, startRelayNode(t, name, "ams", seed.o.Addr()))
	}
	fra := []*relayNode{startRelayNode(t, "q1", "fra", seed.o.Addr()), startRelayNode(t, "q2", "fra", seed.o.Addr()), startRelayNode(t, "q3", "fra", seed.o.Addr())}
	// (Which two depends on who saw whom first: the first proxies take
	// the free seats and keep them.)
	first := agreedRelays(t, ams, "ams", 2)
	agreedRelays(t, fra, "fra", 2)

	// A relay crashes (not the seed, through which the last node joins):
	// the survivors elect another, the other relay stays.
	lost := ams[slices.IndexFunc(ams, func(n *relayNode) bool { return n != seed && slices.Contains(first, n.name) })]
	var rest []*relayNode
	for _, n := range ams {
		if n != lost {
			rest = append(rest, n)
		}
	}
	changed := rest[0].o.Changed()
	lost.crash()
	select {
	case <-changed:
	case <-time.After(60 * time.Second):
		t.Fatal("no change notified in 60s after a relay crashed")
	}
	second := agreedRelays(t, rest, "ams", 2)
	kept := first[0]
	if kept == lost.name {
		kept = first[1]
	}
	if slices.Contains(second, lost.name) || !slices.Contains(second, kept) {
		t.Fatalf("after %s crashed: relays %v (were %v)", lost.name, second, first)
	}

	// A proxy ranked below both relays joins: they keep their seats.
	var low string
	for i := 5; low == ""; i++ {
		if name := fmt.Sprintf("p%d", i); RelayRank(name) < RelayRank(second[0]) {
			low = name
		}
	}
	rest = append(rest, startRelayNode(t, low, "ams", seed.o.Addr()))
	if got := agreedRelays(t, rest, "ams", 2); !reflect.DeepEqual(got, second) {
		t.Fatalf("after %s joined: relays %v, want still %v", low, got, second)
	}
}
