package discovery

import (
	"reflect"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
)

var (
	poolID  = store.DBID{1}
	otherID = store.DBID{2}
)

// poolMember is a member serving "default" with the given role.
func poolMember(name, dc string, role Role, rtt time.Duration) Member {
	return Member{Name: name, RTT: rtt, Meta: Meta{DC: dc, Repl: name + ":7390",
		DBs: []DBMeta{{Name: "default", ID: poolID, Role: role}}}}
}

func TestFullReplicas(t *testing.T) {
	ms := []Member{
		poolMember("root", "x", RoleRoot, 40*time.Millisecond),
		poolMember("far", "x", RoleReplica, 90*time.Millisecond),
		poolMember("near", "a", RoleReplica, 2*time.Millisecond),
		poolMember("unknown", "a", RoleReplica, -1),
		poolMember("tie-b", "a", RoleReplica, 5*time.Millisecond),
		poolMember("tie-a", "a", RoleReplica, 5*time.Millisecond),
		poolMember("proxy", "a", RoleProxy, time.Millisecond),
		poolMember("relay", "a", RoleRelay, time.Millisecond),
	}
	suspect := poolMember("suspect", "a", RoleReplica, time.Millisecond)
	suspect.Suspect = true
	self := poolMember("self", "a", RoleReplica, 0)
	self.Self = true
	noRepl := poolMember("norepl", "a", RoleReplica, time.Millisecond)
	noRepl.Meta.Repl = ""
	otherDB := poolMember("otherdb", "a", RoleReplica, time.Millisecond)
	otherDB.Meta.DBs[0].ID = otherID
	otherName := poolMember("othername", "a", RoleReplica, time.Millisecond)
	otherName.Meta.DBs[0].Name = "other"
	ms = append(ms, suspect, self, noRepl, otherDB, otherName)

	names := func(es []Endpoint) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Name)
		}
		return out
	}
	if got, want := names(FullReplicas(ms, "default", poolID, 10)), []string{"near", "tie-a", "tie-b", "root", "far", "unknown", "suspect"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("all: got %v, want %v", got, want)
	}
	// Every replica suspect (this member's probes lost on the way): they
	// are still the pool, nearest first, not nothing.
	allSuspect := []Member{suspect, poolMember("far-suspect", "a", RoleReplica, 50*time.Millisecond), self}
	allSuspect[1].Suspect = true
	if got, want := names(FullReplicas(allSuspect, "default", poolID, 3)), []string{"suspect", "far-suspect"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("all suspect: got %v, want %v", got, want)
	}
	if got, want := names(FullReplicas(ms, "default", poolID, 2)), []string{"near", "tie-a"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("2 nearest: got %v, want %v", got, want)
	}
	if got := FullReplicas(ms, "default", poolID, 0); len(got) != 0 {
		t.Fatalf("n=0: %v", got)
	}
	if got := FullReplicas(ms, "default", poolID, -1); len(got) != 0 {
		t.Fatalf("n=-1: %v", got)
	}
	if got := FullReplicas(ms, "missing", poolID, 5); len(got) != 0 {
		t.Fatalf("a database nobody serves: %v", got)
	}
	if got := FullReplicas(ms, "default", poolID, 1); got[0].Repl != "near:7390" {
		t.Fatalf("endpoint %+v", got[0])
	}
}

func TestChoosePool(t *testing.T) {
	// Proxies of data centre "a", in rank order: the first two are its
	// relays (two seats).
	ps := byRank("pa", "pb", "pc", "pd")
	base := []Member{
		poolMember("r1", "a", RoleReplica, 3*time.Millisecond),
		poolMember("r2", "b", RoleReplica, 30*time.Millisecond),
		poolMember("root", "b", RoleRoot, 20*time.Millisecond),
		poolMember("remote-proxy", "b", RoleProxy, time.Millisecond),
	}
	for _, p := range ps {
		base = append(base, poolMember(p, "a", RoleProxy, time.Millisecond))
	}
	as := func(self string, mutate func([]Member)) []Member {
		ms := append([]Member(nil), base...)
		for i := range ms {
			ms[i].Self = ms[i].Name == self
			if ms[i].Self {
				ms[i].RTT = 0
			}
		}
		if mutate != nil {
			mutate(ms)
		}
		return ms
	}
	repl := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, n+":7390")
		}
		return out
	}
	cases := []struct {
		name string
		ms   []Member
		n    int
		want PoolMembers
	}{
		{name: "a proxy: its data centre's relays, then the nearest replicas", ms: as(ps[3], nil), n: 2,
			want: PoolMembers{Preferred: repl(ps[0], ps[1]), Fallback: repl("r1", "root")}},
		{name: "a relay: the replicas, never the other relay", ms: as(ps[0], nil), n: 3,
			want: PoolMembers{Preferred: repl("r1", "root", "r2"), Relay: true}},
		{name: "a relay dies: the next proxy is elected", ms: as(ps[3], func(ms []Member) {
			for i := range ms {
				if ms[i].Name == ps[0] {
					ms = append(ms[:i], ms[i+1:]...)
					break
				}
			}
		}), n: 1, want: PoolMembers{Preferred: repl(ps[1], ps[2]), Fallback: repl("r1")}},
		{name: "a suspect relay keeps its seat but is not asked", ms: as(ps[3], func(ms []Member) {
			for i := range ms {
				if ms[i].Name == ps[0] || ms[i].Name == ps[1] {
					ms[i].Meta.DBs = []DBMeta{{Name: "default", ID: poolID, Role: RoleRelay}}
					ms[i].Suspect = ms[i].Name == ps[1]
				}
			}
		}), n: 1, want: PoolMembers{Preferred: repl(ps[0]), Fallback: repl("r1")}},
		{name: "no relay alive: fall-backs only", ms: []Member{
			poolMember("r1", "a", RoleReplica, time.Millisecond),
			func() Member { m := poolMember("me", "a", RoleProxy, 0); m.Self, m.Meta.Repl = true, ""; return m }(),
		}, n: 3, want: PoolMembers{Fallback: repl("r1")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ChoosePool(c.ms, "default", poolID, "a", 2, c.n)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}
