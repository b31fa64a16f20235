package raftroot

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
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

// heldCluster starts a one-member cluster (tweak, if not nil, adjusts
// its configuration) whose loop the returned gate can hold after it
// persists an entry, and returns the gate, the cluster and its leader.
func heldCluster(t *testing.T, tweak func(*Config)) (*gate, *cluster, *member) {
	g := newGate()
	c := newCluster(t, 1, func(cfg *Config) {
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
// free again.
func TestWriteTimesOutWhileLoopBusy(t *testing.T) {
	g, _, m := heldCluster(t, func(cfg *Config) { cfg.ProposalTimeout = 300 * time.Millisecond })
	ctx := context.Background()
	if _, err := m.node.Write(ctx, put("a", "1")); err != nil {
		t.Fatal(err)
	}
	g.writeHeld(t, m.node, put("b", "1")) // holds the loop once committed
	// The loop is freed a minute later at most; the write must be
	// answered by its timeout before that.
	var released atomic.Bool
	free := time.AfterFunc(60*time.Second, func() { released.Store(true); g.release() })
	_, err := m.node.Write(ctx, put("c", "1"))
	if released.Load() {
		t.Fatalf("write answered only once the loop was free (proposal timeout 300ms): %v", err)
	}
	free.Stop()
	g.release()
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
	var err error
	select {
	case err = <-errc:
	case <-time.After(60 * time.Second):
		t.Fatal("write not answered when its member stopped")
	}
	g.release()
	<-stopped
	m.stop()
	m = c.start(m.id, m.dir, false)
	c.leader()
	c.waitConverged()
	_, found := lookup(t, m.st, "k")
	t.Logf("answer %v; applied: %v", err, found)
	if found && (err == nil || errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded)) {
		t.Fatalf("the write was applied, but its proposer was answered %v (want a timeout: outcome unknown)", err)
	}
}

// A write proposed again after a leader change can be in the log twice.
// If its first copy fails its condition and a later write makes the
// condition true before the second copy, the second copy applies: the
// proposer must not be told that its condition failed.
func TestReproposedWriteNotReportedFailed(t *testing.T) {
	g, _, m := heldCluster(t, nil)
	n := m.node
	ctx := context.Background()
	if _, err := n.Write(ctx, put("k", "old")); err != nil {
		t.Fatal(err)
	}
	// Create k only if it does not exist: it does.
	create := put("k", "new")
	create.Conds = []store.Cond{{Key: []byte("k"), Index: 0}}
	create.ID = []byte("create-k")
	errc := g.writeHeld(t, n, create) // the first copy is committed, not yet applied
	// Another producer deletes k; its proposal waits for the loop.
	go n.Write(ctx, store.Batch{Ops: []wal.Op{{Type: wal.OpDelete, Key: []byte("k")}}})
	waitProps := func(want int) {
		for deadline := time.Now().Add(60 * time.Second); len(n.props) < want; {
			if time.Now().After(deadline) {
				t.Fatalf("%d proposals queued, want %d", len(n.props), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitProps(1)
	// The proposer sees a leader change and proposes its write again.
	n.mu.Lock()
	close(n.mu.leaderCh)
	n.mu.leaderCh = make(chan struct{})
	n.mu.Unlock()
	waitProps(2)
	g.armed.Store(false)
	g.release()
	var err error
	select {
	case err = <-errc:
	case <-time.After(60 * time.Second):
		t.Fatal("write not answered")
	}
	// The second copy, proposed by now, commits after the delete.
	var v string
	var found bool
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if v, found = lookup(t, m.st, "k"); v == "new" {
			break
		}
	}
	t.Logf("answer %v; k=%q (exists %v)", err, v, found)
	if v == "new" && errors.Is(err, store.ErrConditionFailed) {
		t.Fatalf("the write was applied (k=%q) but its proposer was told: %v", v, err)
	}
}

// Members whose limits differ (a rolling change of max_value_bytes, one
// member at a time) apply the same commands alike: the limits are the
// proposer's admission check, not a judgement each member makes of a
// committed command, or a member refuses a write the others apply and the
// logs fork.
func TestMembersWithOtherLimitsApplyAlike(t *testing.T) {
	dir := t.TempDir()
	c := &cluster{t: t, members: map[uint64]*member{}, peers: map[uint64]string{},
		storeTweak: func(id uint64, o *store.Options) {
			if id == 3 {
				o.MaxValueBytes, o.MaxBatchBytes = 100, 100
			}
		}}
	copy(c.dbid[:], "raftroot-test-id")
	for i := uint64(1); i <= 3; i++ {
		c.peers[i] = freeAddr(t)
	}
	for i := uint64(1); i <= 3; i++ {
		c.start(i, filepath.Join(dir, fmt.Sprint(i)), false)
	}
	c.leader()
	ctx := context.Background()
	via := c.members[1]
	big := strings.Repeat("x", 200)
	if _, err := via.node.Write(ctx, put("big", big)); err != nil {
		t.Fatal(err)
	}
	if _, err := via.node.Write(ctx, put("after", "v")); err != nil {
		t.Fatal(err)
	}
	c.waitConverged()
	c.checkDigests()
	// The member with the lower limit refuses such a write itself.
	if _, err := c.members[3].node.Write(ctx, put("big2", big)); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("write over member 3's limit proposed through it: %v", err)
	}
}
