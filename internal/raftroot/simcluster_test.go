package raftroot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/jonboulle/clockwork"
	"github.com/quicksilver-kv/qs/internal/store"
	pb "go.etcd.io/raft/v3/raftpb"
)

// simCluster runs members in one process on a manual clock and an
// in-memory network (simnet_test.go), their stores and Raft storage on one
// memory filesystem: no sockets, no wall clock. Time passes only in tick,
// messages move only in stabilize, so what happens between two steps of a
// test is decided by the test (and the network's seeded faults), not by
// the machine's load. A snapshot is fetched by checkpointing the source
// member's store into the receiver's ready directory and installing it
// (store.Replace), as replication does over the network.
type simCluster struct {
	t       *testing.T
	fs      vfs.FS
	clock   *clockwork.FakeClock
	net     *simNet
	dbid    store.DBID
	peers   map[uint64]string // Raft addresses (names: nothing listens)
	repl    map[uint64]string // replication addresses, by member
	members map[uint64]*simMember
	tweak   func(*Config)
	metrics *Metrics // the members', as a process shares one
	// storeTweak, when set, changes a member's store options.
	storeTweak func(id uint64, o *store.Options)
	ledger     ledger
}

type simMember struct {
	id   uint64
	dir  string
	st   *store.Store
	node *Node
	cfg  Config
}

// simTick is the simulated clock's Raft tick.
const simTick = 100 * time.Millisecond

// simProposalTimeout is the members' proposal timeout unless a test sets
// its own: far more ticks than a test lets pass (awaitTicking: 1000), so
// a write ends by what happened to it, never because ticks went on while
// its goroutine waited for a CPU (the writer runs on real time; ticks
// pass whenever the test decides). A test of the timeout sets a short one.
const simProposalTimeout = 10 * 1000 * simTick

// newSimCluster starts n members (ids 1..n) with the network's faults
// drawn from seed.
func newSimCluster(t *testing.T, n int, seed uint64, tweak func(*Config)) *simCluster {
	t.Helper()
	c := newSimClusterStopped(t, n, seed, tweak)
	for _, id := range c.ids() {
		c.start(id)
	}
	return c
}

// newSimClusterStopped prepares a cluster of n members without starting
// them (to set storeTweak first).
func newSimClusterStopped(t *testing.T, n int, seed uint64, tweak func(*Config)) *simCluster {
	t.Helper()
	c := &simCluster{t: t, fs: vfs.NewMem(), clock: clockwork.NewFakeClockAt(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)),
		net: newSimNet(seed), peers: map[uint64]string{}, repl: map[uint64]string{}, members: map[uint64]*simMember{}, tweak: tweak, metrics: NewMetrics()}
	copy(c.dbid[:], "raftroot-sim-id!")
	for i := uint64(1); i <= uint64(n); i++ {
		c.peers[i] = fmt.Sprintf("raft-%d", i)
		c.repl[i] = fmt.Sprintf("repl-%d", i)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			m.stop()
		}
	})
	return c
}

func (c *simCluster) ids() []uint64 { return slices.Sorted(maps.Keys(c.peers)) }

// start opens member id's store and starts its node (again, after stop:
// from what its storage holds).
func (c *simCluster) start(id uint64) *simMember {
	t := c.t
	t.Helper()
	dir := fmt.Sprintf("/m%d", id)
	if err := c.fs.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	o := store.Options{Name: "db", Dir: dir + "/db", FS: c.fs, DBID: c.dbid, MinFreeBytes: 1, BallastBytes: -1, Logger: quiet()}
	if c.storeTweak != nil {
		c.storeTweak(id, &o)
	}
	st, err := store.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	m := &simMember{id: id, dir: dir, st: st}
	cfg := Config{Database: "db", NodeID: id, Listen: c.peers[id], Peers: c.peers,
		Dir: dir + "/db.raft", FS: c.fs, ReplAddr: c.repl[id], Logger: quiet(), Metrics: c.metrics,
		TickInterval: simTick, Heartbeat: -1, ProposalTimeout: simProposalTimeout,
		FetchSnapshot: func(ctx context.Context, src string, minIndex uint64) error {
			return c.fetchSnapshot(st, src, minIndex)
		}}
	if c.tweak != nil {
		c.tweak(&cfg)
	}
	m.cfg = cfg
	m.node, err = start(cfg, st, c.clock, func(_ Config, in inbound, _ *slog.Logger) (messenger, error) {
		return c.net.attach(id, in, c.repl), nil
	})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	c.members[id] = m
	return m
}

