package tree

import (
	"cmp"
	"slices"
)

// Member is one member of a replicated (Raft) root, with the replication
// subtree of the replicas that stream from it.
type Member struct {
	ID   uint64
	Node Node
}

// Cluster is the tree of a replicated root: the leader on top (self when
// no leader is known), the other members under it (the leader sends them
// the log), each with its own replicas, then the leader's own replicas;
// cut to the report bounds. Members come sorted by id.
func Cluster(self Member, peers []Member, leader uint64) Node {
	all := append([]Member{self}, peers...)
	slices.SortStableFunc(all, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	top := self
	for _, m := range all {
		if m.ID == leader && leader != 0 {
			top = m
			break
		}
	}
	out := top.Node
	out.Children = nil
	for _, m := range all {
		if m.ID != top.ID {
			out.Children = append(out.Children, m.Node)
		}
	}
	out.Children = append(out.Children, top.Node.Children...)
	return Cut(out, MaxNodes, MaxDepth)
}
