package discovery

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// pathReplica is a Replica streaming from addr whose source sent path.
type pathReplica struct {
	addr string

	mu         sync.Mutex
	path       []uint64
	reconnects int
}

func (r *pathReplica) Source() (string, bool) { return r.addr, true }
func (*pathReplica) Applied() uint64          { return 0 }
func (*pathReplica) Lag() time.Duration       { return 0 }
func (r *pathReplica) Reconnect() {
	r.mu.Lock()
	r.reconnects++
	r.mu.Unlock()
}
func (r *pathReplica) SourcePath() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.path
}
func (r *pathReplica) setPath(p ...uint64) {
	r.mu.Lock()
	r.path = p
	r.mu.Unlock()
}

// pathWorld is a root, n1 (whose agent only the test reviews) and n2,
// configured under the root, with n1's view of n2 showing that.
func pathWorld(t *testing.T) (*world, *Agent, *pathReplica) {
	w := newWorld(t, 4)
	w.add("root", true)
	n1 := w.add("n1", false, "root")
	w.addNode(&simNode{w: w, name: "n2", source: "root"}, true, "root")
	w.waitAllUnderRoot(t, 2, "formation")
	deadline := time.Now().Add(60 * time.Second)
	for {
		cands, _ := candidates(n1.o.Members(), AgentConfig{Database: "db", ID: simDB})
		if slices.ContainsFunc(cands, func(c candidate) bool {
			return c.Name == "n2" && slices.Equal(c.Path, []uint64{NodeID("root")})
		}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n1 does not see n2 under the root after 60s: %+v", cands)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// No move for RTT: the root is always nearer by the tiers between.
	a := NewAgent(AgentConfig{Database: "db", ID: simDB, Interval: time.Hour, Policy: Policy{SwitchMin: time.Hour}}, n1.o, testLog(t))
	r := &pathReplica{addr: replAddr("n2")}
	a.mu.replica = r
	return w, a, r
}

// TestAcceptChildJudgesByTheStreamedPath: n1 streams from n2, which has
// just moved below n3 and still advertises its old path (below the root).
// Gossip alone would let n1 take n3, its own new ancestor, as a child: a
// cycle. The path n2 sent over the stream names n3, and n1 refuses it.
func TestAcceptChildJudgesByTheStreamedPath(t *testing.T) {
	_, a, r := pathWorld(t)
	if err := a.AcceptChild("n3"); err != nil {
		t.Fatalf("by gossip alone n1 refused n3: %v", err)
	}
	r.setPath(NodeID("n2"), NodeID("n3"), NodeID("root"))
	if err := a.AcceptChild("n3"); !errors.Is(err, ErrCycle) {
		t.Fatalf("n1 answered n3, an ancestor by the streamed path, %v; want ErrCycle", err)
	}
	if err := a.AcceptChild("n9"); err != nil {
		t.Fatalf("n1 refused a node on neither path: %v", err)
	}
	// Gossip still decides too: a source of an older version sends only
	// itself when its own source sends nothing.
	r.setPath(NodeID("n2"))
	if err := a.AcceptChild("root"); !errors.Is(err, ErrCycle) {
		t.Fatalf("n1 answered the root, an ancestor by gossip, %v; want ErrCycle", err)
	}
}

// TestAgentFollowsTheStreamedPath: the position n1 advertises is the path
// its source sent when that reaches a root (fresher than gossip), gossip's
// when it does not; a streamed path through n1 itself is a cycle, which
// n1 leaves at its next review, advertising no path to the root meanwhile.
func TestAgentFollowsTheStreamedPath(t *testing.T) {
	_, a, r := pathWorld(t)
	a.review(r)
	if d, p := a.Position(); d != 2 || !slices.Equal(p, []uint64{NodeID("n2"), NodeID("root")}) {
		t.Fatalf("by gossip: depth %d path %v, want 2 [n2 root]", d, p)
	}
	r.setPath(NodeID("n2"), NodeID("n3"), NodeID("root"))
	a.review(r)
	if d, p := a.Position(); d != 3 || !slices.Equal(p, []uint64{NodeID("n2"), NodeID("n3"), NodeID("root")}) {
		t.Fatalf("by the streamed path: depth %d path %v, want 3 [n2 n3 root]", d, p)
	}
	if v := testutil.ToFloat64(a.o.m.pathStreamed.WithLabelValues("db")); v != 1 {
		t.Fatalf("qs_discovery_path_streamed = %v with the streamed path deciding, want 1", v)
	}
	r.setPath(NodeID("n2"), NodeID("n3")) // n3 between sources
	a.review(r)
	if d, p := a.Position(); d != 2 || !slices.Equal(p, []uint64{NodeID("n2"), NodeID("root")}) {
		t.Fatalf("with a streamed path reaching no root: depth %d path %v, want gossip's 2 [n2 root]", d, p)
	}
	if v := testutil.ToFloat64(a.o.m.pathStreamed.WithLabelValues("db")); v != 0 {
		t.Fatalf("qs_discovery_path_streamed = %v with gossip deciding, want 0", v)
	}
	if r.reconnects != 0 {
		t.Fatalf("n1 moved %d times without a cycle", r.reconnects)
	}

	r.setPath(NodeID("n2"), NodeID("n1"), NodeID("root"))
	a.review(r)
	a.mu.Lock()
	reason := a.mu.pending
	a.mu.Unlock()
	if r.reconnects != 1 || reason != ReasonCycle {
		t.Fatalf("in a cycle n1 moved %d times, reason %q; want once, %q", r.reconnects, reason, ReasonCycle)
	}
	if d, p := a.Position(); d != 1 || !slices.Equal(p, []uint64{NodeID("n2")}) {
		t.Fatalf("in a cycle: depth %d path %v, want 1 [n2], reaching no root", d, p)
	}
}
