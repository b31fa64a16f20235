package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/quicksilver-kv/qs/internal/store"
)

// A simulated fleet for the overlay tests: real overlays and agents on
// loopback (so real gossip, real probes and Vivaldi), with the replication
// streams simulated by world: a replica "streams" from a source when the
// source is alive, reachable and has room, as a repl.Server would decide.

var simDB = store.DBID{0xd, 0xb}

type world struct {
	t           *testing.T
	maxChildren int
	// probeInterval is every member's probe interval, and so the time a
	// direct probe may take before it counts as missed. Default 100ms.
	probeInterval time.Duration

	mu       sync.Mutex
	nodes    map[string]*simNode
	byGossip map[string]string // gossip address → name
	delay    map[[2]string]time.Duration
	cut      map[[2]string]bool // unordered pairs that cannot talk
	mute     map[[2]string]bool // from, to: from's gossip packets to to are lost
}

type simNode struct {
	w     *world
	name  string
	root  bool
	o     *Overlay
	agent *Agent
	// replica state, under w.mu
	source string // name; "" detached
	dead   bool
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newWorld(t *testing.T, maxChildren int) *world {
	return &world{t: t, maxChildren: maxChildren, probeInterval: 100 * time.Millisecond, nodes: map[string]*simNode{}, byGossip: map[string]string{},
		delay: map[[2]string]time.Duration{}, cut: map[[2]string]bool{}, mute: map[[2]string]bool{}}
}

func replAddr(name string) string { return name + ":7390" }

func testLog(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// link is the Link of member from.
func (w *world) link(from string) Link {
	return func(addr string) (time.Duration, bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		to := w.byGossip[addr]
		return w.delay[[2]string{from, to}], w.cut[pair(from, to)] || w.mute[[2]string{from, to}]
	}
}

// setMute loses (or, mute false, delivers again) the gossip packets and
// streams from member from to member to, one way; replication streams
// are not touched.
func (w *world) setMute(from, to string, mute bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mute[[2]string{from, to}] = mute
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// setDelay puts d on the link between a and b, both ways.
func (w *world) setDelay(a, b string, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.delay[[2]string{a, b}], w.delay[[2]string{b, a}] = d, d
}

// add starts a member; seeds are names of members to join through.
func (w *world) add(name string, root bool, seeds ...string) *simNode {
	w.t.Helper()
	return w.addNode(&simNode{w: w, name: name, root: root}, false, seeds...)
}

// addNode starts n; a static replica's agent only reports its position.
func (w *world) addNode(n *simNode, static bool, seeds ...string) *simNode {
	w.t.Helper()
	name, root := n.name, n.root
	var join []string
	w.mu.Lock()
	for _, s := range seeds {
		join = append(join, w.nodes[s].o.Addr())
	}
	w.mu.Unlock()
	o, err := Start(Config{NodeName: name, Bind: "127.0.0.1:0", Join: join, ProbeInterval: w.probeInterval,
		RejoinInterval: 500 * time.Millisecond, Link: w.link(name), Log: testLog(w.t)}, Meta{})
	if err != nil {
		w.t.Fatal(err)
	}
	n.o = o
	w.mu.Lock()
	w.nodes[name] = n
	w.byGossip[o.Addr()] = name
	w.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	if !root {
		n.agent = NewAgent(AgentConfig{Database: "db", ID: simDB, Static: static, Interval: 100 * time.Millisecond, AvoidFor: time.Second}, o, testLog(w.t))
		n.wg.Add(2)
		go func() { defer n.wg.Done(); n.agent.Run(ctx, n) }()
		go func() { defer n.wg.Done(); n.replicate(ctx) }()
	}
	n.wg.Add(2)
	go func() { defer n.wg.Done(); n.advertise(ctx) }()
	go func() { defer n.wg.Done(); o.Rejoin(ctx, join) }()
	w.t.Cleanup(n.stop)
	return n
}

func (n *simNode) stop() {
	n.cancel()
	n.wg.Wait()
	n.o.Leave(100 * time.Millisecond)
}

// kill stops a member at once (no leave): its children lose their stream.
func (w *world) kill(name string) {
	n := w.nodes[name]
	n.cancel()
	n.wg.Wait()
	n.o.crash()
	w.mu.Lock()
	n.dead, n.source = true, ""
	for _, c := range w.nodes {
		if c.source == name {
			c.source = ""
		}
	}
	w.mu.Unlock()
}

func (n *simNode) advertise(ctx context.Context) {
	for {
		w := n.w
		d := DBMeta{Name: "db", ID: simDB, MaxChildren: w.maxChildren}
		w.mu.Lock()
		d.Children = w.childrenLocked(n.name)
		w.mu.Unlock()
		if n.root {
			d.Role = RoleRoot
		} else {
			d.Role = RoleReplica
			if depth, path := n.agent.Position(); depth > 0 {
				d.Depth, d.Path = depth, path
			}
		}
		n.o.SetLocal(Meta{Repl: replAddr(n.name), DBs: []DBMeta{d}})
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (w *world) childrenLocked(name string) int {
	k := 0
	for _, c := range w.nodes {
		if c.source == name {
			k++
		}
	}
	return k
}

// replicate is the simulated replica's Run: when detached, it tries the
// agent's sources in order, as repl.Replica does.
func (n *simNode) replicate(ctx context.Context) {
	w := n.w
	for ctx.Err() == nil {
		w.mu.Lock()
		attached := n.source != ""
		w.mu.Unlock()
		if !attached {
			for _, addr := range n.agent.Sources() {
				if w.connect(n, addr) {
					break
				}
				n.agent.Failed(addr)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// connect is the source's handshake: refused when it is dead, cut off,
// full or this node itself, and when its agent refuses (detached, cycle).
// As in repl.Server, the agent is asked first and the child's slot is
// then taken in one step with the check that the source has room.
func (w *world) connect(n *simNode, addr string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, s := range w.nodes {
		if replAddr(name) != addr {
			continue
		}
		if s.dead || s == n || w.cut[pair(n.name, name)] {
			return false
		}
		if s.agent != nil {
			w.mu.Unlock() // the agent asks the replica (Source) under w.mu
			err := s.agent.AcceptChild(n.name)
			w.mu.Lock()
			if err != nil || n.source != "" || s.dead || w.cut[pair(n.name, name)] {
				return false
			}
		}
		if w.childrenLocked(name) >= w.maxChildren {
			return false // full
		}
		n.source = name
		return true
	}
	return false
}

// Replica, for the agent.
func (n *simNode) Source() (string, bool) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	if n.source == "" {
		return "", false
	}
	return replAddr(n.source), true
}
func (n *simNode) Applied() uint64    { return 0 }
func (n *simNode) Lag() time.Duration { return 0 }
func (n *simNode) Reconnect() {
	n.w.mu.Lock()
	n.source = ""
	n.w.mu.Unlock()
}

// SourcePath is the chain of sources above n, as the Path messages of
// real streams would tell it a few milliseconds after each move: up to a
// root, a node between sources, or n itself (a cycle).
func (n *simNode) SourcePath() []uint64 {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	var p []uint64
	for s := n.source; s != "" && len(p) < maxPath; s = n.w.nodes[s].source {
		p = append(p, NodeID(s))
		if s == n.name {
			break
		}
	}
	return p
}

// partition cuts every link (gossip and streams) between the two groups.
func (w *world) partition(a, b []string, cut bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range a {
		for _, y := range b {
			if cut {
				w.cut[pair(x, y)] = true
			} else {
				delete(w.cut, pair(x, y))
			}
		}
	}
	if !cut {
		return
	}
	for _, n := range w.nodes {
		if n.source != "" && w.cut[pair(n.name, n.source)] {
			n.source = ""
		}
	}
}

// check reports why the live nodes' streams do not form trees (cycles,
// overfull sources), and how many replicas are attached under the root.
func (w *world) check() (underRoot int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, n := range w.nodes {
		if n.dead {
			continue
		}
		if k := w.childrenLocked(name); k > w.maxChildren {
			return 0, fmt.Errorf("%s has %d children, over %d", name, k, w.maxChildren)
		}
		if n.root || n.source == "" {
			continue
		}
		at, hops := n, 0
		chain := []string{name}
		for at != nil && !at.root && at.source != "" {
			if hops++; hops > len(w.nodes) {
				return 0, fmt.Errorf("%s: cycle through its sources: %s", name, strings.Join(chain, " → "))
			}
			chain = append(chain, at.source)
			at = w.nodes[at.source]
		}
		if at != nil && at.root {
			underRoot++
		}
	}
	return underRoot, nil
}

// waitAllUnderRoot polls until every live replica hangs under the root,
// failing at once on a cycle or an overfull source.
func (w *world) waitAllUnderRoot(t *testing.T, replicas int, what string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := w.check()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n == replicas {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d replicas under the root after 60s", what, n, replicas)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (w *world) sourceOf(name string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nodes[name].source
}

// TestRTTAwareSourceChoice: with latency injected on the gossip links, a
// replica chooses the nearest source with room, and moves when that
// source becomes much slower than another.
func TestRTTAwareSourceChoice(t *testing.T) {
	w := newWorld(t, 16)
	// Round trips up to 120 ms below stay well inside the probe interval,
	// also in a race build on a busy machine: slow sources are slower,
	// never silent, so every move here is for RTT.
	w.probeInterval = 300 * time.Millisecond
	w.add("root", true)
	// a and b stream from the root by configuration: they stay there
	// while c, which finds its own sources, moves.
	w.addNode(&simNode{w: w, name: "a", source: "root"}, true, "root")
	w.addNode(&simNode{w: w, name: "b", source: "root"}, true, "root")
	w.waitAllUnderRoot(t, 2, "a and b")
	// The members on a line, so that Vivaldi can place them exactly
	// (delays that break the triangle inequality leave its estimates a
	// compromise): one-way delays put b at -30 ms, the root at 0 and a at
	// +30 ms; c starts at a's place.
	w.setDelay("a", "root", 30*time.Millisecond)
	w.setDelay("b", "root", 30*time.Millisecond)
	w.setDelay("a", "b", 60*time.Millisecond)
	for _, other := range []string{"root", "a", "b"} {
		w.setDelay("c", other, map[string]time.Duration{"root": 30 * time.Millisecond, "a": 0, "b": 60 * time.Millisecond}[other])
	}
	w.add("c", false, "root")
	waitSource(t, w, "c", "a", "the near source")

	before := sourceChanges(w, "c", "slower")
	// c moves to b's place. a's round trip (120 ms) stays under the probe
	// interval: a is slower, not silent, so the move is for RTT and not
	// for suspicion.
	w.setDelay("c", "a", 60*time.Millisecond)
	w.setDelay("c", "b", 0)
	waitSource(t, w, "c", "b", "the source that became near")
	// The agent counts the move at its next review of the new stream.
	deadline := time.Now().Add(60 * time.Second)
	for sourceChanges(w, "c", "slower") <= before {
		if time.Now().After(deadline) {
			t.Fatal("the move was not counted as reason slower")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := w.check(); err != nil {
		t.Fatal(err)
	}
}

func waitSource(t *testing.T, w *world, node, want, what string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for w.sourceOf(node) != want {
		if time.Now().After(deadline) {
			var rtts []string
			for _, m := range w.nodes[node].o.Members() {
				rtts = append(rtts, fmt.Sprintf("%s=%v", m.Name, m.RTT))
			}
			t.Fatalf("%s streams from %q after 60s, want %s (%s); estimates %v", node, w.sourceOf(node), want, what, rtts)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sourceChanges reads source_changes_total of node's overlay for reason.
func sourceChanges(w *world, node, reason string) float64 {
	w.mu.Lock()
	o := w.nodes[node].o
	w.mu.Unlock()
	return testutil.ToFloat64(o.m.sourceChanges.WithLabelValues("db", reason))
}

// TestPartitionedOverlay: a partition splits the overlay and the streams
// across it. The side without the root has no source whose path reaches
// a live root: it waits, detached, and no cycle forms on either side, no
// source goes over its limit. Once the partition heals, the halves merge
// and every replica hangs under the root again.
func TestPartitionedOverlay(t *testing.T) {
	w := newWorld(t, 2)
	w.add("root", true)
	names := []string{"n1", "n2", "n3", "n4", "n5", "n6"}
	for _, n := range names {
		w.add(n, false, "root")
	}
	w.waitAllUnderRoot(t, 6, "formation")

	sideA, sideB := []string{"root", "n1", "n2", "n3"}, []string{"n4", "n5", "n6"}
	w.partition(sideA, sideB, true)
	// Watch the partitioned fleet for a while: side A re-forms under the
	// root, side B never forms a cycle.
	deadline := time.Now().Add(60 * time.Second)
	for {
		under, err := w.check()
		if err != nil {
			t.Fatalf("during the partition: %v", err)
		}
		if under == 3 && w.nodes["n4"].o.live.Load() <= 3 {
			break // side A re-formed, side B sees only itself
		}
		if time.Now().After(deadline) {
			t.Fatalf("during the partition: %d replicas under the root after 60s, n4 sees %d members", under, w.nodes["n4"].o.live.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for range 20 { // and a little longer, checking each round
		if _, err := w.check(); err != nil {
			t.Fatalf("during the partition: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	w.partition(sideA, sideB, false)
	w.waitAllUnderRoot(t, 6, "after the partition healed")
}

// streamingFrom is a Replica streaming from addr.
type streamingFrom string

func (s streamingFrom) Source() (string, bool) { return string(s), true }
func (streamingFrom) Applied() uint64          { return 0 }
func (streamingFrom) Lag() time.Duration       { return 0 }
func (streamingFrom) Reconnect()               {}
func (streamingFrom) SourcePath() []uint64     { return nil }

// TestAcceptChildWithItsSourceOutOfView: a node whose source has left
// its view of the overlay (taken for dead, until its next review moves
// it) checks a child against the path it last learned from that same
// source: its source, an ancestor, is refused; another node is taken.
// With no path learned from the source it streams from, it takes no
// child at all.
func TestAcceptChildWithItsSourceOutOfView(t *testing.T) {
	w := newWorld(t, 4)
	w.add("root", true)
	n1 := w.add("n1", false, "root")
	w.waitAllUnderRoot(t, 1, "formation")
	// An agent of n1's overlay that only this test reviews.
	a := NewAgent(AgentConfig{Database: "db", ID: simDB, Interval: time.Hour}, n1.o, testLog(t))
	r := streamingFrom(replAddr("root"))
	a.mu.replica = r
	a.review(r)
	if err := a.AcceptChild("n9"); err != nil {
		t.Fatalf("with its source in view, n1 refused a new node: %v", err)
	}
	n1.o.mu.Lock()
	delete(n1.o.mu.nodes, "root") // as when the root is declared dead
	n1.o.mu.Unlock()
	if err := a.AcceptChild("root"); !errors.Is(err, ErrCycle) {
		t.Fatalf("its source out of view, n1 answered its own source %v, want ErrCycle", err)
	}
	if err := a.AcceptChild("n9"); err != nil {
		t.Fatalf("its source out of view, n1 refused a new node: %v", err)
	}
	a.mu.Lock()
	a.mu.replica = streamingFrom("elsewhere:7390")
	a.mu.Unlock()
	if err := a.AcceptChild("n9"); !errors.Is(err, ErrCycle) {
		t.Fatalf("streaming from a source it learned no path from, n1 answered %v, want ErrCycle", err)
	}
}
