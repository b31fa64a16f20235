package discovery

import (
	"testing"
	"time"
)

// TestAgentPosition: a replica's advertised path is its source's plus
// the source; while it is between sources it advertises none, so nobody
// attaches below it; a source whose path is broken gives a path that
// reaches no root.
func TestAgentPosition(t *testing.T) {
	w := newWorld(t, 4)
	w.add("root", true)
	a := w.add("a", false, "root")
	w.waitAllUnderRoot(t, 1, "a")
	waitPosition(t, a, 1, []uint64{NodeID("root")})

	// b has a static source, a: its agent only reports its position.
	b := &simNode{w: w, name: "b", source: "a"}
	w.addNode(b, true, "root")
	waitPosition(t, b, 2, []uint64{NodeID("a"), NodeID("root")})

	w.mu.Lock()
	a.source = "" // a loses its source; b keeps streaming from a
	a.cancel()    // and stays detached: no replicate loop, no agent
	w.mu.Unlock()
	a.wg.Wait()
	a.agent.review(a)
	if d, p := a.agent.Position(); d != -1 || p != nil {
		t.Fatalf("detached a advertises depth %d path %v", d, p)
	}
	a.o.SetLocal(Meta{Repl: replAddr("a"), DBs: []DBMeta{{Name: "db", ID: simDB, Role: RoleReplica}}})
	waitPosition(t, b, 1, []uint64{NodeID("a")})
}

func waitPosition(t *testing.T, n *simNode, depth int, path []uint64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		d, p := n.agent.Position()
		if d == depth && equalIDs(p, path) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s at depth %d path %v after 60s, want %d %v", n.name, d, p, depth, path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func equalIDs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSuspectSourceLeft: a replica whose source stops answering its
// probes (the source's packets to it are lost, its stream is not) finds
// the source suspect and moves to another source, reason suspect, while
// the stream still runs (the simulated stream never breaks). The source
// it left stays suspect, probed, until it answers again; then the
// replica goes back to it, the nearest.
func TestSuspectSourceLeft(t *testing.T) {
	w := newWorld(t, 16)
	w.add("root", true)
	w.add("a", false, "root")
	w.add("b", false, "root")
	w.waitAllUnderRoot(t, 2, "a and b")
	for other, d := range map[string]time.Duration{"root": 30 * ms, "a": 0, "b": 40 * ms} {
		w.setDelay("c", other, d)
	}
	c := w.add("c", false, "root")
	waitSource(t, w, "c", "a", "the near source")
	// The agent counts a move at its first review of the new stream:
	// wait for the move to a to be counted.
	deadline := time.Now().Add(60 * time.Second)
	for streamed(c) != replAddr("a") {
		if time.Now().After(deadline) {
			t.Fatalf("c's agent saw c streaming from %q after 60s, want a", streamed(c))
		}
		time.Sleep(20 * time.Millisecond)
	}

	before := sourceChanges(w, "c", string(ReasonSuspect))
	w.setMute("a", "c", true)
	deadline = time.Now().Add(60 * time.Second)
	for sourceChanges(w, "c", string(ReasonSuspect)) <= before {
		if time.Now().After(deadline) {
			m, _ := member(c.o, "a")
			t.Fatalf("c streams from %q 60s after a fell silent to it, no move for suspicion counted (a suspect: %v)", w.sourceOf("c"), m.Suspect)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// No longer c's source, a is still probed: its missed probes keep
	// adding up (they would be forgotten with the dependency), and c
	// stays away from it.
	deadline = time.Now().Add(60 * time.Second)
	for w.sourceOf("c") == "a" || misses(c.o, "a") < SuspectAfter+5 {
		if time.Now().After(deadline) {
			t.Fatalf("60s after a fell silent: c streams from %q, a missed %d probes in a row", w.sourceOf("c"), misses(c.o, "a"))
		}
		time.Sleep(20 * time.Millisecond)
	}

	w.setMute("a", "c", false)
	waitSource(t, w, "c", "a", "the near source, answering again")
	deadline = time.Now().Add(60 * time.Second)
	for watched(c.o, "a") {
		if time.Now().After(deadline) {
			t.Fatal("a still watched by c 60s after it answered")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := w.check(); err != nil {
		t.Fatal(err)
	}
}

// streamed is the source address n's agent last saw streaming.
func streamed(n *simNode) string {
	n.agent.mu.Lock()
	defer n.agent.mu.Unlock()
	return n.agent.mu.streamed
}

// misses is how many direct probes in a row member name missed, as o
// counts them.
func misses(o *Overlay, name string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.misses[name]
}

func watched(o *Overlay, name string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.watched[name]
}
