package raftroot

import (
	"math/rand/v2"
	"slices"
	"sync"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// simNet is an in-memory network between the members of a simulated
// cluster (after etcd raft's network in raft_test.go). Members' messengers
// queue what they send here; nothing moves until the test calls deliver,
// which hands the queued messages to their receivers, subject to the
// network's faults: cut links (partitions), random loss, delay (a message
// held back for some rounds) and reordering, all drawn from one seeded
// generator. Messages to a member that is down, or over a cut link, are
// lost and reported to the sender as unreachable, as the TCP transport
// reports a failed connection.
type simNet struct {
	mu struct {
		sync.Mutex
		rng   *rand.Rand
		ends  map[uint64]*simEnd // running members
		queue []simMsg
		cut   map[[2]uint64]bool // from, to
		// Faults drawn per message.
		dropRate  float64 // probability of loss
		delayRate float64 // probability of being held back
		maxDelay  int     // rounds a held message waits, at most
		reorder   bool    // shuffle each round's messages
		// Counts, for tests to check that faults happened.
		delivered, dropped, delayed int
	}
}

type simMsg struct {
	m    *pb.Message
	wait int // rounds before delivery
}

func newSimNet(seed uint64) *simNet {
	n := &simNet{}
	n.mu.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	n.mu.ends = map[uint64]*simEnd{}
	n.mu.cut = map[[2]uint64]bool{}
	return n
}

// simEnd is one member's messenger on a simNet.
type simEnd struct {
	net  *simNet
	id   uint64
	in   inbound
	repl map[uint64]string // replication address by member id (shared)
}

// attach connects member id, replacing an earlier end of it (a restart).
func (n *simNet) attach(id uint64, in inbound, repl map[uint64]string) *simEnd {
	e := &simEnd{net: n, id: id, in: in, repl: repl}
	n.mu.Lock()
	n.mu.ends[id] = e
	n.mu.Unlock()
	return e
}

func (e *simEnd) send(msgs []*pb.Message) {
	n := e.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.ends[e.id] != e {
		return // closed
	}
	for _, m := range msgs {
		// A copy, as a real transport encodes the message when it sends it.
		n.mu.queue = append(n.mu.queue, simMsg{m: proto.Clone(m).(*pb.Message)})
	}
}

func (e *simEnd) setPeer(uint64, string) {}
func (e *simEnd) removePeer(uint64)      {}
func (e *simEnd) replAddr(id uint64) string {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	return e.repl[id]
}

func (e *simEnd) close() {
	n := e.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.ends[e.id] == e {
		delete(n.mu.ends, e.id)
	}
}

// isolate cuts every link to and from id; partition cuts every link
// between the groups; heal restores every link.
func (n *simNet) isolate(id uint64, all []uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, o := range all {
		if o != id {
			n.mu.cut[[2]uint64{id, o}] = true
			n.mu.cut[[2]uint64{o, id}] = true
		}
	}
}

func (n *simNet) partition(a, b []uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range a {
		for _, y := range b {
			n.mu.cut[[2]uint64{x, y}] = true
			n.mu.cut[[2]uint64{y, x}] = true
		}
	}
}

// cutLink cuts the link from one member to another, one way.
func (n *simNet) cutLink(from, to uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.cut[[2]uint64{from, to}] = true
}

func (n *simNet) heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.mu.cut)
}

// faults sets the random faults drawn for each message from now on.
func (n *simNet) faults(drop, delay float64, maxDelay int, reorder bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.dropRate, n.mu.delayRate, n.mu.maxDelay, n.mu.reorder = drop, delay, maxDelay, reorder
}

// pending reports whether messages are queued.
func (n *simNet) pending() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.mu.queue) > 0
}

// deliver runs one round: every queued message is delivered, lost or held
// back, and the held ones move one round closer. It reports whether any
// message was queued. Receivers' inboxes never block: a full one drops.
func (n *simNet) deliver() bool {
	n.mu.Lock()
	q := n.mu.queue
	n.mu.queue = nil
	if len(q) == 0 {
		n.mu.Unlock()
		return false
	}
	if n.mu.reorder {
		n.mu.rng.Shuffle(len(q), func(i, j int) { q[i], q[j] = q[j], q[i] })
	}
	type hand struct {
		to, from *simEnd
		m        *pb.Message
		lost     bool
	}
	var out []hand
	for _, sm := range q {
		m := sm.m
		from, to := n.mu.ends[m.GetFrom()], n.mu.ends[m.GetTo()]
		if sm.wait > 0 {
			sm.wait--
			n.mu.queue = append(n.mu.queue, sm)
			continue
		}
		if sm.wait == 0 && n.mu.delayRate > 0 && n.mu.rng.Float64() < n.mu.delayRate && n.mu.maxDelay > 0 {
			sm.wait = 1 + n.mu.rng.IntN(n.mu.maxDelay)
			n.mu.delayed++
			n.mu.queue = append(n.mu.queue, sm)
			continue
		}
		lost := to == nil || n.mu.cut[[2]uint64{m.GetFrom(), m.GetTo()}] ||
			(n.mu.dropRate > 0 && n.mu.rng.Float64() < n.mu.dropRate)
		if lost {
			n.mu.dropped++
		} else {
			n.mu.delivered++
		}
		out = append(out, hand{to: to, from: from, m: m, lost: lost})
	}
	n.mu.Unlock()
	// Outside the lock: the callbacks queue work for the members' loops.
	for _, h := range out {
		isSnap := h.m.GetType() == pb.MessageType_MsgSnap
		if h.lost || !h.to.in.known(h.m.GetFrom()) || !h.to.in.deliver(h.m) {
			if h.from != nil {
				h.from.in.unreachable(h.m.GetTo())
				if isSnap {
					h.from.in.snapshotDone(h.m.GetTo(), false)
				}
			}
			continue
		}
		if isSnap && h.from != nil {
			h.from.in.snapshotDone(h.m.GetTo(), true)
		}
	}
	return true
}

// stats returns the counts of delivered, lost and delayed messages.
func (n *simNet) stats() (delivered, dropped, delayed int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.delivered, n.mu.dropped, n.mu.delayed
}

// queued reports whether a message of type typ from one member to another
// is queued.
func (n *simNet) queued(from, to uint64, typ pb.MessageType) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.ContainsFunc(n.mu.queue, func(sm simMsg) bool {
		return sm.m.GetFrom() == from && sm.m.GetTo() == to && sm.m.GetType() == typ
	})
}
