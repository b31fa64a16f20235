package repl

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"

	"github.com/quicksilver-kv/qs/internal/headsig"
	"github.com/quicksilver-kv/qs/internal/store"
	"github.com/quicksilver-kv/qs/internal/wal"
)

// Signed heads: the root signs the head of its log (index and chain hash)
// with its Ed25519 key (internal/headsig); a replica that has the
// cluster's public key applies entries only once a signed head vouches
// for them, and forwards the heads it verified to its own replicas.
const (
	// HeadVersion is the first protocol version with Head messages: a
	// server sends them to stream clients of this version or later.
	HeadVersion uint16 = 4
	// MsgHead carries one signed head, server → client, after the Entries
	// batch that ends at its index and with idle Progress.
	MsgHead MsgType = 13
)

// Head is one signed head of the log.
//
//	payload := index(8 BE) hash(32) signature(64)
type Head struct {
	headsig.Head
}

func (*Head) Type() MsgType { return MsgHead }

const headLen = 8 + len(wal.Hash{}) + headsig.SigSize

func (m *Head) AppendPayload(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, m.Index)
	dst = append(dst, m.Hash[:]...)
	return append(dst, m.Sig[:]...)
}

func decodeHead(p []byte) (*Head, error) {
	if len(p) != headLen {
		return nil, fmt.Errorf("%w: head of %d bytes, want %d", ErrMalformed, len(p), headLen)
	}
	m := &Head{}
	m.Index = binary.BigEndian.Uint64(p)
	copy(m.Hash[:], p[8:40])
	copy(m.Sig[:], p[40:])
	return m, nil
}

// HeadSource is where a server takes the signed heads it sends with the
// log of one database. The zero value sends none.
type HeadSource struct {
	// Signer signs any head of the log: the root, or an HA root member.
	Signer *headsig.Signer
	// Book holds the heads a replica verified; it forwards them, and
	// sends only entries a head in it covers.
	Book *headsig.Book
	// Upstream, on a replica without Signer, dials its source: a
	// bootstrap that asks for the root's seal is relayed there
	// (seal_relay.go). Nil: such a bootstrap is refused.
	Upstream func(ctx context.Context) (net.Conn, string, error)
}

// headGate holds back a session's verified-chain entries until a signed
// head vouches for them, free of I/O. Entries reach it in order (after the
// chain check); it releases them, up to a head's index, once that head's
// signature verifies and the entry at its index has its hash.
type headGate struct {
	v  *headsig.Verifier
	db store.DBID
	// limit is the most bytes of entries held back.
	limit int

	applied     uint64   // the store's applied index
	appliedHash wal.Hash // and its hash
	pending     []wal.Entry
	bytes       int
	want        *headsig.Head // a verified head beyond the pending entries
}

// errSignature and errUnsigned are the two ways a stream fails the gate.
func errSignature(format string, args ...any) error {
	return &streamError{kindSignature, fmt.Errorf("qs: replication log does not match the root's signed head: "+format, args...)}
}

// entries takes a chain-verified batch and returns what may be applied
// now, with the head that vouches for it.
func (g *headGate) entries(es []wal.Entry) ([]wal.Entry, *headsig.Head, error) {
	for i := range es {
		g.bytes += es[i].BodySize()
	}
	g.pending = append(g.pending, es...)
	if out, h, err := g.release(); out != nil || err != nil {
		return out, h, err
	}
	if g.bytes > g.limit {
		return nil, nil, &streamError{kindUnsigned, fmt.Errorf("qs: replication source sent %d bytes of entries (%d..%d) without a signed head: more than the %d held back",
			g.bytes, g.pending[0].Index, g.pending[len(g.pending)-1].Index, g.limit)}
	}
	return nil, nil, nil
}

// head takes a received head and returns what may be applied now, and
// the head to keep as verified (also when it vouches for the applied
// index itself).
func (g *headGate) head(h headsig.Head) ([]wal.Entry, *headsig.Head, error) {
	if err := g.v.Verify(g.db, h); err != nil {
		return nil, nil, &streamError{kindSignature, err}
	}
	switch {
	case h.Index < g.applied:
		return nil, nil, nil // vouches for entries already applied
	case h.Index == g.applied:
		if h.Hash != g.appliedHash {
			return nil, nil, fmt.Errorf("%w: the root signed another hash for our applied entry %d", ErrForked, h.Index)
		}
		return nil, &h, nil // vouches for the applied head
	}
	if g.want == nil || h.Index > g.want.Index {
		g.want = &h
	}
	return g.release()
}

// release returns the pending entries up to the wanted head once they
// reach it.
func (g *headGate) release() ([]wal.Entry, *headsig.Head, error) {
	if g.want == nil || len(g.pending) == 0 {
		return nil, nil, nil
	}
	first, last := g.pending[0].Index, g.pending[len(g.pending)-1].Index
	h := g.want
	if h.Index > last {
		return nil, nil, nil
	}
	if h.Index < first { // cannot happen: heads at or below applied return early
		g.want = nil
		return nil, nil, nil
	}
	k := int(h.Index - first)
	if g.pending[k].Hash != h.Hash {
		return nil, nil, errSignature("entry %d hash %x, signed %x", h.Index, g.pending[k].Hash[:8], h.Hash[:8])
	}
	out := g.pending[: k+1 : k+1]
	g.pending = g.pending[k+1:]
	g.bytes = 0
	for i := range g.pending {
		g.bytes += g.pending[i].BodySize()
	}
	g.want = nil
	g.applied, g.appliedHash = h.Index, h.Hash
	return out, h, nil
}
