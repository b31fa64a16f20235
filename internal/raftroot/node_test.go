package raftroot

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/store"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Writes through the leader and through followers (forwarded) are applied
// by every member with the same indexes and hashes; a failed condition and
// a duplicate batch id are judged alike everywhere.
func TestWritesReplicateIdentically(t *testing.T) {
	c := newSimCluster(t, 3, 11, nil)
	lead := c.leader()
	f := c.others(lead)[0]
	var writes []*pendingWrite
	for w := 0; w < 4; w++ {
		for i := 0; i < 25; i++ {
			m := lead
			if i%2 == 0 {
				m = f
			}
			writes = append(writes, c.write(m, put(fmt.Sprintf("w%d/%d", w, i), "v")))
		}
	}
	for _, p := range writes {
		if a := c.await(p); a.err != nil {
			t.Fatal(a.err)
		}
	}
	r1 := c.mustWrite(f, "k", "1")
	if !r1.Changed {
		t.Fatalf("write: %+v", r1)
	}
	b := put("k", "2")
	b.Conds = []store.Cond{{Key: []byte("k"), Index: r1.Index + 100}}
	if a := c.await(c.write(lead, b)); !errors.Is(a.err, store.ErrConditionFailed) {
		t.Fatalf("failed condition answered %v", a.err)
	}
	b = put("k", "3")
	b.ID = []byte("batch-1")
	a2 := c.await(c.write(f, b))
	if a2.err != nil {
		t.Fatal(a2.err)
	}
	b.Ops[0].Value = []byte("4")
	a3 := c.await(c.write(lead, b))
	if a3.err != nil || !a3.r.Duplicate || a3.r.Index != a2.r.Index {
		t.Fatalf("duplicate: %+v %v (first %+v)", a3.r, a3.err, a2.r)
	}
	h := c.converge()
	if h.Index != a2.r.Index {
		t.Fatalf("head %d, last write %d", h.Index, a2.r.Index)
	}
	for _, m := range c.running() {
		if s := m.node.Status(); len(s.Members) != 3 || s.Leader != lead.id {
			t.Fatalf("member %d status %+v", m.id, s)
		}
	}
}

// Stopping the leader elects another; writes continue; the old leader
// restarts, catches up and converges.
func TestLeaderStopAndRestart(t *testing.T) {
	c := newSimCluster(t, 3, 12, nil)
	lead := c.leader()
	for i := 0; i < 10; i++ {
		c.mustWrite(lead, fmt.Sprint("a", i), "v")
	}
	lead.stop()
	c.mustWrite(c.others(lead)[0], "after", "v")
	c.start(lead.id)
	c.converge()
}

// A member down while the log is compacted past it catches up from a
// snapshot: a checkpoint of a member's store.
func TestSnapshotCatchUp(t *testing.T) {
	c := newSimCluster(t, 3, 13, func(cfg *Config) { cfg.SnapshotEntries, cfg.CatchUpEntries = 20, 5 })
	down := c.others(c.leader())[0]
	down.stop()
	lead := c.leader()
	for i := 0; i < 100; i++ {
		c.mustWrite(lead, fmt.Sprint("k", i), fmt.Sprint(i))
	}
	first, _ := lead.node.disk.mem.FirstIndex()
	if first <= down.st.RaftApplied()+1 {
		t.Fatalf("log not compacted past the stopped member: first %d, member at %d", first, down.st.RaftApplied())
	}
	m := c.start(down.id)
	c.converge()
	if got := m.st.RaftApplied(); got < first {
		t.Fatalf("member raft applied %d, below the leader's first index %d", got, first)
	}
}

// Membership: a member is removed and a new one added; the new one gets
// the database by snapshot or log, and the cluster keeps working.
func TestReplaceMember(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := context.Background()
	lead := c.leader()
	for i := 0; i < 10; i++ {
		c.writeAt(lead, put(fmt.Sprint("k", i), "v"))
	}
	gone := c.follower()
	gone.stop()
	delete(c.members, gone.id)
	if err := lead.node.RemoveMember(ctx, gone.id); err != nil {
		t.Fatal(err)
	}
	c.peers[4] = freeAddr(t)
	if err := lead.node.AddMember(ctx, 4, c.peers[4]); err != nil {
		t.Fatal(err)
	}
	c.start(4, t.TempDir(), true)
	c.writeAt(lead, put("after", "v"))
	// The new member takes part: it applies a write made through it.
	c.writeAt(c.members[4], put("through-4", "v"))
	c.waitConverged()
	c.checkDigests()
	// Status is updated after each batch of Raft work: it may trail the
	// apply that answered the write by one.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s := c.members[4].node.Status()
		if len(s.Members) == 3 && s.Members[gone.id] == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("new member's status %+v", s)
		}
	}
}

