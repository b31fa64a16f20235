package raftroot

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// gate blocks a member's loop in AfterPersist (after a Ready is durable,
// before its committed entries are applied) once armed, until opened.
type gate struct {
	armed   atomic.Bool
	blocked chan struct{} // closed when the loop is held
	open    chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{blocked: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) afterPersist(uint64) {
	if !g.armed.Load() {
		return
	}
	g.once.Do(func() { close(g.blocked) })
	<-g.open
}

func (g *gate) release() {
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// heldCluster starts a one-member simulated cluster (tweak, if not nil,
// adjusts its configuration) whose loop the returned gate can hold after
// it persists an entry, and returns the gate, the cluster and its leader.
func heldCluster(t *testing.T, tweak func(*Config)) (*gate, *simCluster, *simMember) {
	g := newGate()
	c := newSimCluster(t, 1, 21, func(cfg *Config) {
		cfg.AfterPersist = g.afterPersist
		if tweak != nil {
			tweak(cfg)
		}
	})
	t.Cleanup(g.release) // before the member stops
	return g, c, c.leader()
}

// writeHeld arms the gate, starts writing b through n, and returns once
// the loop is held after persisting the write's entry; the write's answer
// comes on the channel.
func (g *gate) writeHeld(t *testing.T, n *Node, b store.Batch) <-chan error {
	t.Helper()
	g.armed.Store(true)
	errc := make(chan error, 1)
	go func() {
		_, err := n.Write(context.Background(), b)
		errc <- err
	}()
	select {
	case <-g.blocked:
	case <-time.After(60 * time.Second):
		t.Fatal("loop not held")
	}
	return errc
}

// waitProps waits until at least want proposals wait for n's held loop.
func waitProps(t *testing.T, n *Node, want int) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); len(n.props) < want; {
		if time.Now().After(deadline) {
			t.Fatalf("%d proposals queued, want %d", len(n.props), want)
		}
		runtime.Gosched()
	}
}

// answerOf waits for a write's answer.
func answerOf(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("write not answered")
		return nil
	}
}

// lookup returns the value of key in st, and whether it exists.
func lookup(t *testing.T, st *store.Store, key string) (string, bool) {
	t.Helper()
	var val string
	var found bool
	if _, err := st.Lookup([][]byte{[]byte(key)}, func(_ uint64, _ int, v []byte, _ uint64, f bool) error {
		val, found = string(v), f
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return val, found
}

// A write to a member whose loop is busy (applying a large batch, fetching
// a snapshot, retrying a full disk, or stopped after its Raft storage
// failed) is answered within its proposal timeout, not when the loop is
// free again: here, answered while the loop is still held.
func TestWriteTimesOutWhileLoopBusy(t *testing.T) {
	const timeout = 300 * time.Millisecond
	g, c, m := heldCluster(t, func(cfg *Config) { cfg.ProposalTimeout = timeout })
	c.mustWrite(m, "a", "1")
	g.writeHeld(t, m.node, put("b", "1")) // holds the loop once committed
	errc := make(chan error, 1)
	go func() {
		_, err := m.node.Write(context.Background(), put("c", "1"))
		errc <- err
	}()
	waitProps(t, m.node, 1) // the write waits for the held loop
	c.clock.Advance(timeout)
	err := answerOf(t, errc)
	select {
	case <-g.open:
		t.Fatal("the loop was released before the write was answered")
	default:
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write on a held member answered %v, want a timeout (outcome unknown)", err)
	}
}

// A write whose proposal Raft took, answered because its member stops,
// may still commit: its answer must say "outcome unknown" (a timeout), not
// ErrUnavailable, which says nothing was proposed (HTTP 503: safe to retry
// without a batch ID).
func TestStopAfterProposalIsOutcomeUnknown(t *testing.T) {
	g, c, m := heldCluster(t, nil)
	errc := g.writeHeld(t, m.node, put("k", "v")) // durable in the Raft log and committed
	stopped := make(chan struct{})
	go func() { m.node.Stop(); close(stopped) }()
	err := answerOf(t, errc)
	g.release()
	<-stopped
	m.stop()
	m = c.start(m.id)
	c.leader()
	c.converge()
	_, found := lookup(t, m.st, "k")
	t.Logf("answer %v; applied: %v", err, found)
	if !found {
		t.Fatal("the write, committed before its member stopped, is not applied after the restart")
	}
	if err == nil || errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the write was applied, but its proposer was answered %v (want a timeout: outcome unknown)", err)
	}
}

// A write proposed again after a leader change can be in the log twice.
// If its first copy fails its condition and a later write makes the
// condition true before the second copy, the second copy applies: the
// proposer must not be told that its condition failed.
func TestReproposedWriteNotReportedFailed(t *testing.T) {
	g, c, m := heldCluster(t, nil)
	n := m.node
	c.mustWrite(m, "k", "old")
	// Create k only if it does not exist: it does.
	create := put("k", "new")
	create.Conds = []store.Cond{{Key: []byte("k"), Index: 0}}
	create.ID = []byte("create-k")
	errc := g.writeHeld(t, n, create) // the first copy is committed, not yet applied
	// Another producer deletes k; its proposal waits for the loop.
	del := c.write(m, store.Batch{Ops: []wal.Op{{Type: wal.OpDelete, Key: []byte("k")}}})
	waitProps(t, n, 1)
	// The proposer sees a leader change and proposes its write again.
	n.mu.Lock()
	close(n.mu.leaderCh)
	n.mu.leaderCh = make(chan struct{})
	n.mu.Unlock()
	waitProps(t, n, 2)
	g.armed.Store(false)
	g.release()
	err := answerOf(t, errc)
	c.await(del)
	// The second copy commits after the delete.
	c.stabilize()
	v, found := lookup(t, m.st, "k")
	t.Logf("answer %v; k=%q (exists %v)", err, v, found)
	if v != "new" {
		t.Fatalf("k=%q (exists %v): the second copy did not apply after the delete; the test did not make its case", v, found)
	}
	if errors.Is(err, store.ErrConditionFailed) {
		t.Fatalf("the write was applied (k=%q) but its proposer was told: %v", v, err)
	}
}

// Members whose limits differ (a rolling change of max_value_bytes, one
// member at a time) apply the same commands alike: the limits are the
// proposer's admission check, not a judgement each member makes of a
// committed command, or a member refuses a write the others apply and the
// logs fork.
func TestMembersWithOtherLimitsApplyAlike(t *testing.T) {
	c := newSimClusterStopped(t, 3, 22, nil)
	c.storeTweak = func(id uint64, o *store.Options) {
		if id == 3 {
			o.MaxValueBytes, o.MaxBatchBytes = 100, 100
		}
	}
	for _, id := range c.ids() {
		c.start(id)
	}
	c.leader()
	via := c.members[1]
	big := strings.Repeat("x", 200)
	c.mustWrite(via, "big", big)
	c.mustWrite(via, "after", "v")
	c.converge()
	// The member with the lower limit refuses such a write itself.
	if a := c.await(c.write(c.members[3], put("big2", big))); !errors.Is(a.err, store.ErrTooLarge) {
		t.Fatalf("write over member 3's limit proposed through it: %v", a.err)
	}
}
