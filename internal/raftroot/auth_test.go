package raftroot

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/quicksilver-kv/qs/internal/clusterauth"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func clusterKey(t *testing.T, b byte) clusterauth.Key {
	t.Helper()
	k, err := clusterauth.ParseKey(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// withKey makes every member authenticate its Raft connections with key.
func withKey(key clusterauth.Key) func(*Config) {
	a := clusterauth.New(clusterauth.Options{Key: key})
	return func(c *Config) {
		c.Dial = a.Dialer(clusterauth.RaftClaim(c.NodeID))
		c.Listener = func(ln net.Listener) net.Listener { return a.Listener(ln, "raft", 64) }
	}
}

func frames(t *testing.T, h helloMsg, msgs ...*pb.Message) []byte {
	t.Helper()
	var b bytes.Buffer
	writeFrame(&b, frameHello, h.encode())
	for _, m := range msgs {
		body, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		writeFrame(&b, frameMessage, body)
	}
	return b.Bytes()
}

// attacks are what a crafted client sends a member: a proposal, a
// membership change, a term bump, and the question that names the
// cluster and node.
func attacks(t *testing.T, c *cluster, lead, follower *member) map[string]struct {
	to   *member
	data []byte
} {
	forged := (&command{time: time.Now().UnixNano(), batch: put("forged", "by a stranger")}).encode()
	remove := pb.ConfChange{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(follower.id)}
	rb, err := proto.Marshal(&remove)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]struct {
		to   *member
		data []byte
	}{
		"proposal": {lead, frames(t, helloMsg{cluster: c.dbid, from: follower.id, to: lead.id},
			&pb.Message{Type: pb.MessageType_MsgProp.Enum(), From: new(follower.id), To: new(lead.id),
				Entries: []*pb.Entry{{Type: pb.EntryType_EntryNormal.Enum(), Data: forged}}})},
		"membership change": {lead, frames(t, helloMsg{cluster: c.dbid, from: follower.id, to: lead.id},
			&pb.Message{Type: pb.MessageType_MsgProp.Enum(), From: new(follower.id), To: new(lead.id),
				Entries: []*pb.Entry{{Type: pb.EntryType_EntryConfChange.Enum(), Data: rb}}})},
		"term bump": {follower, frames(t, helloMsg{cluster: c.dbid, from: lead.id, to: follower.id},
			&pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), From: new(lead.id), To: new(follower.id), Term: new(uint64(1 << 40))})},
		"who are you": {follower, frames(t, helloMsg{})},
	}
}

// send writes data to addr over conn and returns what the member answered
// before it closed the connection.
func sendRaw(t *testing.T, conn net.Conn, data []byte) []byte {
	t.Helper()
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	conn.Write(data)
	got, _ := io.ReadAll(conn)
	return got
}

// A client without the cluster key can neither propose, change the
// membership, raise the term nor learn the cluster or node id: the member
// closes its connection without a word, and counts it.
func TestRaftRefusesStrangersWithoutClusterKey(t *testing.T) {
	key := clusterKey(t, 1)
	c := newCluster(t, 3, withKey(key))
	lead := c.leader()
	follower := c.follower()
	c.writeAt(lead, put("k", "v"))
	c.waitConverged()
	term := lead.node.Status().Term
	before := counter(t, c.metrics.messageErrors, "db", kindAuth)

	for name, a := range attacks(t, c, lead, follower) {
		conn, err := net.Dial("tcp", a.to.cfg.Listen)
		if err != nil {
			t.Fatal(err)
		}
		if got := sendRaw(t, conn, a.data); len(got) != 0 {
			t.Fatalf("%s: a stranger got %d bytes back (%q)", name, len(got), got)
		}
		// With another key, the dial itself fails.
		if _, err := clusterauth.New(clusterauth.Options{Key: clusterKey(t, 2)}).Dialer(clusterauth.RaftClaim(follower.id))(context.Background(), "tcp", a.to.cfg.Listen); err == nil {
			t.Fatalf("%s: dial with another cluster key succeeded", name)
		}
	}
	waitCounter(t, c.metrics, kindAuth, before+8)
	checkUntouched(t, c, term)
}

// A member of the cluster (it holds the key) cannot speak for another:
// the hello's sender must be the member the connection authenticated as.
func TestRaftBindsSenderToAuthenticatedMember(t *testing.T) {
	key := clusterKey(t, 1)
	c := newCluster(t, 3, withKey(key))
	lead := c.leader()
	follower := c.follower()
	c.waitConverged()
	term := lead.node.Status().Term
	before := counter(t, c.metrics.messageErrors, "db", kindUnauthorized)
	var third *member
	for _, m := range c.members {
		if m != lead && m != follower {
			third = m
		}
	}
	for name, a := range attacks(t, c, lead, follower) {
		if name == "who are you" {
			continue
		}
		// Authenticated as the third member, claiming to be another.
		conn, err := clusterauth.New(clusterauth.Options{Key: key}).Dialer(clusterauth.RaftClaim(third.id))(context.Background(), "tcp", a.to.cfg.Listen)
		if err != nil {
			t.Fatal(err)
		}
		if got := sendRaw(t, conn, a.data); len(got) != 0 {
			t.Fatalf("%s: answered %q", name, got)
		}
	}
	waitCounter(t, c.metrics, kindUnauthorized, before+3)
	checkUntouched(t, c, term)
}