// A single root becomes an HA root: started alone as a one-member cluster
// on its existing store, then joined by two members that copy its store
// (they never replay the log onto an empty store).
func TestSingleRootBecomesHA(t *testing.T) {
	ctx := context.Background()
	c := &cluster{t: t, members: map[uint64]*member{}, peers: map[uint64]string{}}
	copy(c.dbid[:], "raftroot-test-id")
	dir := t.TempDir()
	dir1 := filepath.Join(dir, "1")
	old, err := store.Open(store.Options{Name: "db", Dir: filepath.Join(dir1, "db"), DBID: c.dbid, MinFreeBytes: 1, BallastBytes: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := old.Write(ctx, put(fmt.Sprint("old", i), "v")); err != nil {
			t.Fatal(err)
		}
	}
	old.Close()
	c.peers[1] = freeAddr(t)
	m1 := c.start(1, dir1, false)
	c.leader()
	c.writeAt(m1, put("new", "v"))
	for id := uint64(2); id <= 3; id++ {
		c.peers[id] = freeAddr(t)
		if err := m1.node.AddMember(ctx, id, c.peers[id]); err != nil {
			t.Fatal(err)
		}
		c.start(id, filepath.Join(dir, fmt.Sprint(id)), true)
	}
	c.writeAt(c.members[3], put("after", "v"))
	c.waitConverged()
	c.checkDigests()
	if d, _ := c.members[2].st.Digest(); d.Keys != 22 {
		t.Fatalf("joined member has %d keys, want 22", d.Keys)
	}
}

// New Raft storage on a store that does not match how the cluster starts
// is refused with ErrStoreNotEmpty, and the store is left alone.
func TestNewMemberOnWrongStoreRefused(t *testing.T) {
	ctx := context.Background()
	var dbid store.DBID
	copy(dbid[:], "raftroot-test-id")
	st, err := store.Open(store.Options{Name: "db", Dir: filepath.Join(t.TempDir(), "db"), DBID: dbid, MinFreeBytes: 1, BallastBytes: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Write(ctx, put("k", "v")); err != nil {
		t.Fatal(err)
	}
	h0, _ := st.Head()
	for name, cfg := range map[string]Config{
		"initial member of three": {Peers: map[uint64]string{1: freeAddr(t), 2: freeAddr(t), 3: freeAddr(t)}},
		"joining member":          {Peers: map[uint64]string{2: freeAddr(t)}, Join: true},
	} {
		cfg.Database, cfg.NodeID, cfg.Dir, cfg.Logger = "db", 1, filepath.Join(t.TempDir(), "raft"), quiet()
		cfg.Listen = freeAddr(t)
		cfg.FetchSnapshot = func(context.Context, string, uint64) error { return errors.New("not here") }
		if _, err := Start(cfg, st); !errors.Is(err, ErrStoreNotEmpty) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if h, _ := st.Head(); h != h0 || st.RaftApplied() != 0 {
		t.Fatal("the store changed")
	}
}

// Recovery from a lost majority: a member's Raft storage is set aside and
// it starts as a new one-member cluster on its store, whose log goes on
// with the next index.
func TestRestartAsNewClusterContinuesTheLog(t *testing.T) {
	c := newSimCluster(t, 1, 14, nil)
	m := c.leader()
	var last store.WriteResult
	for i := 0; i < 5; i++ {
		last = c.mustWrite(m, fmt.Sprint("k", i), "v")
	}
	m.stop()
	if err := c.fs.RemoveAll(m.cfg.Dir); err != nil {
		t.Fatal(err)
	}
	c.start(m.id)
	m = c.leader()
	// Without a reset of the store's Raft index, the new log's commands
	// would be taken for applied ones and skipped.
	r := c.mustWrite(m, "after", "v")
	if !r.Changed || r.Index <= last.Index {
		t.Fatalf("write after the restart: %+v (last before: %d)", r, last.Index)
	}
}

// Five members keep taking writes with two of them down, and the two
// catch up when they return.
func TestFiveMembersSurviveTwoDown(t *testing.T) {
	c := newSimCluster(t, 5, 15, nil)
	lead := c.leader()
	down := c.others(lead)[:2]
	for _, m := range down {
		m.stop()
	}
	for i := 0; i < 20; i++ {
		c.mustWrite(c.others(c.leader())[0], fmt.Sprint("k", i), "v")
	}
	for _, m := range down {
		c.start(m.id)
	}
	c.converge()
}

// TestWriteWithoutIDSurvivesLeaderLoss: a write without a batch ID (as
// memcached sends them) forwarded to a leader that is gone is proposed
// again to the next leader, and applied once.
func TestWriteWithoutIDSurvivesLeaderLoss(t *testing.T) {
	c := newSimCluster(t, 3, 16, func(cfg *Config) { cfg.ProposalTimeout = 4 * time.Second })
	lead := c.leader()
	f := c.others(lead)[0]
	c.mustWrite(lead, "before", "v")
	lead.stop()
	// The follower still believes in the old leader: its forward is lost.
	p := c.write(f, put("during", "v"))
	c.waitQueued(f.id, lead.id, pb.MessageType_MsgProp)
	// Time passes only until the two members left elect a leader: from
	// then on the write must be answered with no more time passing, so
	// before its proposal timeout however slowly its goroutine runs.
	c.leaderOf()
	if a := c.await(p); a.err != nil {
		t.Fatalf("write during the election: %v", a.err)
	}
	c.start(lead.id)
	c.converge()
	if n := sets(t, f, "during"); n != 1 {
		t.Fatalf("the write is in the log %d times", n)
	}
}
