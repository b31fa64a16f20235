package raftroot

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/quicksilver-kv/qs/internal/store"
	pb "go.etcd.io/raft/v3/raftpb"
)

// Deterministic cluster tests: members on a manual clock and an in-memory
// network (simcluster_test.go). Each ends with converge, which checks
// that the members' Raft logs and data agree, that every store verifies,
// and that every acknowledged write is there (and no write answered
// "unavailable").

// sets counts the entries of m's store log that set key.
func sets(t *testing.T, m *simMember, key string) int {
	t.Helper()
	h, err := m.st.Head()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := m.st.ReadLog(1, int(h.Index)+1, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		for _, op := range e.Ops {
			if string(op.Key) == key {
				n++
			}
		}
	}
	return n
}

func ids(ms ...*simMember) []uint64 {
	var out []uint64
	for _, m := range ms {
		out = append(out, m.id)
	}
	return out
}

// A follower cut off from the others (a minority of one) takes no part;
// the majority goes on taking writes; a write through the cut-off member
// is answered without being applied, or applied; healed, it catches up.
func TestSimPartitionedFollower(t *testing.T) {
	c := newSimCluster(t, 3, 1, func(cfg *Config) { cfg.ProposalTimeout = 50 * simTick })
	lead := c.leader()
	f := c.others(lead)[0]
	c.net.isolate(f.id, c.ids())
	for i := 0; i < 10; i++ {
		c.mustWrite(lead, fmt.Sprint("k", i), "v")
	}
	a := c.awaitTicking(c.write(f, put("through-cut", "v")))
	if !errors.Is(a.err, store.ErrUnavailable) && !errors.Is(a.err, context.DeadlineExceeded) {
		t.Fatalf("write through the cut-off member answered %+v, %v", a.r, a.err)
	}
	if got := c.leaderOf(ids(c.others(f)...)...); got != lead {
		t.Fatalf("leader changed from %d to %d while a follower was cut off", lead.id, got.id)
	}
	c.net.heal()
	c.mustWrite(f, "after", "v")
	c.converge()
}

// A leader cut off from the others steps down (it hears from no quorum);
// the others elect a leader and take writes; the write the old leader
// took while cut off is never acknowledged, and the old leader's
// uncommitted entry gives way to the new leader's log.
func TestSimPartitionedLeader(t *testing.T) {
	c := newSimCluster(t, 3, 2, func(cfg *Config) { cfg.ProposalTimeout = 50 * simTick })
	old := c.leader()
	c.mustWrite(old, "before", "v")
	c.net.isolate(old.id, c.ids())
	p := c.write(old, put("to-the-cut-leader", "v"))
	rest := c.others(old)
	lead := c.leaderOf(ids(rest...)...)
	for i := 0; i < 5; i++ {
		c.mustWrite(rest[i%2], fmt.Sprint("k", i), "v")
	}
	a := c.awaitTicking(p)
	if a.err == nil {
		t.Fatalf("a leader cut off from its quorum acknowledged a write: %+v", a.r)
	}
	if s := old.node.Status(); s.State == "StateLeader" {
		t.Fatalf("the cut-off leader did not step down: %+v", s)
	}
	c.net.heal()
	c.mustWrite(old, "after", "v")
	c.converge()
	if got := c.leader(); got != lead {
		t.Fatalf("leader %d after healing, want %d (the majority's)", got.id, lead.id)
	}
	if n := sets(t, lead, "to-the-cut-leader"); n != 0 {
		t.Fatalf("the cut-off leader's write is applied %d times; it was never committed", n)
	}
}

