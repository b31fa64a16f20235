package raftroot

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/quicksilver-kv/qs/internal/clusterauth"
)

// Members describe themselves to each other: a member asks each peer for
// its description (an opaque document the server makes: its HTTP address,
// its replication subtree) over the peer's Raft listener, authenticated as
// for Raft messages.
//
//	ask    := frame type 3, payload hello (to = the asked member)
//	answer := frame type 4, payload the asked member's description
//
// The asked member checks the ask's hello exactly as a message
// connection's (cluster, addressee, membership, authenticated claim),
// answers once and closes. A member without a description answers an
// empty one. An older member closes the connection on the unknown frame
// type: the asker counts the peer as not answering.
const (
	frameAsk    = 3
	frameAnswer = 4

	// MaxDescription bounds a member's description, in bytes.
	MaxDescription = 2 << 20
)

// Description is what one peer answered about itself.
type Description struct {
	ID   uint64 // the peer's member id
	Addr string // its Raft address
	Body []byte // its description; nil when Err is set
	Err  error
}

// answerAsk answers the ask of member h.from, authenticated as peer, with
// this member's description.
func (t *transport) answerAsk(c net.Conn, h helloMsg, peer clusterauth.Peer) error {
	if err := t.checkHello(h, peer); err != nil {
		return err
	}
	var body []byte
	if t.describe != nil {
		body = t.describe()
	}
	if len(body) > MaxDescription {
		t.errorf(kindDescription)
		return fmt.Errorf("qs: this member's description is %d bytes, over %d", len(body), MaxDescription)
	}
	t.m.descriptions.WithLabelValues(t.db, "answered").Inc()
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return writeFrame(c, frameAnswer, body)
}

// checkHello refuses, counting why, a hello not from a member of this
// cluster to this member, or from another member than the connection
// authenticated as.
func (t *transport) checkHello(h helloMsg, peer clusterauth.Peer) error {
	switch {
	case h.cluster != t.cluster:
		t.errorf(kindWrongCluster)
		return fmt.Errorf("qs: raft peer %d belongs to cluster %x, this is %x", h.from, h.cluster, t.cluster)
	case h.to != t.self:
		t.errorf(kindWrongPeer)
		return fmt.Errorf("qs: raft peer %d addressed node %d, this is %d", h.from, h.to, t.self)
	case !t.known(h.from):
		t.errorf(kindUnknownPeer)
		return fmt.Errorf("qs: raft peer %d is not a member", h.from)
	case peer.Authenticated && !peer.Has(clusterauth.RaftClaim(h.from)):
		t.errorf(kindUnauthorized)
		return fmt.Errorf("qs: raft connection authenticated as %v says it is member %d", peer.Claims, h.from)
	}
	return nil
}

// DescribeMembers asks every other member, at once, for its description,
// each within ctx and at most 5 s. The answers come sorted by member id.
func (n *Node) DescribeMembers(ctx context.Context) []Description {
	n.mu.Lock()
	members := maps.Clone(n.mu.members)
	n.mu.Unlock()
	ids := slices.Sorted(maps.Keys(members))
	out := make([]Description, 0, len(ids))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, id := range ids {
		if id == n.cfg.NodeID {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := helloMsg{cluster: n.st.DBID(), from: n.cfg.NodeID, to: id, repl: n.cfg.ReplAddr}
			body, err := askDescription(ctx, members[id], h, n.cfg.Dial)
			outcome := "ok"
			if err != nil {
				outcome = "failed"
			}
			n.cfg.Metrics.descriptions.WithLabelValues(n.cfg.Database, outcome).Inc()
			mu.Lock()
			out = append(out, Description{ID: id, Addr: members[id], Body: body, Err: err})
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b Description) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// askDescription asks the member at addr, with hello h, for its
// description.
func askDescription(ctx context.Context, addr string, h helloMsg, dial func(ctx context.Context, network, addr string) (net.Conn, error)) ([]byte, error) {
	if addr == "" {
		return nil, errors.New("no raft address")
	}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := dial(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	if err := writeFrame(c, frameAsk, h.encode()); err != nil {
		return nil, err
	}
	typ, b, err := readFrame(bufio.NewReader(c), nil, MaxDescription)
	if err != nil {
		return nil, err
	}
	if typ != frameAnswer {
		return nil, fmt.Errorf("%w: answer of type %d", errFrame, typ)
	}
	return b, nil
}
