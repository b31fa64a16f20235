package raftroot

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/quicksilver-kv/qs/internal/clusterauth"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The Raft transport: one TCP connection per ordered pair of members, each
// carrying messages one way. A connection starts with a Hello frame that
// names the cluster (the database id), the sender, the receiver and the
// sender's replication address; then Message frames follow, each one
// raftpb.Message. docs/protocol.md describes the framing.
//
//	frame   := type(1) length(4 BE) payload crc(4 BE)     crc: CRC-32C of type||payload
//	hello   := "QSRT" version(1)=1 cluster(16) from(8) to(8) repl(uvarint len + bytes)
//	message := raftpb.Message (protobuf)
//
// A receiver drops the connection, counting the error by kind, on a frame
// that fails its checksum or length (a first frame over maxHelloFrame
// included: nothing larger is read before the hello is checked), a hello
// of another cluster or for another node, a sender that is not a known
// member or that the connection did not authenticate as, or a message that
// does not decode or whose From/To disagree with the hello. Raft tolerates
// lost messages: the sender reconnects and raft resends. A new connection
// from a member replaces the previous one from that member.
//
// Connections are authenticated below this protocol (Config.Listener and
// Config.Dial, internal/clusterauth): with a cluster key or mutual TLS, a
// hello from member N is accepted only on a connection that authenticated
// as "raft-node/N", and a stranger's connection is closed before it can
// send a hello.
//
// A hello with to = 0 is a question: the receiver answers with its own
// hello (its cluster and node id) and closes. A new member uses it to learn
// the cluster's database id (LearnClusterID).
//
// The replication address in a hello is used to fetch snapshots only when
// its host is the host of the sender's Raft address in the membership.

const (
	frameHello   = 1
	frameMessage = 2

	helloMagic   = "QSRT"
	helloVersion = 1

	// maxFrame bounds a frame: a message carries at most MaxSizePerMsg of
	// entries, but a single entry may hold a whole batch (64 MiB).
	maxFrame = 128 << 20
	// maxHelloFrame bounds the first frame of a connection, read before
	// the sender is known.
	maxHelloFrame = 4 << 10
	// peerQueue is the send queue of one peer.
	peerQueue = 4096
)

var errFrame = errors.New("qs: bad raft transport frame")

type helloMsg struct {
	cluster  [16]byte
	from, to uint64
	repl     string
}

func (h *helloMsg) encode() []byte {
	b := append([]byte(helloMagic), helloVersion)
	b = append(b, h.cluster[:]...)
	b = binary.BigEndian.AppendUint64(b, h.from)
	b = binary.BigEndian.AppendUint64(b, h.to)
	b = binary.AppendUvarint(b, uint64(len(h.repl)))
	return append(b, h.repl...)
}

func decodeHello(b []byte) (helloMsg, error) {
	var h helloMsg
	if len(b) < 4+1+16+16+1 || string(b[:4]) != helloMagic || b[4] != helloVersion {
		return h, fmt.Errorf("%w: not a version %d hello", errFrame, helloVersion)
	}
	copy(h.cluster[:], b[5:21])
	h.from = binary.BigEndian.Uint64(b[21:])
	h.to = binary.BigEndian.Uint64(b[29:])
	repl, rest, err := take(b[37:], 255)
	if err != nil || len(rest) != 0 {
		return h, fmt.Errorf("%w: hello replication address", errFrame)
	}
	h.repl = string(repl)
	return h, nil
}

func writeFrame(w io.Writer, typ byte, payload []byte) error {
	var hdr [5]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	c := crc32.Update(crc32.Checksum(hdr[:1], crcTable), crcTable, payload)
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := w.Write(payload); err != nil {
		return err
	}
	var tail [4]byte
	binary.BigEndian.PutUint32(tail[:], c)
	_, err := w.Write(tail[:])
	return err
}