// Five members split two (with the leader) against three: the three
// elect a leader and take writes, the two take none; healed, all five
// agree.
func TestSimMajorityAndMinority(t *testing.T) {
	c := newSimCluster(t, 5, 3, func(cfg *Config) { cfg.ProposalTimeout = 50 * simTick })
	old := c.leader()
	minority := []*simMember{old, c.others(old)[0]}
	majority := c.others(old)[1:]
	c.net.partition(ids(minority...), ids(majority...))
	var stuck []*pendingWrite
	for i, m := range minority {
		stuck = append(stuck, c.write(m, put(fmt.Sprint("minority", i), "v")))
	}
	c.leaderOf(ids(majority...)...)
	for i := 0; i < 10; i++ {
		c.mustWrite(majority[i%3], fmt.Sprint("majority", i), "v")
	}
	for _, p := range stuck {
		if a := c.awaitTicking(p); a.err == nil {
			t.Fatalf("the minority acknowledged %s: %+v", p.key, a.r)
		}
	}
	c.net.heal()
	c.converge()
	for i := range minority {
		if n := sets(t, majority[0], fmt.Sprint("minority", i)); n != 0 {
			t.Fatalf("a write to the minority is applied %d times", n)
		}
	}
}

// Writes go on through every member while the leader is cut off and
// replaced, again and again; every write acknowledged is applied once,
// and the members agree.
func TestSimLeaderChangesUnderWrites(t *testing.T) {
	c := newSimCluster(t, 3, 4, func(cfg *Config) { cfg.ProposalTimeout = 3 * simTick * 10 })
	rng := rand.New(rand.NewPCG(4, 4))
	all := c.running()
	var inflight []*pendingWrite
	changes := 0
	for round := 0; round < 6; round++ {
		lead := c.leader()
		for i := 0; i < 6; i++ {
			m := all[rng.IntN(len(all))]
			inflight = append(inflight, c.write(m, put(fmt.Sprintf("r%d/%d", round, i), "v")))
		}
		for i := rng.IntN(3); i > 0; i-- {
			c.step()
		}
		c.net.isolate(lead.id, c.ids())
		if next := c.leaderOf(ids(c.others(lead)...)...); next != lead {
			changes++
		}
		c.net.heal()
	}
	acked := 0
	for _, p := range inflight {
		if a := c.awaitTicking(p); a.err == nil {
			acked++
		}
	}
	c.converge()
	for _, p := range inflight {
		if n := sets(t, all[0], p.key); n > 1 {
			t.Fatalf("%s applied %d times", p.key, n)
		}
	}
	if changes < 6 || acked == 0 {
		t.Fatalf("%d leader changes, %d of %d writes acknowledged: the test did not exercise its case", changes, acked, len(inflight))
	}
	t.Logf("%d leader changes; %d of %d writes acknowledged, %d outcome unknown", changes, acked, len(inflight), c.ledger.unknown)
}

// A member cut off while the log is compacted past it catches up from a
// snapshot: a checkpoint of a member's store.
func TestSimSnapshotCatchUp(t *testing.T) {
	c := newSimCluster(t, 3, 5, func(cfg *Config) { cfg.SnapshotEntries, cfg.CatchUpEntries = 20, 5 })
	lead := c.leader()
	behind := c.others(lead)[0]
	c.mustWrite(lead, "first", "v")
	c.converge()
	c.net.isolate(behind.id, c.ids())
	for i := 0; i < 60; i++ {
		c.mustWrite(lead, fmt.Sprint("k", i), fmt.Sprint(i))
	}
	first, _ := lead.node.disk.mem.FirstIndex()
	if first <= behind.st.RaftApplied()+1 {
		t.Fatalf("log not compacted past the cut-off member: first %d, member at %d", first, behind.st.RaftApplied())
	}
	sent, received := counter(t, c.metrics.snapshots, "db", "sent"), counter(t, c.metrics.snapshots, "db", "received")
	c.net.heal()
	c.converge()
	if got := behind.st.RaftApplied(); got < first {
		t.Fatalf("member raft applied %d, below the leader's first index %d", got, first)
	}
	if counter(t, c.metrics.snapshots, "db", "sent") <= sent || counter(t, c.metrics.snapshots, "db", "received") <= received {
		t.Fatal("the member caught up without a snapshot")
	}
}