// checkUntouched checks that no forged write, membership change or term
// reached the cluster, and that it still takes writes.
func checkUntouched(t *testing.T, c *cluster, term uint64) {
	t.Helper()
	lead := c.leader()
	c.writeAt(lead, put("after", "v"))
	c.waitConverged()
	for _, m := range c.members {
		st := m.node.Status()
		if st.Term >= 1<<40 || st.Term > term+5 {
			t.Fatalf("member %d: term %d (was %d)", m.id, st.Term, term)
		}
		if len(st.Members) != 3 {
			t.Fatalf("member %d: members %v", m.id, st.Members)
		}
		var found bool
		if _, err := m.st.Lookup([][]byte{[]byte("forged")}, func(_ uint64, _ int, _ []byte, _ uint64, ok bool) error {
			found = ok
			return nil
		}); err != nil || found {
			t.Fatalf("member %d: forged key present=%v err=%v", m.id, found, err)
		}
	}
}

// The first frame of a connection is bounded before its sender is known:
// a large length is refused at once, not read.
func TestRaftBoundsFirstFrame(t *testing.T) {
	c := newCluster(t, 1, nil)
	m := c.members[1]
	before := counter(t, c.metrics.messageErrors, "db", kindBadFrame)
	conn, err := net.Dial("tcp", m.cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	// A hello frame announcing 100 MiB, under the message limit.
	if got := sendRaw(t, conn, []byte{frameHello, 0x06, 0x40, 0x00, 0x00, 'Q', 'S', 'R', 'T'}); len(got) != 0 {
		t.Fatalf("answered %q", got)
	}
	if got := counter(t, c.metrics.messageErrors, "db", kindBadFrame); got != before+1 {
		t.Fatalf("bad frames %v → %v: the 100 MiB first frame was not refused by its length", before, got)
	}
}

// waitCounter waits until the transport errors of kind reach want.
func waitCounter(t *testing.T, m *Metrics, kind string, want float64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		got := counter(t, m.messageErrors, "db", kind)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s errors %v, want %v", kind, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A hello's replication address becomes a snapshot source only when it is
// on the host of the sender's Raft address in the membership: a forged
// hello cannot point a lagging member at another server.
func TestHelloCannotNameSnapshotSourceElsewhere(t *testing.T) {
	for _, tc := range []struct {
		repl string
		kept bool
	}{{"127.0.0.1:7390", true}, {"192.0.2.1:7390", false}, {"attacker.example:7390", false}} {
		var cluster [16]byte
		tr := newTransport("db", NewMetrics(), cluster, 1, "", nil, quiet())
		tr.known = func(id uint64) bool { return id == 2 }
		tr.memberAddr = func(id uint64) string { return "127.0.0.1:7401" }
		tr.deliver = func(*pb.Message) bool { return true }
		a, b := net.Pipe()
		done := make(chan error, 1)
		go func() { done <- tr.receive(a, clusterauth.Peer{}) }()
		b.Write(frames(t, helloMsg{cluster: cluster, from: 2, to: 1, repl: tc.repl}))
		b.Close()
		<-done
		if got := tr.replAddr(2); (got == tc.repl) != tc.kept {
			t.Fatalf("hello naming %s: snapshot source %q, kept=%v", tc.repl, got, tc.kept)
		}
	}
}

// FuzzReceiveAuthenticated feeds a member's receiving side arbitrary
// bytes on a connection authenticated as member 2: it never panics, and
// delivers only messages from member 2 to this member.
func FuzzReceiveAuthenticated(f *testing.F) {
	var cluster [16]byte
	copy(cluster[:], "raftroot-fuzz-id")
	hello := func(from uint64) []byte {
		var b bytes.Buffer
		writeFrame(&b, frameHello, (&helloMsg{cluster: cluster, from: from, to: 1, repl: "127.0.0.1:1"}).encode())
		return b.Bytes()
	}
	msg := func(from uint64, term uint64) []byte {
		body, _ := proto.Marshal(&pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), From: new(from), To: new(uint64(1)), Term: new(term)})
		var b bytes.Buffer
		writeFrame(&b, frameMessage, body)
		return b.Bytes()
	}
	f.Add(append(hello(2), msg(2, 5)...))
	f.Add(append(hello(3), msg(3, 1<<40)...))
	f.Add(append(hello(2), msg(3, 1)...))
	f.Add(hello(0))
	f.Add([]byte{frameHello, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		tr := newTransport("db", NewMetrics(), cluster, 1, "", nil, quiet())
		tr.known = func(id uint64) bool { return id == 2 || id == 3 }
		tr.memberAddr = func(uint64) string { return "127.0.0.1:7401" }
		tr.deliver = func(m *pb.Message) bool {
			if m.GetFrom() != 2 || m.GetTo() != 1 {
				t.Fatalf("delivered a message from %d to %d on a connection of member 2", m.GetFrom(), m.GetTo())
			}
			return true
		}
		a, b := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			tr.receive(a, clusterauth.Peer{Authenticated: true, Claims: []string{clusterauth.RaftClaim(2)}})
			a.Close()
		}()
		go func() {
			b.Write(data)
			b.Close()
		}()
		<-done
	})
}