// readFrame reads one frame of at most limit bytes; buf is reused when
// large enough.
func readFrame(r io.Reader, buf []byte, limit uint32) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if hdr[0] < frameHello || hdr[0] > frameAnswer {
		return 0, nil, fmt.Errorf("%w: unknown type %d", errFrame, hdr[0])
	}
	if n > limit {
		return 0, nil, fmt.Errorf("%w: length %d over %d", errFrame, n, limit)
	}
	if cap(buf) < int(n)+4 {
		buf = make([]byte, int(n)+4)
	}
	buf = buf[:int(n)+4]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	c := crc32.Update(crc32.Checksum(hdr[:1], crcTable), crcTable, buf[:n])
	if binary.BigEndian.Uint32(buf[n:]) != c {
		return 0, nil, fmt.Errorf("%w: checksum mismatch", errFrame)
	}
	return hdr[0], buf[:n], nil
}

// transport sends and receives the Raft messages of one member.
type transport struct {
	db      string
	m       *Metrics // counts under the label db
	cluster [16]byte
	self    uint64
	repl    string // this member's replication address, told to peers
	log     *slog.Logger
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)

	// Callbacks into the node; they must not block.
	deliver     func(m *pb.Message) bool // false: the inbox is full
	known       func(id uint64) bool     // is id a member (or a configured peer)?
	memberAddr  func(id uint64) string   // member id's Raft address ("" if none)
	unreachable func(id uint64)
	snapshotled func(id uint64, ok bool)
	// describe is this member's description, answered to a peer's ask
	// (describe.go); nil answers an empty one.
	describe func() []byte

	quit chan struct{}
	wg   sync.WaitGroup

	mu struct {
		sync.Mutex
		peers map[uint64]*peer
		repl  map[uint64]string // replication addresses peers told us
		conns map[net.Conn]struct{}
		// inbound is the receiving connection of each member: a new one
		// replaces (closes) the previous.
		inbound map[uint64]net.Conn
		ln      net.Listener
	}
}

type peer struct {
	id   uint64
	addr string
	q    chan *pb.Message
	stop chan struct{} // closed: stop at once (the peer moved)
	// drain is closed when the peer leaves the membership: what was
	// queued before is still sent, then the peer stops. Those messages
	// carry the commit of its removal; dropped, the removed member would
	// never learn it was removed.
	drain chan struct{}
}

// draining reports whether the peer left the membership (removePeer).
func (p *peer) draining() bool {
	select {
	case <-p.drain:
		return true
	default:
		return false
	}
}

func newTransport(db string, m *Metrics, cluster [16]byte, self uint64, repl string, dial func(ctx context.Context, network, addr string) (net.Conn, error), log *slog.Logger) *transport {
	t := &transport{db: db, m: m, cluster: cluster, self: self, repl: repl, log: log, quit: make(chan struct{}), dial: dial}
	t.mu.peers = map[uint64]*peer{}
	t.mu.repl = map[uint64]string{}
	t.mu.conns = map[net.Conn]struct{}{}
	t.mu.inbound = map[uint64]net.Conn{}
	return t
}

func (t *transport) errorf(kind string) { t.m.messageErrors.WithLabelValues(t.db, kind).Inc() }

// setPeer adds a peer or changes its address.
func (t *transport) setPeer(id uint64, addr string) {
	if id == t.self || addr == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.mu.peers[id]; ok {
		if p.addr == addr {
			return
		}
		close(p.stop)
	}
	p := &peer{id: id, addr: addr, q: make(chan *pb.Message, peerQueue), stop: make(chan struct{}), drain: make(chan struct{})}
	t.mu.peers[id] = p
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.runPeer(p)
	}()
}

// removePeer stops sending to a peer that left the membership, once the
// messages already queued for it are sent, or at the first failure to
// send them: a peer that is down or does not read is not waited for.
func (t *transport) removePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.mu.peers[id]; ok {
		close(p.drain)
		delete(t.mu.peers, id)
	}
}

// replAddr is the replication address peer id told us ("" if unknown).
func (t *transport) replAddr(id uint64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.repl[id]
}

// send queues messages for their peers, never blocking.
func (t *transport) send(msgs []*pb.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range msgs {
		p, ok := t.mu.peers[m.GetTo()]
		if !ok {
			t.errorf(kindUnknownPeer)
			continue
		}
		select {
		case p.q <- m:
		default:
			t.errorf(kindQueueFull)
			t.unreachable(p.id)
			if m.GetType() == pb.MessageType_MsgSnap {
				t.snapshotled(p.id, false)
			}
		}
	}
}