// Members stopped and started again from their storage (Raft log and
// store) rejoin: a follower that missed writes, then the leader.
func TestSimRestartFromStorage(t *testing.T) {
	c := newSimCluster(t, 3, 6, nil)
	lead := c.leader()
	f := c.others(lead)[0]
	c.mustWrite(lead, "a", "v")
	f.stop()
	for i := 0; i < 10; i++ {
		c.mustWrite(lead, fmt.Sprint("b", i), "v")
	}
	f = c.start(f.id)
	c.converge()
	lead.stop()
	next := c.leader()
	c.mustWrite(next, "c", "v")
	c.start(lead.id)
	c.mustWrite(c.members[lead.id], "d", "v")
	c.converge()
}

// A write whose forwarded proposal reached the leader, which appended it
// and sent it to one follower only before it was cut off, is in the log
// twice once proposed again to the next leader; the store applies it once
// and the write is acknowledged. A write without a batch ID (memcached)
// gets one from the member that takes it for exactly this.
func TestSimReproposalAfterLeaderChange(t *testing.T) {
	c := newSimCluster(t, 3, 7, nil)
	old := c.leader()
	c.mustWrite(old, "before", "v")
	c.converge()
	o := c.others(old)
	f, g := o[0], o[1]
	p := c.write(f, put("k", "v")) // no batch ID
	c.waitQueued(f.id, old.id, pb.MessageType_MsgProp)
	c.step() // the leader appends the proposal and sends it to f and g
	c.net.cutLink(old.id, g.id)
	c.step() // f has it, g does not
	c.net.isolate(old.id, c.ids())
	// f's log is longer: g votes for f, f does not vote for g.
	if lead := c.leaderOf(f.id, g.id); lead != f {
		t.Fatalf("leader %d, want %d (the member holding the entry)", lead.id, f.id)
	}
	a := c.awaitTicking(p)
	if a.err != nil {
		t.Fatalf("write answered %v", a.err)
	}
	copies := 0
	for _, e := range c.logEntries(f) {
		if cmd, err := decodeCommand(e.GetData()); err == nil && len(cmd.batch.Ops) == 1 && string(cmd.batch.Ops[0].Key) == "k" {
			copies++
		}
	}
	if copies != 2 {
		t.Fatalf("the write is in the raft log %d times, want 2 (the test did not make its case)", copies)
	}
	c.net.heal()
	c.converge()
	for _, m := range c.running() {
		if n := sets(t, m, "k"); n != 1 {
			t.Fatalf("member %d applied the write %d times", m.id, n)
		}
	}
}

// Under random loss, delay and reordering of messages, and members cut
// off and restored at random, the members agree on every write that was
// acknowledged.
func TestSimRandomFaults(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			c := newSimCluster(t, 3, seed, func(cfg *Config) { cfg.ProposalTimeout = 30 * simTick })
			rng := rand.New(rand.NewPCG(seed, 99))
			c.leader()
			c.net.faults(0.1, 0.2, 3, true)
			all := c.running()
			var inflight []*pendingWrite
			for i := 0; i < 60; i++ {
				switch r := rng.IntN(10); {
				case r < 6:
					inflight = append(inflight, c.write(all[rng.IntN(3)], put(fmt.Sprint("k", i), fmt.Sprint(i))))
				case r < 7:
					c.net.isolate(all[rng.IntN(3)].id, c.ids())
				case r < 8:
					c.net.heal()
				default:
					c.tick(1 + rng.IntN(5))
				}
				c.step()
			}
			c.net.heal()
			for _, p := range inflight {
				c.awaitTicking(p)
			}
			c.net.faults(0, 0, 0, false)
			c.converge()
			_, dropped, delayed := c.net.stats()
			if dropped == 0 || delayed == 0 || len(c.ledger.applied) == 0 {
				t.Fatalf("dropped %d, delayed %d, %d writes acknowledged: the test did not exercise its case", dropped, delayed, len(c.ledger.applied))
			}
			t.Logf("%d writes acknowledged, %d outcome unknown, %d unavailable; %d messages dropped, %d delayed",
				len(c.ledger.applied), c.ledger.unknown, len(c.ledger.unavailable), dropped, delayed)
		})
	}
}