// fetchSnapshot brings dst to a checkpoint of the running member whose
// replication address is src.
func (c *simCluster) fetchSnapshot(dst *store.Store, src string, minIndex uint64) error {
	var from *simMember
	for id, a := range c.repl {
		if a == src && c.members[id] != nil && c.members[id].node != nil {
			from = c.members[id]
		}
	}
	if from == nil {
		return fmt.Errorf("snapshot source %s is down", src)
	}
	ready := store.ReadyDir(dst.Options().Dir)
	if err := c.fs.RemoveAll(ready); err != nil {
		return err
	}
	h, err := from.st.Checkpoint(ready)
	if err != nil {
		return err
	}
	if h.Index < minIndex {
		c.fs.RemoveAll(ready)
		return fmt.Errorf("checkpoint of %s at %d, below %d", src, h.Index, minIndex)
	}
	return dst.Replace(context.Background())
}

// stop stops the member's node and closes its store; its storage stays.
func (m *simMember) stop() {
	if m.node == nil {
		return
	}
	m.node.Stop()
	m.st.Close()
	m.node = nil
}

func (c *simCluster) running() []*simMember {
	var out []*simMember
	for _, id := range c.ids() {
		if m := c.members[id]; m != nil && m.node != nil {
			out = append(out, m)
		}
	}
	return out
}

// settle waits until m's loop has handled everything queued for it
// (messages, proposals, ticks, reports) and has no Ready left: what it
// sends is then on the network, what it committed applied.
func (c *simCluster) settle(m *simMember) {
	c.t.Helper()
	n := m.node
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		idle := false
		err := n.onLoop(ctx, func() {
			idle = len(n.inbox) == 0 && len(n.props) == 0 && len(n.reports) == 0 &&
				len(n.ticker.Chan()) == 0 && !n.rn.HasReady()
		})
		switch {
		case errors.Is(err, ErrStopped):
			return
		case err != nil:
			c.t.Fatalf("member %d's loop did not settle within 60s: %v", m.id, err)
		case idle:
			return
		}
	}
}

func (c *simCluster) settleAll() {
	c.t.Helper()
	for _, m := range c.running() {
		c.settle(m)
	}
}

// stabilize delivers messages, round after round, until none is in
// flight. No time passes.
func (c *simCluster) stabilize() {
	c.t.Helper()
	for round := 0; round < 10000; round++ {
		c.settleAll()
		if !c.net.deliver() {
			return
		}
	}
	c.t.Fatal("messages still in flight after 10000 rounds")
}

// tick lets k Raft ticks pass on every member, stabilizing after each.
func (c *simCluster) tick(k int) {
	c.t.Helper()
	for i := 0; i < k; i++ {
		c.clock.Advance(simTick)
		c.stabilize()
	}
}

// leaderOf ticks until the members in ids (all running members if none)
// agree on a leader among them, and returns it.
func (c *simCluster) leaderOf(ids ...uint64) *simMember {
	c.t.Helper()
	if len(ids) == 0 {
		for _, m := range c.running() {
			ids = append(ids, m.id)
		}
	}
	for i := 0; i < 500; i++ {
		c.stabilize()
		var lead uint64
		agree := true
		for _, id := range ids {
			l := c.members[id].node.Status().Leader
			if lead == 0 {
				lead = l
			}
			agree = agree && l != 0 && l == lead
		}
		if agree && slices.Contains(ids, lead) && c.members[lead].node.Status().State == "StateLeader" {
			return c.members[lead]
		}
		c.tick(1)
	}
	c.t.Fatalf("members %v agreed on no leader within 500 ticks", ids)
	return nil
}

