package discovery

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// crash stops o at once, without a goodbye: the others find it silent.
// A later Leave does nothing.
func (o *Overlay) crash() {
	o.leave.Do(func() {
		o.stopChecks()
		o.checking.Wait()
		o.left = o.ml.Shutdown()
	})
}

func depNames(ms []Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

func TestDependencies(t *testing.T) {
	self := poolMember("self", "ams", RoleProxy, 0)
	self.Self = true
	suspectPeer := poolMember("p-suspect", "ams", RoleProxy, time.Millisecond)
	suspectPeer.Suspect = true
	noRepl := poolMember("p-norepl", "ams", RoleProxy, time.Millisecond)
	noRepl.Meta.Repl = ""
	ms := []Member{self, suspectPeer, noRepl,
		poolMember("p-relay", "ams", RoleRelay, time.Millisecond),
		poolMember("p-fra", "fra", RoleProxy, time.Millisecond),
		poolMember("root", "fra", RoleRoot, 90*time.Millisecond),
	}
	// Eight replicas, r1 the nearest; r1 is suspect: it stays checked.
	for i := 1; i <= 8; i++ {
		r := poolMember(fmt.Sprintf("r%d", i), "fra", RoleReplica, time.Duration(i)*time.Millisecond)
		r.Suspect = i == 1
		ms = append(ms, r)
	}
	want := []string{"p-relay", "p-suspect", "r1", "r2", "r3", "r4", "r5", "r6"}
	if got := depNames(Dependencies(ms)); !reflect.DeepEqual(got, want) {
		t.Fatalf("a proxy depends on %v, want %v", got, want)
	}
	for _, m := range Dependencies(ms) {
		if m.Suspect {
			t.Fatalf("dependency %s returned suspect", m.Name)
		}
	}

	// A replica depends on its source only: the first of its path.
	rep := poolMember("self", "ams", RoleReplica, 0)
	rep.Self = true
	rep.Meta.DBs[0].Depth, rep.Meta.DBs[0].Path = 2, []uint64{NodeID("r3"), NodeID("root")}
	ms[0] = rep
	if got := depNames(Dependencies(ms)); !reflect.DeepEqual(got, []string{"r3"}) {
		t.Fatalf("a replica depends on %v, want [r3]", got)
	}
	// Detached, or whose source has left: nothing.
	rep.Meta.DBs[0].Path = []uint64{NodeID("gone")}
	ms[0] = rep
	if got := Dependencies(ms); got != nil {
		t.Fatalf("source gone: depends on %v", depNames(got))
	}
	// No Self member: nothing.
	if got := Dependencies(ms[1:]); got != nil {
		t.Fatalf("without self: depends on %v", depNames(got))
	}
}

func TestSuspectsChanged(t *testing.T) {
	for _, c := range []struct {
		before, after map[string]int
		want          bool
	}{
		{nil, nil, false},
		{nil, map[string]int{"a": SuspectAfter - 1}, false},
		{map[string]int{"a": SuspectAfter - 1}, map[string]int{"a": SuspectAfter}, true},
		{map[string]int{"a": SuspectAfter}, map[string]int{"a": SuspectAfter + 1}, false},
		{map[string]int{"a": SuspectAfter}, nil, true},
		{nil, map[string]int{"b": SuspectAfter}, true},
	} {
		if got := suspectsChanged(c.before, c.after); got != c.want {
			t.Errorf("suspectsChanged(%v, %v) = %v, want %v", c.before, c.after, got, c.want)
		}
	}
}

// silencer is the Link of a member whose packets to one member can be
// lost (its streams still go through: memberlist's fall-back probe over
// TCP keeps it alive).
type silencer struct {
	mu sync.Mutex
	to string // a gossip address
}

func (s *silencer) link(addr string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return 0, addr == s.to
}

func (s *silencer) set(to string) {
	s.mu.Lock()
	s.to = to
	s.mu.Unlock()
}

// startProxy starts a member that is a proxy of database db in data
// centre ams (so that the other proxies of ams are its dependencies).
func startProxy(t *testing.T, cfg Config) *Overlay {
	t.Helper()
	cfg.Bind, cfg.Log = "127.0.0.1:0", testLog(t)
	o, err := Start(cfg, Meta{DC: "ams", Repl: replAddr(cfg.NodeName), DBs: []DBMeta{{Name: "db", ID: simDB, Role: RoleProxy}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Leave(100 * time.Millisecond) })
	return o
}

// member is o's view of member name; false if o does not list it.
func member(o *Overlay, name string) (Member, bool) {
	for _, m := range o.Members() {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}

func waitMembers(t *testing.T, o *Overlay, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for len(o.Members()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s sees %d members after 60s, want %d", o.Name(), len(o.Members()), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSilentMemberSuspectBeforeDead: a member that stops answering is
// reported suspect by the members that depend on it before the overlay
// declares it dead and drops it.
func TestSilentMemberSuspectBeforeDead(t *testing.T) {
	// Slow failure detection (memberlist's probe every 2s) and fast
	// checks: the member is dead only several probe intervals after it
	// falls silent.
	ma := NewMetrics()
	a := startProxy(t, Config{NodeName: "a", ProbeInterval: 2 * time.Second, CheckInterval: 200 * time.Millisecond, Metrics: ma})
	b := startProxy(t, Config{NodeName: "b", Join: []string{a.Addr()}, ProbeInterval: 2 * time.Second})
	startProxy(t, Config{NodeName: "c", Join: []string{a.Addr()}, ProbeInterval: 2 * time.Second})
	waitMembers(t, a, 3)
	deadline := time.Now().Add(60 * time.Second)
	for testutil.ToFloat64(ma.checks.WithLabelValues("answered")) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("a's dependencies never answered its probes in 60s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if m, _ := member(a, "b"); m.Suspect {
		t.Fatal("b suspect while it answers")
	}

	b.crash()
	suspected := false
	deadline = time.Now().Add(60 * time.Second)
	for {
		m, listed := member(a, "b")
		if !listed {
			break
		}
		if m.Suspect {
			suspected = true
			if slices.ContainsFunc(a.DC("db", "ams").Peers, func(e Endpoint) bool { return e.Name == "b" }) {
				t.Fatal("suspect b still among a's peers")
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("b still listed by a 60s after it stopped (suspect seen: %v)", suspected)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !suspected {
		t.Fatal("b left a's member list without ever being reported suspect")
	}
}

// TestSuspectUntilItAnswers: a member that does not answer one member's
// probes (its answers to that member are lost) is suspect there, while
// the overlay keeps it alive through the others; it stops being suspect
// when it answers again. Suspicion changes are notified and counted.
func TestSuspectUntilItAnswers(t *testing.T) {
	ma := NewMetrics()
	a := startProxy(t, Config{NodeName: "a", ProbeInterval: 500 * time.Millisecond, CheckInterval: 200 * time.Millisecond, Metrics: ma})
	var s silencer
	startProxy(t, Config{NodeName: "b", Join: []string{a.Addr()}, ProbeInterval: 500 * time.Millisecond, Link: s.link})
	startProxy(t, Config{NodeName: "c", Join: []string{a.Addr()}, ProbeInterval: 500 * time.Millisecond})
	waitMembers(t, a, 3)

	waitSuspect := func(want bool, what string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			m, listed := member(a, "b")
			if !listed {
				t.Fatalf("%s: b left a's member list", what)
			}
			if m.Suspect == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: b suspect %v after 60s, want %v", what, m.Suspect, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	changed := a.Changed()
	s.set(a.Addr())
	waitSuspect(true, "b does not answer a")
	select {
	case <-changed:
	default:
		t.Fatal("b turned suspect without a change notified")
	}
	deadline := time.Now().Add(60 * time.Second)
	for testutil.ToFloat64(ma.suspects) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("suspect_members %v after 60s, want 1", testutil.ToFloat64(ma.suspects))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if testutil.ToFloat64(ma.checks.WithLabelValues("missed")) < SuspectAfter {
		t.Fatal("missed probes not counted")
	}
	if slices.ContainsFunc(a.DC("db", "ams").Peers, func(e Endpoint) bool { return e.Name == "b" }) {
		t.Fatal("suspect b among a's peers")
	}

	s.set("")
	waitSuspect(false, "b answers again")
	deadline = time.Now().Add(60 * time.Second)
	for !slices.ContainsFunc(a.DC("db", "ams").Peers, func(e Endpoint) bool { return e.Name == "b" }) {
		if time.Now().After(deadline) {
			t.Fatal("b not back among a's peers 60s after it answered")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