// runPeer owns the outgoing connection to p: it connects on demand, sends
// the hello, then the queued messages; on a failure it drops the
// connection and the messages in hand and reports the peer unreachable.
func (t *transport) runPeer(p *peer) {
	var c net.Conn
	var w *bufio.Writer
	var retryAt time.Time
	closeConn := func() {
		if c != nil {
			c.Close()
			c, w = nil, nil
		}
	}
	defer closeConn()
	for {
		var m *pb.Message
		select {
		case m = <-p.q:
		case <-p.drain:
			select { // nothing is queued after the drain began
			case m = <-p.q:
			default:
				return
			}
		case <-p.stop:
			return
		case <-t.quit:
			return
		}
		err := func() error {
			if c == nil {
				if time.Now().Before(retryAt) {
					return errors.New("peer down; retrying shortly")
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				conn, err := t.dial(ctx, "tcp", p.addr)
				cancel()
				if err != nil {
					retryAt = time.Now().Add(100 * time.Millisecond)
					t.errorf(kindDial)
					return err
				}
				c, w = conn, bufio.NewWriterSize(conn, 64<<10)
				h := helloMsg{cluster: t.cluster, from: t.self, to: p.id, repl: t.repl}
				c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				if err := writeFrame(w, frameHello, h.encode()); err != nil {
					return err
				}
			}
			b, err := proto.Marshal(m)
			if err != nil {
				return err
			}
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if err := writeFrame(w, frameMessage, b); err != nil {
				t.errorf(kindWrite)
				return err
			}
			if len(p.q) == 0 {
				if err := w.Flush(); err != nil {
					t.errorf(kindWrite)
					return err
				}
			}
			t.m.messagesSent.WithLabelValues(t.db).Inc()
			return nil
		}()
		isSnap := m.GetType() == pb.MessageType_MsgSnap
		if err != nil {
			closeConn()
			if p.draining() {
				return // a removed peer is sent what one connection takes
			}
			t.unreachable(p.id)
			if isSnap {
				t.snapshotled(p.id, false)
			}
			continue
		}
		if isSnap {
			if err := w.Flush(); err != nil {
				closeConn()
				t.snapshotled(p.id, false)
				continue
			}
			t.snapshotled(p.id, true)
		}
	}
}

// serve accepts peers' connections until close.
func (t *transport) serve(ln net.Listener) {
	t.mu.Lock()
	t.mu.ln = ln
	t.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-t.quit:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			t.log.Warn("raft accept failed", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		t.mu.Lock()
		select {
		case <-t.quit:
			// close ran between Accept and here: it did not see c.
			t.mu.Unlock()
			c.Close()
			return
		default:
		}
		t.mu.conns[c] = struct{}{}
		t.mu.Unlock()
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer func() {
				t.mu.Lock()
				delete(t.mu.conns, c)
				t.mu.Unlock()
				c.Close()
			}()
			peer, err := clusterauth.PeerOf(c)
			if err != nil {
				t.errorf(kindAuth)
				t.log.Warn("raft connection refused: not authenticated", "remote", c.RemoteAddr().String(), "err", err)
				return
			}
			if err := t.receive(c, peer); err != nil {
				t.log.Info("raft connection dropped", "remote", c.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

// receive reads one peer connection, authenticated as peer: hello, then
// messages.
func (t *transport) receive(c net.Conn, peer clusterauth.Peer) error {
	r := bufio.NewReaderSize(c, 64<<10)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, b, err := readFrame(r, nil, maxHelloFrame)
	if err != nil {
		if errors.Is(err, errFrame) {
			t.errorf(kindBadFrame)
		}
		return err
	}
	if typ != frameHello && typ != frameAsk {
		t.errorf(kindBadHello)
		return fmt.Errorf("%w: first frame is not a hello", errFrame)
	}
	h, err := decodeHello(b)
	if err != nil {
		t.errorf(kindBadHello)
		return err
	}
	if typ == frameAsk {
		return t.answerAsk(c, h, peer)
	}
	if h.to == 0 && h.cluster == ([16]byte{}) {
		// A question: who are you?
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		me := helloMsg{cluster: t.cluster, from: t.self, repl: t.repl}
		return writeFrame(c, frameHello, me.encode())
	}
	if err := t.checkHello(h, peer); err != nil {
		return err
	}
	t.mu.Lock()
	if old, ok := t.mu.inbound[h.from]; ok {
		old.Close()
	}
	t.mu.inbound[h.from] = c
	if h.repl != "" && sameHost(h.repl, t.memberAddr(h.from)) {
		t.mu.repl[h.from] = h.repl
	}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		if t.mu.inbound[h.from] == c {
			delete(t.mu.inbound, h.from)
		}
		t.mu.Unlock()
	}()
	// No idle deadline: a link between two followers carries nothing
	// between elections, and dropping it would lose the first vote request
	// of the next one. TCP keepalive ends connections to dead hosts.
	c.SetReadDeadline(time.Time{})
	var buf []byte
	for {
		typ, b, err := readFrame(r, buf, maxFrame)
		if err != nil {
			if errors.Is(err, errFrame) {
				t.errorf(kindBadFrame)
			}
			return err
		}
		if typ != frameMessage {
			t.errorf(kindBadFrame)
			return fmt.Errorf("%w: frame of type %d after the hello", errFrame, typ)
		}
		buf = b[:cap(b)]
		m := &pb.Message{}
		if err := proto.Unmarshal(b, m); err != nil {
			t.errorf(kindMalformed)
			return fmt.Errorf("qs: malformed raft message from %d: %w", h.from, err)
		}
		if m.GetFrom() != h.from || m.GetTo() != t.self {
			t.errorf(kindWrongPeer)
			return fmt.Errorf("qs: raft message from %d to %d on the connection of %d to %d", m.GetFrom(), m.GetTo(), h.from, t.self)
		}
		t.m.messagesReceived.WithLabelValues(t.db).Inc()
		if !t.deliver(m) {
			t.errorf(kindInboxFull)
		}
	}
}

// close stops every connection and goroutine of the transport.
func (t *transport) close() {
	close(t.quit)
	t.mu.Lock()
	if t.mu.ln != nil {
		t.mu.ln.Close()
	}
	for c := range t.mu.conns {
		c.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// LearnClusterID asks the members at addrs, in turn, for the cluster's
// database id (a new member joining without db_id in its configuration).
// A nil dial is plain TCP.
func LearnClusterID(ctx context.Context, addrs []string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) ([16]byte, error) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	h, _, err := askPeers(ctx, addrs, dial)
	return h.cluster, err
}

// askPeers asks the members at addrs, in turn, who they are, and returns
// the first answer and the address that gave it.
func askPeers(ctx context.Context, addrs []string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (helloMsg, string, error) {
	var errs []error
	for _, a := range addrs {
		h, err := ask(ctx, a, dial)
		if err == nil {
			return h, a, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", a, err))
	}
	return helloMsg{}, "", fmt.Errorf("ask the raft peers: %w", errors.Join(errs...))
}

func ask(ctx context.Context, addr string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (helloMsg, error) {
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := dial(dctx, "tcp", addr)
	if err != nil {
		return helloMsg{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := writeFrame(c, frameHello, (&helloMsg{}).encode()); err != nil {
		return helloMsg{}, err
	}
	typ, b, err := readFrame(bufio.NewReader(c), nil, maxHelloFrame)
	if err != nil {
		return helloMsg{}, err
	}
	if typ != frameHello {
		return helloMsg{}, fmt.Errorf("%w: answer is not a hello", errFrame)
	}
	h, err := decodeHello(b)
	if err != nil {
		return helloMsg{}, err
	}
	if h.cluster == ([16]byte{}) {
		return helloMsg{}, errors.New("the member does not know its cluster id")
	}
	return h, nil
}

// sameHost reports whether two host:port addresses name the same host.
func sameHost(a, b string) bool {
	ha, _, err1 := net.SplitHostPort(a)
	hb, _, err2 := net.SplitHostPort(b)
	return err1 == nil && err2 == nil && ha == hb
}