func (c *simCluster) leader() *simMember { return c.leaderOf() }

// others returns the running members other than m.
func (c *simCluster) others(m *simMember) []*simMember {
	var out []*simMember
	for _, o := range c.running() {
		if o != m {
			out = append(out, o)
		}
	}
	return out
}

// pendingWrite is a write in progress through a member.
type pendingWrite struct {
	key, val string
	res      chan writeAnswer
}

type writeAnswer struct {
	r   store.WriteResult
	err error
}

// write starts writing b (which sets key to val) through m.
func (c *simCluster) write(m *simMember, b store.Batch) *pendingWrite {
	p := &pendingWrite{res: make(chan writeAnswer, 1)}
	if len(b.Ops) == 1 {
		p.key, p.val = string(b.Ops[0].Key), string(b.Ops[0].Value)
	}
	n := m.node
	go func() {
		r, err := n.Write(context.Background(), b)
		p.res <- writeAnswer{r, err}
	}()
	return p
}

// await stabilizes until the write is answered (no time passes), and
// records the answer in the ledger.
func (c *simCluster) await(p *pendingWrite) writeAnswer {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		c.stabilize()
		select {
		case a := <-p.res:
			c.ledger.record(p, a)
			return a
		case <-time.After(time.Millisecond):
		}
	}
	c.t.Fatalf("write of %s not answered within 60s", p.key)
	return writeAnswer{}
}

// awaitTicking is await for a write that needs time to pass (a leader
// to be elected, its proposal timeout to pass): it ticks until the write
// is answered.
func (c *simCluster) awaitTicking(p *pendingWrite) writeAnswer {
	c.t.Helper()
	for i := 0; i < 1000; i++ {
		c.stabilize()
		// The writer may be about to return: give it a moment before
		// time passes. (Ticking early changes no outcome a test checks.)
		select {
		case a := <-p.res:
			c.ledger.record(p, a)
			return a
		case <-time.After(5 * time.Millisecond):
		}
		c.tick(1)
	}
	c.t.Fatalf("write of %s not answered within 1000 ticks", p.key)
	return writeAnswer{}
}

// step delivers one round of messages.
func (c *simCluster) step() {
	c.t.Helper()
	c.settleAll()
	c.net.deliver()
	c.settleAll()
}

// waitQueued waits until a message of type typ from one member to another
// is on the network (a write's proposal reached the member's loop).
func (c *simCluster) waitQueued(from, to uint64, typ pb.MessageType) {
	c.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !c.net.queued(from, to, typ); {
		if time.Now().After(deadline) {
			c.t.Fatalf("no %v from %d to %d within 60s", typ, from, to)
		}
		c.settleAll() // a round trip to each loop: the writer runs meanwhile
	}
}

// mustWrite writes key=val through m, letting time pass if it takes
// that (a member that just rejoined learns the leader from its next
// heartbeat), and fails the test unless the write is applied.
func (c *simCluster) mustWrite(m *simMember, key, val string) store.WriteResult {
	c.t.Helper()
	a := c.awaitTicking(c.write(m, put(key, val)))
	if a.err != nil {
		c.t.Fatalf("write %s through member %d: %v", key, m.id, a.err)
	}
	return a.r
}

