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
