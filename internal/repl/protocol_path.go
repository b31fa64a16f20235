package repl

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// A node's path in the tree: which nodes its entries pass through on
// their way from the root. A node that finds its sources through the
// gossip overlay must never take one of its ancestors as a child (a
// cycle, which no entry reaches), and the ancestry the overlay gossips
// may be older than a move that just happened. So each source tells its
// children its actual ancestry over the stream itself, at once and again
// whenever it changes; a child's ancestry is then its source's, one
// longer, a few milliseconds after any move above it.
//
// A server sends a Path to stream clients of PathVersion or later before
// the first entries, and again as soon as its path changes. A server of
// an older version refuses the Hello with code "version": the client then
// speaks RootVersion to it, and judges ancestry from gossip alone.
const (
	// PathVersion is the first protocol version with Path messages.
	PathVersion uint16 = 7
	// MsgPath carries the sender's path, server → client, on stream
	// connections of version PathVersion or later.
	MsgPath MsgType = 18
	// MaxPathNodes bounds the nodes of one Path.
	MaxPathNodes = 32
)

// Path is the sender's ancestry as far as it knows it: its own node id
// first, then its source's, and so on; the root's last when the chain
// reaches it. A node between sources sends only its own id; a node that
// knows no ids (it is not in an overlay) sends none.
//
//	payload := count(uvarint ≤ 32) id(8 BE)*
type Path struct {
	Nodes []uint64
}

func (*Path) Type() MsgType { return MsgPath }

func (m *Path) AppendPayload(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(m.Nodes)))
	for _, id := range m.Nodes {
		dst = binary.BigEndian.AppendUint64(dst, id)
	}
	return dst
}

func decodePath(p []byte) (*Path, error) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n > MaxPathNodes {
		return nil, fmt.Errorf("%w: path with a bad node count", ErrMalformed)
	}
	p = p[k:]
	if uint64(len(p)) != 8*n {
		return nil, fmt.Errorf("%w: path of %d nodes in %d bytes", ErrMalformed, n, len(p))
	}
	m := &Path{}
	for i := range n {
		m.Nodes = append(m.Nodes, binary.BigEndian.Uint64(p[8*i:]))
	}
	return m, nil
}

// PathSource tells a server the path of one database on this node.
type PathSource interface {
	// Path returns the path to send now (this node first), and a channel
	// closed when it may have changed.
	Path() (nodes []uint64, changed <-chan struct{})
}

// FixedPath is the path of a node that never moves: a root's, itself.
func FixedPath(nodes ...uint64) PathSource { return fixedPath(nodes) }

type fixedPath []uint64

func (p fixedPath) Path() ([]uint64, <-chan struct{}) { return p, nil }

// ReplicaPath is the path of replica r on the node self: self, then what
// r's source sent (only self between sources, or in a cycle).
func ReplicaPath(self uint64, r *Replica) PathSource { return replicaPath{self, r} }

type replicaPath struct {
	self uint64
	r    *Replica
}

func (p replicaPath) Path() ([]uint64, <-chan struct{}) {
	src, changed := p.r.SourcePath()
	return ExtendPath(p.self, src), changed
}

// ExtendPath is the path a node sends its children: its own id, then its
// source's path. Where its source's path holds the node itself (a cycle
// has formed), only the node's own id is sent, so that no path grows
// around the cycle. At most MaxPathNodes. Pure.
func ExtendPath(self uint64, source []uint64) []uint64 {
	if slices.Contains(source, self) {
		return []uint64{self}
	}
	out := make([]uint64, 0, min(len(source)+1, MaxPathNodes))
	out = append(out, self)
	return append(out, source[:min(len(source), MaxPathNodes-1)]...)
}

// pathSender sends a stream client the node's path whenever it changed
// since it last sent it (the first call always sends). A nil pathSender
// (a client older than PathVersion, or a node with no path) sends none.
type pathSender struct {
	src     PathSource
	sent    bool
	last    []uint64
	changed <-chan struct{}
}

// wait is closed when the path may have changed; nil (never) when no
// path is sent.
func (ps *pathSender) wait() <-chan struct{} {
	if ps == nil {
		return nil
	}
	return ps.changed
}

// send sends a Path if the path changed.
func (ps *pathSender) send(cn *conn) error {
	if ps == nil {
		return nil
	}
	if ps.sent {
		select {
		case <-ps.changed:
		default:
			return nil
		}
	}
	nodes, changed := ps.src.Path()
	ps.changed = changed
	if len(nodes) > MaxPathNodes {
		nodes = nodes[:MaxPathNodes]
	}
	if ps.sent && slices.Equal(nodes, ps.last) {
		return nil
	}
	if err := cn.send(&Path{Nodes: nodes}); err != nil {
		return err
	}
	ps.sent, ps.last = true, nodes
	return nil
}