// converge ticks until every running member has applied the same
// entries, then checks that they hold the same data, that each store
// verifies clean, and that the ledger's writes are there.
func (c *simCluster) converge() store.Head {
	c.t.Helper()
	var head store.Head
	for i := 0; ; i++ {
		c.stabilize()
		same := true
		var first *store.Head
		var raft uint64
		for _, m := range c.running() {
			h, err := m.st.Head()
			if err != nil {
				c.t.Fatal(err)
			}
			if first == nil {
				first, raft = &h, m.st.RaftApplied()
			}
			same = same && h == *first && m.st.RaftApplied() == raft
		}
		if same && first != nil {
			head = *first
			break
		}
		if i == 500 {
			for _, m := range c.running() {
				h, _ := m.st.Head()
				c.t.Logf("member %d: store head %d, raft applied %d, %+v", m.id, h.Index, m.st.RaftApplied(), m.node.Status())
			}
			c.t.Fatal("members did not converge within 500 ticks")
		}
		c.tick(1)
	}
	c.checkLogs()
	var want *store.Digest
	for _, m := range c.running() {
		d, err := m.st.Digest()
		if err != nil {
			c.t.Fatal(err)
		}
		if want == nil {
			want = &d
		} else if d != *want {
			c.t.Fatalf("member %d's digest %x at %d differs from %x at %d", m.id, d.Hash[:6], d.Index, want.Hash[:6], want.Index)
		}
		rep, err := m.st.Verify()
		if err != nil || !rep.Clean() {
			c.t.Fatalf("member %d does not verify: %v %+v", m.id, err, rep)
		}
		c.ledger.check(c.t, m)
	}
	return head
}

// checkLogs checks that the running members' Raft logs agree: the same
// term and data at every index two of them hold.
func (c *simCluster) checkLogs() {
	c.t.Helper()
	byIndex := map[uint64]*pb.Entry{}
	owner := map[uint64]uint64{}
	for _, m := range c.running() {
		for _, e := range c.logEntries(m) {
			i := e.GetIndex()
			if o, ok := byIndex[i]; ok {
				if o.GetTerm() != e.GetTerm() || !bytes.Equal(o.GetData(), e.GetData()) {
					c.t.Fatalf("raft logs fork at index %d: member %d has term %d, member %d term %d", i, owner[i], o.GetTerm(), m.id, e.GetTerm())
				}
				continue
			}
			byIndex[i], owner[i] = e, m.id
		}
	}
}

// logEntries returns the Raft log entries member m holds (after its last
// compaction).
func (c *simCluster) logEntries(m *simMember) []*pb.Entry {
	c.t.Helper()
	first, _ := m.node.disk.mem.FirstIndex()
	last, _ := m.node.disk.mem.LastIndex()
	if last < first {
		return nil
	}
	ents, err := m.node.disk.mem.Entries(first, last+1, 1<<40)
	if err != nil {
		c.t.Fatal(err)
	}
	return ents
}

// ledger keeps what writes were answered (tests that write a key twice
// write it in sequence): an applied write must be on
// every member, an unavailable one (nothing proposed) on none; one whose
// outcome is unknown may be either.
type ledger struct {
	applied     map[string]string
	unavailable map[string]bool
	unknown     int
}

func (l *ledger) record(p *pendingWrite, a writeAnswer) {
	if p.key == "" {
		return
	}
	if l.applied == nil {
		l.applied, l.unavailable = map[string]string{}, map[string]bool{}
	}
	switch {
	case a.err == nil && a.r.Changed && !a.r.Duplicate:
		l.applied[p.key] = p.val
	case errors.Is(a.err, store.ErrUnavailable):
		l.unavailable[p.key] = true
	case errors.Is(a.err, context.DeadlineExceeded):
		l.unknown++
	}
}

func (l *ledger) check(t *testing.T, m *simMember) {
	t.Helper()
	for k, v := range l.applied {
		if got, ok := lookup(t, m.st, k); !ok || got != v {
			t.Fatalf("member %d: acknowledged write %s=%s reads %q (exists %v)", m.id, k, v, got, ok)
		}
	}
	for k := range l.unavailable {
		if _, ok := lookup(t, m.st, k); ok {
			t.Fatalf("member %d: write %s answered 'unavailable' (nothing proposed) is applied", m.id, k)
		}
	}
}
