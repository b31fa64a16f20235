package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quicksilver-kv/qs/internal/service"
	"github.com/quicksilver-kv/qs/internal/statuspage"
	"github.com/quicksilver-kv/qs/internal/tree"
)

// The tree of a replicated root: each member knows only the replicas that
// stream from it, so every member asks its peers, over the Raft transport
// (raftroot.DescribeMembers, authenticated as Raft messages are), for a
// description of themselves: their HTTP address and their own subtree.
// Any member's tree is then the whole cluster's: the leader on top, the
// other members under it, each with its replicas (tree.Cluster).

// memberDescription is what a member answers a peer's ask.
type memberDescription struct {
	// HTTP is the member's HTTP address, where clients write.
	HTTP string `json:"http"`
	// Tree is a tree report (internal/tree) of the member and the
	// replicas below it.
	Tree json.RawMessage `json:"tree"`
}

// peerView is the last description a member got of one peer.
type peerView struct {
	node tree.Node
	http string
	at   time.Time
}

// clusterTree keeps what one member learned of its peers.
type clusterTree struct {
	mu   sync.Mutex
	byID map[uint64]peerView
}

// attachCluster makes db's tree the whole cluster's.
func (s *Server) attachCluster(db *service.Database, slot *raftSlot) {
	slot.peers.byID = map[uint64]peerView{}
	db.Tree = func() tree.Node { return s.clusterNode(db, slot) }
}

// describe is this member's description of database db.
func (s *Server) describe(db *service.Database, slot *raftSlot) func() []byte {
	return func() []byte {
		body, err := tree.Encode(tree.Report{Node: s.reports.children.Compose(db.Name, memberNode(db, slot), time.Now())})
		if err != nil {
			s.log.Warn("member description not made", "db", db.Name, "err", err)
			return nil
		}
		out, err := json.Marshal(memberDescription{HTTP: s.httpAdvertised(), Tree: body})
		if err != nil {
			return nil
		}
		return out
	}
}

// decodeDescription parses and checks a peer's description.
func decodeDescription(b []byte) (memberDescription, tree.Node, error) {
	var d memberDescription
	if err := json.Unmarshal(b, &d); err != nil {
		return d, tree.Node{}, fmt.Errorf("%w: member description: %v", tree.ErrInvalid, err)
	}
	if len(d.HTTP) > tree.MaxName {
		return d, tree.Node{}, fmt.Errorf("%w: member HTTP address over %d bytes", tree.ErrInvalid, tree.MaxName)
	}
	r, err := tree.Decode(d.Tree)
	if err != nil {
		return d, tree.Node{}, err
	}
	return d, r.Node, nil
}

// memberNode is this member's own node: its role, and its Raft state as
// its state.
func memberNode(db *service.Database, slot *raftSlot) tree.Node {
	n := self(db)
	if rn := slot.Load(); rn != nil {
		n.State = raftState(rn.Status().State)
	}
	if n.State == "" {
		n.State = "starting"
	}
	n.LagSeconds = 0
	return n
}

// runClusterTree asks the peers of db's member for their descriptions
// every statuspage.Every, until ctx ends.
func (s *Server) runClusterTree(ctx context.Context, db *service.Database, slot *raftSlot) {
	t := time.NewTicker(statuspage.Every)
	defer t.Stop()
	for {
		if rn := slot.Load(); rn != nil {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			answers := rn.DescribeMembers(actx)
			cancel()
			now := time.Now()
			slot.peers.mu.Lock()
			for _, a := range answers {
				if a.Err != nil {
					continue
				}
				d, n, err := decodeDescription(a.Body)
				if err != nil {
					s.meters.server.memberDescriptionsInvalid.WithLabelValues(db.Name).Inc()
					s.log.Info("member description refused", "db", db.Name, "member", a.ID, "err", err)
					continue
				}
				slot.peers.byID[a.ID] = peerView{node: n, http: d.HTTP, at: now}
			}
			slot.peers.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// clusterNode is the whole cluster's tree as this member knows it: peers
// not heard from within tree.DefaultTTL show as unreachable.
func (s *Server) clusterNode(db *service.Database, slot *raftSlot) tree.Node {
	now := time.Now()
	me := tree.Member{Node: s.reports.children.Compose(db.Name, memberNode(db, slot), now)}
	rn := slot.Load()
	if rn == nil {
		return me.Node
	}
	st := rn.Status()
	me.ID = st.NodeID
	var peers []tree.Member
	slot.peers.mu.Lock()
	for id, addr := range st.Members {
		if id == st.NodeID {
			continue
		}
		v, ok := slot.peers.byID[id]
		if !ok || now.Sub(v.at) > tree.DefaultTTL {
			peers = append(peers, tree.Member{ID: id, Node: tree.Node{Name: "member " + strconv.FormatUint(id, 10) + " (" + addr + ")",
				Role: "root", State: "unreachable"}})
			continue
		}
		peers = append(peers, tree.Member{ID: id, Node: v.node})
	}
	slot.peers.mu.Unlock()
	return tree.Cluster(me, peers, st.Leader)
}

// leaderHTTP is the HTTP address of db's leader as this member knows it
// ("" if unknown).
func (s *Server) leaderHTTP(slot *raftSlot) string {
	rn := slot.Load()
	if rn == nil {
		return ""
	}
	st := rn.Status()
	if st.Leader == st.NodeID && st.Leader != 0 {
		return s.httpAdvertised()
	}
	slot.peers.mu.Lock()
	defer slot.peers.mu.Unlock()
	if v, ok := slot.peers.byID[st.Leader]; ok && time.Since(v.at) <= tree.DefaultTTL {
		return v.http
	}
	return ""
}

// httpAdvertised is this node's HTTP address as others reach it: the
// listening address, with the node name in place of an unspecified host
// (0.0.0.0 or ::).
func (s *Server) httpAdvertised() string {
	if s.httpLn == nil {
		return ""
	}
	a := s.httpLn.Addr().String()
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return a
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() && s.cfg.NodeName != "" {
		return net.JoinHostPort(s.cfg.NodeName, port)
	}
	return a
}

// raftState is a Raft state as the tree shows it: leader, follower,
// candidate, pre_candidate.
func raftState(s string) string {
	switch s {
	case "StateLeader":
		return "leader"
	case "StateFollower":
		return "follower"
	case "StateCandidate":
		return "candidate"
	case "StatePreCandidate":
		return "pre_candidate"
	}
	return strings.ToLower(strings.TrimPrefix(s, "State"))
}
